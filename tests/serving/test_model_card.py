"""Artefacts anyone can open: a trained run's adapter config names the base model by hub id, its README.md is our
model card from the moment training saves the adapter (calibrate re-renders it), and push renders the card with the
router's eval.json.

The base is a tiny random Llama placed in a hand-built hub cache as `acme/tiny-base`, so the recipes resolve a
real hub id with HF_HUB_OFFLINE=1 (set by conftest) and nothing is downloaded.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from evaluation import calibrate, evaluate
from router_train.lm import grpo, sft
from router_train.lm.recipe_config import LoraSettings
from router_train.lm.router_run import load_adapter_run
from serving.hub import read_eval
from serving.model_card import render_card, save_with_card
from tests.helpers.router_fixtures import build_tiny_model_dir, edit_run_meta, make_router_run, record
from tiermem import contract
from tiermem.models.specs import make_adapter_portable
from tiermem.runs import run_meta
from tiermem.runs.run_meta import RunMetaFile, read_run_meta, sha256_file
from tiermem.settings.errors import ConfigError

BASE_ID = "acme/tiny-base"
LORA = LoraSettings(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"])


def hub_cache_with(cache: Path, repo_id: str, source: Path) -> Path:
    """The layout huggingface_hub's cache uses (refs/main -> snapshots/<commit>/files), filled from a local dir."""
    storage = cache / f"models--{repo_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (storage / "refs").mkdir(parents=True)
    (storage / "refs" / "main").write_text(commit)
    shutil.copytree(source, storage / "snapshots" / commit)
    return storage / "snapshots" / commit


def eval_dataset(path: Path) -> Path:
    """Label records with every field the eval and calibrate stages read (evidence rule)."""
    from datasets import Dataset, DatasetDict

    def rec(i: int, conv: str, split: str, s_ok: bool, r_ok: bool) -> dict:
        row = record(i, conv, s_ok, r_ok)
        row.update(split=split, s_ok_evidence=s_ok, r_ok_evidence=r_ok, s_ok_outcome=s_ok, r_ok_outcome=r_ok,
                   cost_summary_wall_s=1.0, cost_research_wall_s=6.0, error=None)
        return row

    splits = {"train": [rec(i, "c1" if i < 3 else "c2", "train", i % 3 != 1, True) for i in range(6)],
              "validation": [rec(i, "c3", "validation", i % 2 == 0, True) for i in range(6, 10)],
              "test": [rec(i, "c4", "test", i % 2 == 0, True) for i in range(10, 14)]}
    DatasetDict({k: Dataset.from_list(v) for k, v in splits.items()}).save_to_disk(str(path))
    return path


def card(run_dir: Path) -> str:
    return (run_dir / "README.md").read_text()


def _g(x: float) -> str:
    return f"{x:.4g}"


def cell(report: dict, policy: str, metric: str) -> str:
    """A card cell as eval.json has it: the policy's point value, then its bootstrap interval."""
    iv = report["intervals"][policy][metric]
    return f"{_g(iv['estimate'])} [{_g(iv['lo'])}, {_g(iv['hi'])}]"


