"""Decision-focused SFT losses on a tiny model: the decision logit moves the right way, the frozen trunk gives
the same losses as full forwards, the expected-reward loss trains from an existing adapter, and the serving
router with a shared trunk scores like the plain one."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from router_train.lm import sft
from router_train.lm.objectives import LossConfig, balanced_class_weights
from router_train.lm.recipe_config import LoraSettings
from tests.helpers.router_fixtures import build_tiny_model_dir, record
from tiermem.models.trunk import top_layers_holding
from tiermem.runs.run_meta import read_run_meta

LORA = LoraSettings(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"],
                    top_layers=1)


def _learnable(i: int, conv: str, escalate: bool) -> dict:
    """ESCALATE rows' summaries miss the question's words (the contract shows them as missing); ANSWER rows'
    state them: a signal a tiny model can learn in a few steps, unlike the shared fixture's arbitrary labels."""
    rec = record(i, conv, not escalate, True, 500 + 100 * i)
    if escalate:
        rec["router_summaries"][0] = {**rec["router_summaries"][0], "text": "Melanie went swimming at the lake."}
    return rec


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    from datasets import Dataset, DatasetDict

    root = tmp_path_factory.mktemp("objectives")
    train = [_learnable(i, f"c{i % 2}", escalate=i % 3 == 0) for i in range(6)]
    val = [_learnable(10 + i, "c9", escalate=i % 2 == 0) for i in range(3)]
    DatasetDict({"train": Dataset.from_list(train), "validation": Dataset.from_list(val)}).save_to_disk(
        str(root / "dataset"))
    build_tiny_model_dir(root / "base")
    return root


def _cfg(root, name, loss, **extra) -> sft.SFTRecipeConfig:
    return sft.SFTRecipeConfig(
        model=str(root / "base"), data=str(root / "dataset"), output_dir=str(root / name), lora=LORA,
        loss=loss, eval_generate_limit=0, metrics_train_rows=6, epoch_choice=False,  # the fit itself, not a choice
        trainer={"max_steps": 30, "per_device_train_batch_size": 6, "learning_rate": 3e-2, "logging_steps": 1,
                 "lr_scheduler_type": "constant", "warmup_steps": 0}, **extra)


def _train_margin(run) -> float:
    """Mean log-odds gap between ESCALATE- and ANSWER-labeled train rows (positive: ranks the right way)."""
    from router_train.lm.decisions import escalation_scores

    meta = read_run_meta(run.output_dir)
    assert meta.metrics["train_decisions"]["n"] == 6
    from datasets import load_from_disk

    from router_train.lm.rows import build_rows

    rows = build_rows(load_from_disk(str(run.output_dir.parent / "dataset")), "train", run.tokenizer)
    scores = escalation_scores(run.model, run.tokenizer, rows["prompt"])
    esc = [s for s, lab in zip(scores, rows["label"], strict=True) if lab == "ESCALATE"]
    ans = [s for s, lab in zip(scores, rows["label"], strict=True) if lab == "ANSWER"]
    return sum(esc) / len(esc) - sum(ans) / len(ans)


@pytest.fixture(scope="module")
def decision_run(workdir):
    return sft.train(_cfg(workdir, "decision", LossConfig(kind="decision", lm_weight=0.1)))


def test_decision_objective_fits_the_labels_through_the_frozen_trunk(decision_run):
    assert _train_margin(decision_run) > 0.5
    meta = read_run_meta(decision_run.output_dir)
    assert meta.data["loss"] == "decision" and meta.data["class_weights"] == pytest.approx([0.75, 1.5])
    assert meta.metrics["validation"]["auroc"] is not None
    assert top_layers_holding(decision_run.model, "trainable") == 1
    logged = [h for h in meta.metrics["log_history"] if "decision_loss" in h]
    assert logged and logged[-1]["decision_loss"] < logged[0]["decision_loss"]
    # the full-vocabulary mass on the two action tokens grows: sampled completions stay parseable
    assert logged[-1]["action_mass"] > 1.5 * logged[0]["action_mass"]


