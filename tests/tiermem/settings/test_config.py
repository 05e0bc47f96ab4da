"""Config parsing: numbers in scientific notation are floats, counts are checked, `--config` needs a path."""

from __future__ import annotations

import pytest

from labeling.config import LabelConfig
from tiermem.llm import LLMConfig
from tiermem.settings.config import ConfigError, from_dict, parse_cli


def test_scientific_notation_is_a_float_everywhere(tmp_path):
    from router_train.lm.sft import SFTRecipeConfig, build_sft_config

    cfg = parse_cli(SFTRecipeConfig, ["trainer.learning_rate=1e-3", f"output_dir={tmp_path / 'o'}"])
    assert cfg.trainer["learning_rate"] == 0.001
    path = tmp_path / "sft.yaml"
    path.write_text("trainer:\n  learning_rate: 2e-4\n  weight_decay: 1E-2\n  max_steps: 3\n")
    cfg = parse_cli(SFTRecipeConfig, [str(path), f"output_dir={tmp_path / 'o'}"])
    assert cfg.trainer == {"learning_rate": 2e-4, "weight_decay": 0.01, "max_steps": 3}
    assert build_sft_config(cfg).learning_rate == 2e-4


def test_batch_size_zero_and_config_flag_without_path():
    with pytest.raises(ConfigError, match="llm.batch_size must be an integer >= 1, got 0"):
        from_dict(LLMConfig, {"batch_size": 0})
    with pytest.raises(ConfigError, match="--config needs a path"):
        parse_cli(LabelConfig, ["--config", "output_dir=x"])
    with pytest.raises(ConfigError, match="--config needs a path"):
        parse_cli(LabelConfig, ["--config"])