def _rows(text: str, header: str) -> dict[str, list[str]]:
    """The rows of the card's table whose header line starts with `header`: first cell -> the other cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header)) + 2
    rows = {}
    for line in lines[start:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def eval_rows(text: str) -> dict[str, list[str]]:
    return _rows(text, "| policy | accuracy |")


def assert_our_card(text: str, run_dir: Path, stage: str) -> None:
    assert text.startswith("---\n") and f"base_model: {BASE_ID}" in text
    assert "[More Information Needed]" not in text  # PEFT's template is gone
    assert "sufficiency router" in text and contract.CONTRACT_VERSION in text and f"`{stage}`" in text
    assert f'Router.from_pretrained("{run_dir}")' in text and f"router={run_dir}" in text


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    import huggingface_hub.constants

    root = tmp_path_factory.mktemp("run_card")
    data = eval_dataset(root / "dataset")
    build_tiny_model_dir(root / "base")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(root / "hub"))
        snapshot = hub_cache_with(root / "hub", BASE_ID, root / "base")
        common = {"data": str(data), "eval_generate_limit": 1, "metrics_train_rows": 2, "max_eval_rows": 2}
        sft_dir = sft.train(sft.SFTRecipeConfig(
            model=BASE_ID, output_dir=str(root / "sft"), lora=LORA, **common,
            trainer={"max_steps": 1, "per_device_train_batch_size": 2, "logging_steps": 1})).output_dir
        cards = {"sft": card(sft_dir)}
        grpo_dir = grpo.train(grpo.GRPORecipeConfig(
            router=str(sft_dir), output_dir=str(root / "grpo"), **common,
            trainer={"max_steps": 1, "per_device_train_batch_size": 4, "num_generations": 2,
                     "logging_steps": 1})).output_dir
        cards["grpo"] = card(grpo_dir)
        cal = calibrate.run(calibrate.CalibrateConfig(router=str(grpo_dir), data=str(data), value=0.5))
        cards["calibrate"] = card(grpo_dir)
        paths = evaluate.run(evaluate.EvalConfig(data=str(data), split="test", output_dir=str(root / "eval"),
                                                 router=evaluate.RouterSpec(path=str(grpo_dir))))
        yield {"sft": sft_dir, "grpo": grpo_dir, "cards": cards, "calibration": cal, "eval": paths,
               "snapshot": snapshot, "mp": mp}


def test_saved_adapter_configs_name_the_hub_id_and_meta_keeps_the_spec(runs):
    for stage in ("sft", "grpo"):
        adapter = json.loads((runs[stage] / "adapter_config.json").read_text())
        assert adapter["base_model_name_or_path"] == BASE_ID, stage  # PEFT wrote the snapshot path
        assert read_run_meta(runs[stage]).base_model == BASE_ID


def test_run_card_after_sft_grpo_calibrate_and_the_pushed_card_with_eval(runs):
    cards = runs["cards"]
    assert_our_card(cards["sft"], runs["sft"], "sft")
    assert "not calibrated" in cards["sft"]
    assert_our_card(cards["grpo"], runs["grpo"], "grpo")
    rewards = read_run_meta(runs["grpo"]).training["rewards"]
    assert f"| rewards.escalate_research_wrong | {rewards['escalate_research_wrong']} |" in cards["grpo"]
    assert "Not on this card: run `make eval`" in cards["grpo"] and "not calibrated" in cards["grpo"]

    threshold = runs["calibration"]["threshold_logit"]
    assert "not calibrated" not in cards["calibrate"] and f"threshold_logit **{threshold:.4g}**" in cards["calibrate"]
    assert "Not on this card" in cards["calibrate"]

    # push renders the card with the eval of the router as it is
    meta = read_run_meta(runs["grpo"])
    report = read_eval(str(runs["eval"]["json"]), meta)
    text = render_card(meta, "acme/router", report)
    assert "Not on this card" not in text and f"threshold_logit **{threshold:.4g}**" in text
    rows = eval_rows(text)
    for name in ("routed", "summary_only", "raw_only", "random", "oracle"):
        assert rows[name][:2] == [cell(report, name, "accuracy"), cell(report, name, "escalation_rate")], name
    meta.calibration = {**meta.calibration, "threshold_logit": threshold + 1.0}  # calibrated again after the eval
    with pytest.raises(ConfigError, match="before its metadata changed"):
        read_eval(str(runs["eval"]["json"]), meta)


def test_trained_router_loads_offline_by_its_spec(runs):
    from serving.routers import Router

    router = Router.from_pretrained(runs["grpo"])
    model, _, meta = load_adapter_run(runs["grpo"], trainable=False)
    assert meta.base_model == BASE_ID and router.meta.base_model == BASE_ID
    assert 0.0 <= router.route("When did Jon run?", [{"text": "Jon ran.", "date": None}]).p_escalate <= 1.0


def test_loaders_never_read_the_adapter_configs_base(tmp_path):
    """A router whose adapter config names an uncached hub id loads offline: the base comes from
    tiermem_router.json (the spec), which is what makes the portable adapter config safe."""
    from serving.routers.local import LocalRouter

    original = make_router_run()
    run = tmp_path / "run"
    shutil.copytree(original, run)
    config = json.loads((run / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "HuggingFaceTB/SmolLM2-135M-Instruct"
    (run / "adapter_config.json").write_text(json.dumps(config))
    meta = read_run_meta(run)  # as push records it: the adapter config is proven by its digest like the weights
    meta.files = {**meta.files, "adapter_config.json": sha256_file(run / "adapter_config.json")}
    RunMetaFile.new(run, meta).save()
    q, s = "When did Caroline move?", [{"text": "Caroline moved to Boston.", "date": None}]
    p = LocalRouter.from_pretrained(run).route(q, s).p_escalate
    assert p == pytest.approx(LocalRouter.from_pretrained(original).route(q, s).p_escalate, abs=1e-6)
    model, _, meta = load_adapter_run(run, trainable=False)
    assert meta.base_model == str(original.parent / "base")


def test_packaged_base_gets_its_upstream_hub_id(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(make_router_run(), run)
    assert make_adapter_portable(run, "packaged:smollm2-135m-instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    adapter = json.loads((run / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    before = (run / "adapter_config.json").read_text()
    assert make_adapter_portable(run, str(tmp_path)) is None  # a local base: no hub id, file untouched
    assert (run / "adapter_config.json").read_text() == before
    (run / "adapter_config.json").unlink()
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        make_adapter_portable(run, "packaged:smollm2-135m-instruct")


def test_card_shows_the_intervals_and_ranking_of_a_real_eval_report(tmp_path):
    """eval.json from the eval stage itself (the fixture router on its own questions, two conversations): the card
    shows every policy's intervals and each router's AUROC, with eval.json's numbers."""
    from datasets import Dataset, DatasetDict

    from tests.helpers.records import rec
    from tests.helpers.router_fixtures import FIXTURES

    run = tmp_path / "run"
    shutil.copytree(make_router_run(), run)
    rows = []
    flip = {"ANSWER": "ESCALATE", "ESCALATE": "ANSWER"}
    for i, (question, summaries, label) in enumerate(FIXTURES * 2):
        label = flip[label] if i in (6, 9) else label  # two questions the router gets wrong: AUROC < 1
        r = rec(f"f{i}", f"c{i % 2}", label == "ANSWER", True, label, "test")
        r.update(question=question, router_summaries=[dict(s, unit_id="u", page_ids=[]) for s in summaries])
        rows.append(r)
    DatasetDict({"test": Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "ds"))
    paths = evaluate.run(evaluate.EvalConfig(data=str(tmp_path / "ds"), split="test", output_dir=str(tmp_path / "eval"),
                                             router=evaluate.RouterSpec(path=str(run)),
                                             bootstrap=evaluate.BootstrapConfig(n_boot=200)))
    report = read_eval(str(paths["json"]), read_run_meta(run))
    text = render_card(read_run_meta(run), "acme/router", report)
    assert "12 questions in 2 conversation(s)" in text and "95% two-stage cluster bootstrap intervals" in text
    rows = eval_rows(text)
    assert list(rows) == list(report["policies"])
    for name in report["policies"]:
        assert rows[name] == [cell(report, name, m) for m in ("accuracy", "escalation_rate", "hard_recall",
                                                              "mean_input_tokens")], name
    routed = report["ranking"]["routed"]
    assert routed["auroc"]["estimate"] > 0.5 and routed["auroc"]["lo"] < routed["auroc"]["hi"]
    iv = routed["auroc"]
    assert f"routed {_g(iv['estimate'])} [{_g(iv['lo'])}, {_g(iv['hi'])}]" in text
    assert "eval" not in json.loads((run / "tiermem_router.json").read_text())  # eval writes nothing in the run
    # a file another stage rewrote after this operation read it is not overwritten: its change is kept
    held = run_meta.RunMetaFile.open(run)
    edit_run_meta(run, metrics={**held.meta.metrics, "written_by": "another stage"})
    held.meta.stage = "mine"
    with pytest.raises(run_meta.RunMetaChanged, match="changed on disk since this stage read it"):
        save_with_card(held)
    assert read_run_meta(run).metrics["written_by"] == "another stage" and read_run_meta(run).stage != "mine"
    with pytest.raises(ConfigError, match="another router"):
        read_eval(str(paths["json"]), read_run_meta(run))
    undigested = tmp_path / "old_eval.json"
    undigested.write_text(json.dumps({**report, "meta": {k: v for k, v in report["meta"].items()
                                                         if k != "router_meta_sha256"}}))
    with pytest.raises(ConfigError, match="records no router metadata digest"):
        read_eval(str(undigested), read_run_meta(run))

    logit = math.log(0.2 / 0.8)
    edit_run_meta(run, calibration={
        "criterion": "hard_recall", "value": 0.9, "threshold_logit": logit, "data": "d", "split": "validation",
        "guarantee": {"method": "clopper-pearson", "alpha": 0.1, "delta": 0.05, "n_calibration": 57,
                      "achieved": 0.93}})
    text = render_card(read_run_meta(run))
    assert "threshold_logit **-1.386**" in text and "hard_recall = 0.9" in text
    assert "method `clopper-pearson`, alpha 0.1, delta 0.05, on 57 calibration questions" in text
