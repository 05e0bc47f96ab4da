"""Shared builders for the router training tests: a tiny random Llama with the packaged SmolLM2 tokenizer,
and a small label DatasetDict in the shape the labeling stage saves."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from tiermem import contract
from tiermem.models.adapter import BASE_KEY, base_config_digest
from tiermem.models.specs import cache_root
from tiermem.runs.run_meta import RUN_META_FILE, RunMeta, RunMetaFile, file_digests, read_run_meta
from tiermem.runs.rundir import claim_output_dir


def edit_run_meta(run_dir: str | Path, **changes: Any) -> RunMeta:
    """Set fields of a run's tiermem_router.json, as a stage does: read once, changed, written once."""
    record = RunMetaFile.open(run_dir)
    for key, value in changes.items():
        assert key in RunMeta.__dataclass_fields__, key
        setattr(record.meta, key, value)
    record.save()
    return record.meta


def build_tiny_model_dir(path: Path, seed: int = 0) -> Path:
    """A 2-layer random LlamaForCausalLM with the real SmolLM2 tokenizer and chat template (~1.6M params)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tiermem.models.specs import DEFAULT_LM, load_tokenizer

    tokenizer = load_tokenizer(DEFAULT_LM)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path



def build_collapsed_base(path: Path, margin: float = -12.0, answer_logit: float = 20.0) -> Path:
    """A tiny Llama whose decision token is collapsed onto ANSWER: ESCALATE's logit sits `margin` below ANSWER's on
    every prompt, both far above every other token (the demo's SFT margin in miniature, built in a second).

    Every attention and MLP output projection is zeroed, so the residual stream at the decision position is the
    embedding of the output prefix's last token, the same on every prompt; the two action rows of the (tied) output
    layer are then set along its normed direction. LoRA on o_proj/down_proj starts at zero and can move it."""
    import torch

    from serving.routers.lm_head import action_token_ids
    from tiermem.models.specs import load_causal_lm

    build_tiny_model_dir(path)
    model, tokenizer = load_causal_lm(str(path), device="cpu")
    answer_id, escalate_id = action_token_ids(tokenizer)
    last = tokenizer(contract.render_prompt(tokenizer, "q", []) + contract.OUTPUT_PREFIX,
                     add_special_tokens=False).input_ids[-1]
    assert last not in (answer_id, escalate_id)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        u = model.model.norm(model.model.embed_tokens.weight[last][None, None])[0, 0]
        head = model.get_output_embeddings().weight
        head[answer_id] = answer_logit * u / u.dot(u)
        head[escalate_id] = (answer_logit + margin) * u / u.dot(u)
    model.save_pretrained(path)
    return path

def train_on_completions(model: Any, rows: list[tuple[list[int], list[int]]], pad_id: int, steps: int,
                         lr: float) -> None:
    """Full-batch AdamW on (prompt ids, completion ids) rows, loss on the completions only.

    Left padding puts every completion in the last `keep` positions, so only those go through the 49k-row
    output layer (full-sequence logits made these fixtures ~10x slower)."""
    import torch

    width = max(len(p) + len(t) for p, t in rows)
    keep = max(len(t) for _, t in rows) + 1
    ids = torch.tensor([[pad_id] * (width - len(p) - len(t)) + p + t for p, t in rows])
    mask = torch.tensor([[0] * (width - len(p) - len(t)) + [1] * (len(p) + len(t)) for p, t in rows])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    targets = torch.tensor([[-100] * (keep - 1 - len(t)) + t for _, t in rows])
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    for _ in range(steps):
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep).logits
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(), ignore_index=-100)
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()


def record(i: int, conv: str, s_ok: bool | None, r_ok: bool | None, tokens: int = 1000) -> dict[str, Any]:
    label = "ANSWER" if s_ok else ("ESCALATE" if s_ok is False and r_ok else None)
    reason = "A summary states it." if label == "ANSWER" else "The summaries lack the date."
    return {
        "conv_id": conv,
        "qid": f"{conv}-q{i}",
        "question": f"When did Caroline do thing number {i}?",
        "gold_answer": f"{i} May 2023",
        "category": "2",
        "router_summaries": [
            {"unit_id": f"u{i}a", "text": f"Caroline did thing number {i} in May.", "score": 0.8,
             "date": "2023-05-08", "page_ids": [f"{conv}-p0"]},
            {"unit_id": f"u{i}b", "text": "Melanie paints sunsets.", "score": 0.4, "date": None, "page_ids": []},
        ],
        "label": label,
        "label_rule": "evidence",
        "drop_reason": None if label else "both paths wrong",
        "sft_target": contract.render_target(label, reason) if label else None,
        "s_ok": s_ok,
        "r_ok": r_ok,
        "cost_research_input_tokens": tokens,
        "cost_summary_input_tokens": 300,
    }


def build_label_dataset(path: Path) -> Path:
    """train: 6 labeled (4 ANSWER / 2 ESCALATE) + 1 dropped; validation: 3 labeled; test: 2 labeled."""
    from datasets import Dataset, DatasetDict

    train = [record(0, "c1", True, True, 800), record(1, "c1", True, False, 1200), record(2, "c1", True, True, 400),
             record(3, "c2", True, True, 2000), record(4, "c2", False, True, 1600), record(5, "c2", False, True, 900),
             record(6, "c2", False, False, 700)]
    validation = [record(7, "c3", True, True), record(8, "c3", False, True), record(9, "c3", False, True)]
    test = [record(10, "c4", True, True), record(11, "c4", False, True)]
    DatasetDict({"train": Dataset.from_list(train), "validation": Dataset.from_list(validation),
                 "test": Dataset.from_list(test)}).save_to_disk(str(path))
    return path


def build_contract_base(path: Path, dataset_dir: Path, steps: int = 45, seed: int = 0) -> Path:
    """A tiny Llama fully trained to emit the contract JSON for the label dataset's prompts, with each prompt
    seen under both actions: its first action token is a coin flip, so GRPO samples differ (reward variance)
    while the rest of the JSON is fixed. Only the completion positions go through the 49k-row output layer."""
    import torch
    from datasets import load_from_disk

    from tiermem.models.specs import load_causal_lm

    build_tiny_model_dir(path, seed=seed)
    model, tokenizer = load_causal_lm(str(path), device="cpu")
    rows = []
    for rec in load_from_disk(str(dataset_dir))["train"]:
        prompt = tokenizer(contract.render_prompt(tokenizer, rec["question"], rec["router_summaries"])).input_ids
        for action in contract.ACTIONS:
            rows.append((prompt, tokenizer(contract.render_target(action, "ok") + tokenizer.eos_token).input_ids))
    torch.manual_seed(seed)
    train_on_completions(model, rows, tokenizer.pad_token_id, steps, lr=5e-3)
    model.save_pretrained(path)
    return path


# ---- a small trained router run directory ------------------------------------------------------------
# A small trained router run directory for the serving tests, built in seconds.
# 
# A tiny random Llama with the real SmolLM2 tokenizer and chat template is trained to emit the contract JSON
# with the *opposite* labels; a LoRA adapter on top is then trained to the right labels. So the run directory
# has the exact layout training produces (adapter + tokenizer + tiermem_router.json over a base model spec),
# its decisions are confident (fast and generate paths can be compared honestly), and a router that ignored the
# adapter would route every fixture the wrong way.
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


def make_router_run() -> Path:
    """Base + adapter run directory; built once and kept under $TIERMEM_CACHE/test-fixtures, keyed by this
    file's source, the metadata's format (run_meta.py) and the contract version (training takes ~20 s of CPU; reruns
    should not pay it). Shared by every test: a test that writes into a run directory (calibrate, eval) copies it
    first."""
    from tiermem.runs import run_meta

    sources = Path(__file__).read_text() + Path(run_meta.__file__).read_text()
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
        RunMetaFile.new(cached / "run", meta).save()
    return cached / "run"


def _build(root: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from tiermem.models.specs import DEFAULT_LM, load_tokenizer

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
    claim_output_dir(run_dir, "sft", lock=False)  # an SFT run, marked as the stage marks it
    peft_model.save_pretrained(run_dir)
    tokenizer.save_pretrained(run_dir)
    RunMetaFile.new(run_dir, RunMeta(
        contract_version=contract.CONTRACT_VERSION, base_model=str(base_dir), stage="sft",
        training={"recipe": "tests/helpers/router_fixtures.py", "lora_r": 8, "steps": 40},
        data={"dataset": "tests fixtures", "label_rules": ["evidence"], "train_records": len(FIXTURES),
              BASE_KEY: base_config_digest(model.config)},
        metrics={"validation": {"accuracy": 1.0, "escalation_rate": 0.5, "n": len(FIXTURES)}},
        files=file_digests(run_dir))).save()
