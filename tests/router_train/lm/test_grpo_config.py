"""GRPO's `trainer.scale_rewards` is checked with the config, before any model loads (TRL reads it only at the first
step, once the model is loaded)."""

from __future__ import annotations

import pytest

from router_train.lm import grpo
from tiermem.settings.errors import ConfigError


@pytest.mark.parametrize("value", ["banana", "Group", "", "std"])
def test_scale_rewards_outside_trls_values_is_a_config_error_before_loading(tmp_path, monkeypatch, value):
    def no_model(*_a, **_k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(grpo, "load_policy", no_model)
    cfg = grpo.GRPORecipeConfig(output_dir=str(tmp_path / "grpo"), trainer={"scale_rewards": value})
    with pytest.raises(ConfigError, match=rf"trainer.scale_rewards must be one of \['group', 'batch', 'none'\], "
                                          rf"got '{value}'"):
        grpo.train(cfg)
    assert not (tmp_path / "grpo").exists()


@pytest.mark.parametrize("value", ["group", "batch", "none"])
def test_trls_values_are_taken(tmp_path, value):
    args = grpo.build_grpo_config(grpo.GRPORecipeConfig(output_dir=str(tmp_path), trainer={"scale_rewards": value}))
    assert args.scale_rewards == value
