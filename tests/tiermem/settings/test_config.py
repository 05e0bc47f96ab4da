"""Config parsing: numbers in scientific notation are floats, counts are checked, `--config` needs a path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from labeling.config import LabelConfig
from tiermem.llm import LLMConfig
from tiermem.settings.config import ConfigError, check_declared, from_dict, parse_cli


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
    with pytest.raises(ConfigError, match="llm.batch_size must be >= 1, got 0"):
        from_dict(LLMConfig, {"batch_size": 0})
    with pytest.raises(ConfigError, match="--config needs a path"):
        parse_cli(LabelConfig, ["--config", "output_dir=x"])
    with pytest.raises(ConfigError, match="--config needs a path"):
        parse_cli(LabelConfig, ["--config"])


@dataclass
class Section:
    kind: Literal["a", "b"] = "a"
    share: float = field(default=0.5, metadata={"gt": 0, "le": 1})
    depth: int | None = field(default=None, metadata={"ge": 1})

    def __post_init__(self) -> None:
        check_declared(self, "section.")


def test_declared_choices_and_ranges_are_checked_naming_the_key():
    """A `Literal[...]` type and `field(metadata={"ge"/"gt"/"le"/"lt": ...})` are checked once, by check_declared,
    from YAML, from an override and in Python alike; None passes where the type allows it."""
    assert from_dict(Section, {"kind": "b", "share": 1, "depth": None}) == Section("b", 1.0, None)
    assert parse_cli(Section, ["kind=b", "depth=3"], default_config=None) == Section("b", 0.5, 3)
    for data, message in (({"kind": "c"}, "section.kind must be one of a|b, got 'c'"),
                          ({"share": 0}, "section.share must be > 0, got 0"),
                          ({"share": 1.5}, "section.share must be <= 1, got 1.5"),
                          ({"depth": 0}, "section.depth must be >= 1, got 0")):
        with pytest.raises(ConfigError, match=message):
            from_dict(Section, data)
    with pytest.raises(ConfigError, match="section.kind must be one of a|b"):
        Section(kind="c")  # type: ignore[arg-type]