def test_trunk_and_full_forward_give_the_same_loss(workdir):
    from router_train.lm.objectives import RouterSFTTrainer

    losses = {}
    for trunk in (True, False):
        cfg = _cfg(workdir, f"same_{trunk}", LossConfig(kind="decision", frozen_trunk=trunk))
        cfg.trainer = {**cfg.trainer, "max_steps": 1, "learning_rate": 1e-12}
        seen = []
        original = RouterSFTTrainer.compute_loss

        def spy(self, model, inputs, return_outputs=False, num_items_in_batch=None, _seen=seen, _orig=original):
            loss = _orig(self, model, inputs, return_outputs, num_items_in_batch)
            _seen.append((float(loss), self.trunk is not None))
            return loss

        RouterSFTTrainer.compute_loss = spy
        try:
            sft.train(cfg)
        finally:
            RouterSFTTrainer.compute_loss = original
        losses[trunk] = seen[0]
    assert losses[True][1] and not losses[False][1]
    assert losses[True][0] == pytest.approx(losses[False][0], rel=1e-4)


def test_expected_reward_objective_continues_an_adapter(decision_run, workdir):
    cfg = _cfg(workdir, "er", LossConfig(kind="expected_reward", lm_weight=0.0),
               router=str(decision_run.output_dir))
    cfg.trainer = {**cfg.trainer, "max_steps": 2}
    run = sft.train(cfg)
    meta = read_run_meta(run.output_dir)
    assert meta.stage == "expected_reward" and meta.base_model == str(workdir / "base")
    assert meta.data["loss"] == "expected_reward" and meta.data["cost_scale_tokens"] > 0
    logged = [h for h in meta.metrics["log_history"] if "decision_loss" in h]
    assert logged and all(math.isfinite(h["decision_loss"]) for h in logged)


def test_shared_trunk_router_scores_like_the_plain_router(decision_run):
    from serving.routers.local import LocalRouter

    questions = ["When did Caroline go hiking?", "What does Melanie paint?"]
    summaries = [[{"text": "Caroline hiked on 7 May 2023.", "date": "8 May 2023", "score": 0.8}], []]
    plain = LocalRouter.from_pretrained(decision_run.output_dir)
    trunk_cache: dict = {}  # what eval hands every router it builds
    shared = LocalRouter.from_pretrained(decision_run.output_dir, trunk_cache=trunk_cache)
    assert plain.trunk is None and shared.trunk is not None
    assert shared.score(questions, summaries) == pytest.approx(plain.score(questions, summaries), abs=1e-4)
    again = LocalRouter.from_pretrained(decision_run.output_dir, trunk_cache=trunk_cache)
    again.score(questions, summaries)
    assert again.trunk.misses == 0  # a second router handed the same cache reuses the first one's trunk states
    other = LocalRouter.from_pretrained(decision_run.output_dir, trunk_cache={})
    other.score(questions, summaries)
    assert other.trunk.misses > 0  # no global cache: a router given its own sees nothing of the others


def test_loss_config_and_class_weights():
    with pytest.raises(ValueError, match="loss.kind"):
        LossConfig(kind="dpo")
    assert balanced_class_weights(["ANSWER"] * 3 + ["ESCALATE"]) == pytest.approx((4 / 6, 2.0))
    assert balanced_class_weights(["ANSWER"] * 2) == (1.0, 1.0)
    assert dataclasses.asdict(LossConfig())["kind"] == "decision"
    from tiermem.settings.config import ConfigError, parse_cli

    assert parse_cli(sft.SFTRecipeConfig, ["loss.kind=decision"]).loss.kind == "decision"
    with pytest.raises(ConfigError, match="objective"):  # the section's old name is not an alias
        parse_cli(sft.SFTRecipeConfig, ["objective.kind=decision"])
    with pytest.raises(ValueError, match="top_layers"):
        LoraSettings(top_layers=0)
    assert torch  # imported for the spy's tensors
