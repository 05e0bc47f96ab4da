"""A small trained router run directory for the serving tests, built in seconds.

A tiny random Llama with the real SmolLM2 tokenizer and chat template is trained to emit the contract JSON
with the *opposite* labels; a LoRA adapter on top is then trained to the right labels. So the run directory
has the exact layout training produces (adapter + tokenizer + tiermem_router.json over a base model spec),
its decisions are confident (fast and generate paths can be compared honestly), and a router that ignored the
adapter would route every fixture the wrong way.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from tests.router_fixtures import train_on_completions
from tiermem import contract
from tiermem.artifacts import RUN_META_FILE, RunMeta, read_run_meta, write_run_meta
from tiermem.models import cache_root

# Rule the router learns: "When ..." questions need the raw pages, "What ..." ones do not.
FIXTURES: list[tuple[str, list[dict], str]] = [
    ("What is Caroline's job?", [{"text": "Caroline works as a counselor.", "date": "2023-05-08"}], "ANSWER"),
    ("When did Caroline move?", [{"text": "Caroline moved to Boston.", "date": None}], "ESCALATE"),
    ("What pet does Mel have?", [{"text": "Mel has a dog named Rex.", "date": "2023-06-01"},
                                 {"text": "Mel likes parks.", "date": "2023-06-02"}], "ANSWER"),
    ("When was the concert?", [{"text": "They went to a concert.", "date": "2023-07-14"}], "ESCALATE"),
    ("What sport does Jon play?", [], "ANSWER"),
    ("When did Jon start running?", [{"text": "Jon runs every morning.", "date": "2023-08-09"},
                                     {"text": "Jon bought shoes.", "date": None},
                                     {"text": "Jon ran a race.", "date": "2023-09-01"}], "ESCALATE"),
]
REASONS = {"ANSWER": "A summary states it.", "ESCALATE": "The summaries lack it."}
_FLIP = {"ANSWER": "ESCALATE", "ESCALATE": "ANSWER"}


def _train(model, tokenizer, labels: list[str], steps: int, lr: float) -> None:
    rows = []
    for (q, s, _), label in zip(FIXTURES, labels, strict=True):
        prompt = tokenizer(contract.render_prompt(tokenizer, q, s), add_special_tokens=False).input_ids
        target = tokenizer(contract.render_target(label, REASONS[label]) + tokenizer.eos_token,
                           add_special_tokens=False).input_ids
        rows.append((prompt, target))
    train_on_completions(model, rows, tokenizer.pad_token_id, steps, lr)


def make_router_run(root: Path | None = None) -> Path:
    """Base + adapter run directory; built once and kept under $TIERMEM_CACHE/test-fixtures, keyed by this
    file's source and the contract version (training takes ~20 s of CPU; reruns should not pay it).
    `root` is accepted for older callers and unused."""
    sources = Path(__file__).read_text() + (Path(__file__).parent / "router_fixtures.py").read_text()
    key = hashlib.sha256((sources + contract.CONTRACT_VERSION).encode()).hexdigest()[:12]
    cached = cache_root() / "test-fixtures" / f"router-{key}"
    if (cached / "run" / RUN_META_FILE).is_file():
        return cached / "run"
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cached.parent, prefix=".building-"))
    _build(tmp)
    try:
        os.replace(tmp, cached)  # atomic: a half-built fixture is never reused
    except OSError:  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)
    # tiermem_router.json points at the base by absolute path: rewrite it for the final location
    meta = read_run_meta(cached / "run")
    if meta.base_model != str(cached / "base"):
        meta.base_model = str(cached / "base")
        write_run_meta(cached / "run", meta)
    return cached / "run"


def _build(root: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from tiermem.models import DEFAULT_LM, load_tokenizer

    torch.manual_seed(0)
    tokenizer = load_tokenizer(DEFAULT_LM)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(config)
    labels = [label for _, _, label in FIXTURES]
    _train(model, tokenizer, [_FLIP[x] for x in labels], steps=60, lr=5e-3)
    base_dir, run_dir = root / "base", root / "run"
    model.save_pretrained(base_dir)
    tokenizer.save_pretrained(base_dir)
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj",
                                                                                    "up_proj", "down_proj"]))
    _train(peft_model, tokenizer, labels, steps=40, lr=1e-2)
    peft_model.save_pretrained(run_dir)
    tokenizer.save_pretrained(run_dir)
    write_run_meta(run_dir, RunMeta(
        contract_version=contract.CONTRACT_VERSION, base_model=str(base_dir), stage="sft",
        training={"recipe": "tests/router_fixture.py", "lora_r": 8, "steps": 40},
        data={"dataset": "tests fixtures", "label_rule": "evidence", "train_records": len(FIXTURES)},
        metrics={"validation": {"accuracy": 1.0, "escalation_rate": 0.5, "n": len(FIXTURES)}}))
