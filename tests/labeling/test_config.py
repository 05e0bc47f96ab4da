from pathlib import Path
from typing import get_type_hints

import pytest

from labeling.config import LabelConfig
from labeling.rules import RULES
from tiermem.data.conversations import FORMATS
from tiermem.settings.config import ConfigError, choices_of, parse_config

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs" / "label").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_label_config_validates(path):
    cfg = parse_config(LabelConfig, path)
    assert (cfg.llm.answerer is not None or not cfg.generate_answers) and cfg.label_rule in ("outcome", "evidence")


def test_embedded_default_uses_local_models_and_the_evidence_rule():
    cfg = parse_config(LabelConfig, next(p for p in CONFIGS if p.name == "locomo_local.yaml"))
    assert cfg.llm.answerer.backend == "local" and cfg.llm.judge is None and cfg.label_rule == "evidence"


def test_bad_values_are_config_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("split:\n  ratios: [1, 2]\n")
    with pytest.raises(ConfigError, match="ratios"):
        parse_config(LabelConfig, bad)
    with pytest.raises(ConfigError, match="unknown key"):
        parse_config(LabelConfig, None, ["memory.no_such=1"])
    for key, choices in (("dataset_format", FORMATS), ("label_rule", RULES)):  # the declared choices, the code's own
        assert choices_of(get_type_hints(LabelConfig)[key]) == choices
        with pytest.raises(ConfigError, match=f"{key} must be one of .*got 'majority'"):
            parse_config(LabelConfig, None, [f"{key}=majority"])
