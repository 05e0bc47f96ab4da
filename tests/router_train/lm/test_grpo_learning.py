"""GRPO's learning signal on a policy collapsed onto ANSWER (issue 49): sampled as it is, every group is one action
and the update is zero, which the run must say (warning, metadata, card); under the action prior the same start
explores and the adapter moves. Tiny fixtures: a base whose decision is collapsed by construction, one SFT step."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from router_train.lm import grpo, grpo_learning, sft
from router_train.lm.objectives import LossConfig
from router_train.lm.recipe_config import LoraSettings
from tests.helpers.router_fixtures import build_collapsed_base, build_label_dataset
from tiermem.runs.run_meta import CARD_FILE, read_run_meta

ADAPTER = "adapter_model.safetensors"
MARGIN = -12.0  # ESCALATE's logit below ANSWER's on every prompt: p(ESCALATE) ~ 6e-6


@pytest.fixture(scope="module")
def collapsed(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpo_signal")
    build_label_dataset(root / "dataset")
    base = build_collapsed_base(root / "collapsed_base", margin=MARGIN)
    # One SFT step at a vanishing learning rate: the adapter stays the collapsed base, and the signal head starts
    # (centred against that margin, as SFT centres it) at the logistic regression on the signals.
    run = sft.train(sft.SFTRecipeConfig(
        model=str(base), data=str(root / "dataset"), output_dir=str(root / "sft"), eval_generate_limit=0,
        metrics_train_rows=2, loss=LossConfig(kind="decision", signal_head=True, text_weight=1.0),
        lora=LoraSettings(r=4, alpha=8, dropout=0.0, top_layers=1, target_modules=["o_proj", "down_proj"]),
        trainer={"max_steps": 1, "per_device_train_batch_size": 2, "learning_rate": 1e-12, "logging_steps": 1}))
    return root, run.output_dir


def _grpo(root, sft_dir, name: str, **fields):
    cfg = grpo.GRPORecipeConfig(
        router=str(sft_dir), data=str(root / "dataset"), output_dir=str(root / name), eval_generate_limit=0,
        metrics_train_rows=2, balance="none", check_steps=0,
        trainer={"max_steps": 3, "per_device_train_batch_size": 8, "num_generations": 4, "learning_rate": 5e-2,
                 "logging_steps": 1}, **fields)
    return grpo.train(cfg).output_dir


def _moved(sft_dir, out) -> bool:
    before, after = load_file(sft_dir / ADAPTER), load_file(out / ADAPTER)
    return any(not torch.equal(before[k], after[k]) for k in before)


def test_collapsed_policy_gives_no_update_and_says_so(collapsed, caplog, capsys):
    root, sft_dir = collapsed
    with caplog.at_level(logging.WARNING, logger="router_train.lm.grpo"):
        out = _grpo(root, sft_dir, "no_prior", prior_head=False, prior_calibrate=False)
    signal = read_run_meta(out).metrics["grpo_signal"]
    assert signal["zero_variance_share"] == 1.0 and signal["grad_norm_max"] == 0.0
    assert signal["sampled_escalation_last"] == 0.0 and signal["verdict"] == "not a refinement"
    assert not _moved(sft_dir, out)
    assert any("GRPO made no update" in r.getMessage() for r in caplog.records)
    assert "not a refinement" in capsys.readouterr().out
    card = (out / CARD_FILE).read_text()
    assert "| grpo_signal.verdict | not a refinement |" in card and "| grpo_signal.zero_variance_share | 1 |" in card


def test_the_action_prior_makes_the_collapsed_start_explore_and_update(collapsed):
    root, sft_dir = collapsed
    out = _grpo(root, sft_dir, "prior")
    meta = read_run_meta(out)
    prior, signal = meta.data["action_prior"], meta.metrics["grpo_signal"]
    assert prior["head"] and prior["calibrated"]
    assert prior["escalation_share_without_prior"] < 1e-3  # the margin alone: collapsed
    assert prior["escalation_share_at_start"] == pytest.approx(prior["label_escalation_share"], abs=1e-6)
    assert signal["zero_variance_share"] < 1.0 and signal["grad_norm_max"] > 0.0
    assert 0.0 < signal["sampled_escalation_mean"] < 1.0
    assert _moved(sft_dir, out)
    policy = signal["validation_expected_reward"]
    assert policy["rows"] == 3 and policy["conversations"] == 1
    assert policy["before"]["estimate"] != policy["after"]["estimate"]
    assert f"| grpo_signal.verdict | {signal['verdict']} |" in (out / CARD_FILE).read_text()


def test_exact_expected_reward_and_calibrated_shift():
    logits = np.array([[2.0, -1.0, -5.0], [0.0, 1.0, -5.0], [1.0, 1.0, -9.0]])
    shift = grpo_learning.calibrated_shift(logits, np.zeros(3), 0.5, 1.0)
    assert grpo_learning.escalation_share(logits, shift, 1.0).mean() == pytest.approx(0.5, abs=1e-9)
    probs = grpo_learning.action_probs(logits, np.zeros(3), 1.0)
    assert probs.sum(axis=1) == pytest.approx(np.ones(3))
    z = np.exp([2.0, -1.0, -5.0])
    assert probs[0] == pytest.approx(z / z.sum())
    rewards = np.array([[1.0, 0.6, -1.0]] * 3)
    assert grpo_learning.expected_reward(probs, rewards) == pytest.approx(probs @ rewards[0])


def test_signal_warnings_name_no_update_and_no_rise():
    flat = {"zero_variance_share": 0.3, "grad_norm_max": 0.5}
    up = {"rows": 9, "conversations": 2, "difference": {"estimate": 0.1, "lo": 0.02, "hi": 0.2}}
    still = {**up, "difference": {"estimate": 0.01, "lo": -0.05, "hi": 0.07}}
    assert grpo_learning.signal_warnings(flat, up) == []
    assert "did not rise" in grpo_learning.signal_warnings(flat, still)[0]
    assert "no update" in grpo_learning.signal_warnings({**flat, "grad_norm_max": 0.0}, up)[0]
    assert "no update" in grpo_learning.signal_warnings({**flat, "zero_variance_share": 1.0}, None)[0]
    assert grpo_learning.moved(up) == "up" and grpo_learning.moved(still) == "not measurably"


class _Control:
    should_training_stop = False


class _State:
    def __init__(self, step: int) -> None:
        self.global_step = step


@pytest.mark.parametrize(("shares", "stops_at"), [([0.3, 0.4, 0.45, 0.5, 0.35, 0.4], None),
                                                    ([0.3, 0.4, 0.7, 0.8, 0.9, 1.0], 4)])
def test_the_bound_stops_once_the_groups_since_a_check_are_mostly_one_action(shares, stops_at):
    model = torch.nn.Linear(2, 1)
    rewards = iter(np.linspace(1.0, 2.0, 10))  # rising: patience never stops it
    bound = grpo_learning.RewardPlateauStop(lambda: float(next(rewards)), every=2, patience=3, min_delta=0.0,
                                    max_zero_variance=0.5)
    bound.start(model, 0.5)
    control = _Control()
    for step, share in enumerate(shares, start=1):
        bound.on_log(None, _State(step), control, logs={"frac_reward_zero_std": share})
        bound.on_step_end(None, _State(step), control, model=model)
        if control.should_training_stop:
            break
    assert bound.stopped_at == stops_at
    if stops_at:
        assert "signal is spent" in bound.stop_reason and control.should_training_stop


def test_grpo_scales_advantages_in_the_reward_tables_units_and_checks_the_bound():
    from tiermem.settings.config import ConfigError

    assert grpo.build_grpo_config(grpo.GRPORecipeConfig(output_dir="x")).scale_rewards == "none"
    with pytest.raises(ConfigError, match="max_zero_variance"):
        grpo.GRPORecipeConfig(max_zero_variance=1.5)
