"""What a user who never read our code gets from the hub (tests/helpers/hub_server.py through the real clients):
a pushed router loads with plain PEFT, its base named by hub id and resolved through the hub (here the local
one) or, offline, the hub cache; a pushed label dataset carries a dataset card with its license.

The clients read HF_ENDPOINT / HF_HUB_OFFLINE at import, so they run in subprocesses (see tests/test_hub.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.hub_client import TOKEN, _env, _run
from tests.helpers.hub_server import local_hub
from tests.helpers.router_fixtures import FIXTURES, make_router_run
from tiermem.runs.run_meta import RunMetaFile, read_run_meta

UPLOAD_BASE = """
import sys
from huggingface_hub import HfApi
api = HfApi()
api.create_repo(sys.argv[1], private=False, exist_ok=True)
api.upload_folder(repo_id=sys.argv[1], folder_path=sys.argv[2])
"""

PEFT_LOAD = """
import json, sys, torch
from peft import AutoPeftModelForCausalLM
from transformers import AutoTokenizer
repo, text = sys.argv[1], sys.argv[2]
model = AutoPeftModelForCausalLM.from_pretrained(repo).eval()
tokenizer = AutoTokenizer.from_pretrained(repo)
with torch.no_grad():
    logits = model(**tokenizer(text, return_tensors="pt", add_special_tokens=False)).logits[0, -1]
out = {"base_path": model.base_model.model.name_or_path, "logits": logits[:64].tolist()}
if sys.argv[3] == "router":
    from serving.routers import Router
    out["p"] = Router.from_pretrained(repo).route(text, []).p_escalate
