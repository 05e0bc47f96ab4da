"""A key that cannot be null refuses null, from a file or an override: SFT's booleans (`epoch_choice`,
`teacher_filter`, `minimal_pairs`) once read null as false. A key declared `X | None` still takes it."""

from __future__ import annotations

import pytest

from router_train.lm.sft import SFTRecipeConfig
from tiermem.settings.config import parse_config
from tiermem.settings.errors import ConfigError


@pytest.mark.parametrize("override", ["epoch_choice=null", "teacher_filter=null", "minimal_pairs=~",
                                      "loss.signal_head=null", "loss.frozen_trunk=null", "seed=null"])
def test_null_for_a_key_that_takes_no_null_is_a_config_error(override):
    key = override.split("=")[0]
    with pytest.raises(ConfigError, match=rf"{key}: null is not a value of this key"):
        parse_config(SFTRecipeConfig, None, [override])


def test_null_in_a_config_file_is_refused_and_exits_2(tmp_path, capsys):
    from tiermem_cli import cli

    path = tmp_path / "sft.yaml"
    path.write_text("epoch_choice: null\nteacher_filter: false\n")
    with pytest.raises(ConfigError, match="epoch_choice: null is not a value"):
        parse_config(SFTRecipeConfig, path)
    assert cli.main(["sft", "--config", str(path), f"output_dir={tmp_path / 'sft'}"]) == 2
    assert "epoch_choice: null is not a value of this key" in capsys.readouterr().err
    assert not (tmp_path / "sft").exists()


def test_keys_declared_nullable_still_take_null():
    cfg = parse_config(SFTRecipeConfig, None, ["router=null", "loss.text_weight=null", "loss.trunk_cache=~",
                                               "max_train_rows=null"])
    assert cfg.router is None and cfg.loss.text_weight is None and cfg.loss.trunk_cache is None
    assert cfg.max_train_rows is None