print(json.dumps(out))
"""


def _last_json(proc) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_pushed_router_loads_with_plain_peft_by_base_hub_id(tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from serving.routers.local import LocalRouter
    from tiermem import contract

    original = make_router_run()
    base_dir = Path(read_run_meta(original).base_model)
    run = tmp_path / "run"
    shutil.copytree(original, run)
    meta = read_run_meta(run)
    meta.base_model = "acme/tiny-base"  # a run trained on a hub base, its adapter config naming the local base
    RunMetaFile.new(run, meta).save()
    assert json.loads((run / "adapter_config.json").read_text())["base_model_name_or_path"] != "acme/tiny-base"

    tokenizer = AutoTokenizer.from_pretrained(str(run))
    q, s, _ = FIXTURES[1]
    text = contract.render_prompt(tokenizer, q, s) + contract.OUTPUT_PREFIX
    local = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base_dir)), str(run)).eval()
    with torch.no_grad():
        expected = local(**tokenizer(text, return_tensors="pt", add_special_tokens=False)).logits[0, -1][:64]

    with local_hub(TOKEN) as (endpoint, hub):
        env = _env(endpoint, tmp_path / "hf")
        assert _run(["-c", UPLOAD_BASE, "acme/tiny-base", str(base_dir)], env).returncode == 0
        push = _run(["-m", "serving.hub", f"router={run}", "repo_id=acme/router"], env)
        assert push.returncode == 0, push.stderr
        pushed = hub.repos["acme/router"].commits[hub.repos["acme/router"].refs["main"]]
        assert json.loads(pushed["adapter_config.json"])["base_model_name_or_path"] == "acme/tiny-base"
        assert b"base_model: acme/tiny-base" in pushed["README.md"]

        online = _last_json(_run(["-c", PEFT_LOAD, "acme/router", text, "router"], env))
        assert online["base_path"] == "acme/tiny-base"  # loaded by hub id, through the hub cache:
        assert any((tmp_path / "hf").rglob("models--acme--tiny-base/snapshots/*/model.safetensors"))
        assert torch.allclose(torch.tensor(online["logits"]), expected, atol=1e-4)
        assert online["p"] == pytest.approx(LocalRouter.from_pretrained(original).route(text, []).p_escalate,
                                            abs=1e-5)

    # The hub is gone: with HF_HUB_OFFLINE=1 both the adapter and its base resolve from the cache.
    offline = _last_json(_run(["-c", PEFT_LOAD, "acme/router", text, "peft"], {**env, "HF_HUB_OFFLINE": "1"}))
    assert offline["logits"] == online["logits"]


PUSH_DATASET = """
import json, sys
from pathlib import Path
from labeling.hub import push_dataset
push_dataset(Path(sys.argv[1]), sys.argv[2], True)
"""

PULL_DATASET = """
import json, sys
from huggingface_hub import DatasetCard, snapshot_download
path = snapshot_download(sys.argv[1], repo_type="dataset")
card = DatasetCard.load(sys.argv[1], repo_type="dataset")
print(json.dumps({"path": path, "data": card.data.to_dict(), "text": card.text}))
"""


def _labeled(out: Path, data_path: Path | None) -> Path:
    from labeling.config import LabelConfig
    from labeling.roles import Roles
    from labeling.run import run
    from tests.helpers.label_helpers import SMALL_MEMORY, HashEmbedder, answer_from_prompt
    from tiermem.llm import ScriptedLLM
    from tiermem.settings.config import from_dict

    cfg = from_dict(LabelConfig, {"output_dir": str(out), "memory": SMALL_MEMORY, "label_rule": "evidence",
                                  "data_path": str(data_path) if data_path else None,
                                  "split": {"ratios": [0.5, 0.5, 0.0]}})
    run(cfg, Roles({"answerer": ScriptedLLM(answer_from_prompt)}), embedder=HashEmbedder())
    return out / "dataset"


def test_label_dataset_push_carries_a_dataset_card(tmp_path):
    from datasets import load_dataset, load_from_disk

    from tiermem.data.conversations import SAMPLE_PATH

    locomo_like = tmp_path / "locomo_shaped.json"
    shutil.copy(SAMPLE_PATH, locomo_like)  # a LoCoMo-format file: its records keep LoCoMo's license
    dataset_dir = _labeled(tmp_path / "label", locomo_like)
    local = load_from_disk(str(dataset_dir))
    with local_hub(TOKEN) as (endpoint, hub):
        env = _env(endpoint, tmp_path / "hf")
        assert _run(["-c", PUSH_DATASET, str(dataset_dir), "acme/labels"], env).returncode == 0
        repo = hub.repos["datasets/acme/labels"]
        assert repo.private and "acme/labels" not in hub.repos
        pulled = _last_json(_run(["-c", PULL_DATASET, "acme/labels"], env))
    data, text = pulled["data"], pulled["text"]
    assert data["license"] == "cc-by-nc-4.0" and "CC BY-NC 4.0" in text
    assert [c["split"] for c in data["configs"][0]["data_files"]] == list(local)
    for name in local:  # counts per split, and the label counts behind them
        labels = local[name]["label"]
        assert (f"| {name} | {len(labels)} | {labels.count('ANSWER')} | {labels.count('ESCALATE')} | "
                f"{sum(x is None for x in labels)} |") in text
    assert "`evidence` rule" in text and "label_rule: evidence" in text and str(locomo_like) in text
    assert "| `router_summaries` |" in text and "| `label` |" in text  # the features
    snapshot = Path(pulled["path"])
    files = {name: str(next((snapshot / "data").glob(f"{name}-*.parquet"))) for name in local}
    reloaded = load_dataset("parquet", data_files=files)
    for name in local:
        assert reloaded[name].to_list() == local[name].to_list()
        assert reloaded[name].features == local[name].features
    assert (snapshot / "labeling_config.yaml").is_file()


def test_dataset_license_follows_the_source():
    from labeling.hub import _dataset_license

    assert _dataset_license({"locomo"}, {"data_path": None})[0] == "apache-2.0"  # the invented sample
    assert _dataset_license({"locomo"}, {"data_path": "x.json"})[0] == "cc-by-nc-4.0"
    assert _dataset_license({"longmemeval"}, {"data_path": "x.json"})[0] == "mit"
    assert _dataset_license({"locomo", "longmemeval"}, {"data_path": "x"})[0] == "cc-by-nc-4.0"
    license, notes = _dataset_license({"tiermem"}, {"data_path": "mine.jsonl"})
    assert license == "other" and "own conversations" in notes[0]


def test_push_uploads_only_the_allowlist_and_the_pulled_router_verifies(tmp_path):
    import hashlib

    import torch

    from tests.helpers.hub_client import PULL

    run = tmp_path / "run"
    shutil.copytree(make_router_run(), run)
    expected = ["README.md", "adapter_config.json", "adapter_model.safetensors", "chat_template.jinja",
                "tiermem_router.json", "tokenizer.json", "tokenizer_config.json"]
    (run / ".tiermem-run.lock").unlink(missing_ok=True)
    # the sft marker (never pushed), then adapter, its config, tokenizer, metadata, card
    assert sorted(p.name for p in run.iterdir()) == [".tiermem-run.json", *expected]
    (run / ".tiermem-run.lock").write_text("{}")  # a run-directory marker
    (run / "training_args.bin").write_bytes(b"\x80\x04a trainer pickle")  # what trainer.save_model leaves
    torch.save({"fingerprint": "f", "states": {}}, run / "trunk_states.pt")  # the frozen-trunk cache
    (run / "checkpoint-2").mkdir()
    for name in ("adapter_model.safetensors", "optimizer.pt", "tokenizer.json"):
        (run / "checkpoint-2" / name).write_bytes(b"state")
    (run / "notes.txt").write_text("scratch")
    q, s, _ = FIXTURES[1]
    with local_hub(TOKEN) as (endpoint, hub):
        env = _env(endpoint, tmp_path / "hf")
        push = _run(["-m", "serving.hub", f"router={run}", "repo_id=acme/router"], env)
        assert push.returncode == 0, push.stderr
        repo = hub.repos["acme/router"]
        pushed = repo.commits[repo.refs["main"]]
        assert sorted(set(pushed) - {".gitattributes"}) == expected  # .gitattributes: made with the repo
        assert json.loads(push.stdout)["files"] == expected

        base = read_run_meta(run).base_model  # a local directory: named by the pulling side, never pushed
        pulled = _last_json(_run(["-c", PULL, "acme/router", "", q, json.dumps(s), "route", base], env))
        from serving.routers.local import LocalRouter

        assert pulled["p"] == pytest.approx(LocalRouter.from_pretrained(run).route(q, s).p_escalate, abs=1e-5)

        # The hub copy changed under the same metadata: pull refuses it before anything loads the weights.
        weights = bytearray(pushed["adapter_model.safetensors"])
        weights[-4096:] = bytes(b ^ 0x01 for b in weights[-4096:])
        sha = hashlib.sha1(b"tampered").hexdigest()
        repo.commits[sha] = {**pushed, "adapter_model.safetensors": bytes(weights)}
        repo.refs["tampered"] = sha
        proc = _run(["-c", PULL, "acme/router", "tampered", q, json.dumps(s), "files"], env)
        assert proc.returncode != 0 and "IntegrityError" in proc.stderr
        assert "adapter_model.safetensors: sha256" in proc.stderr
