"""Every YAML file in configs/ loads into its stage's dataclass (and TRL accepts the trainer section)."""

import importlib
from pathlib import Path

import pytest
import yaml

from tiermem.settings.config import ConfigError, parse_cli, parse_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
ALL = sorted(p for p in CONFIGS.rglob("*.yaml"))

# configs/<folder>/*.yaml -> the dataclass each file must parse into (validated here).
# label-merge has no folder of its own: it takes the label config its shards ran with (configs/label).
CONFIG_CLASSES: dict[str, str] = {
    "label": "labeling.config:LabelConfig",
    "audit": "labeling.audit:AuditConfig",
    "sft": "router_train.lm.sft:SFTRecipeConfig",
    "grpo": "router_train.lm.grpo:GRPORecipeConfig",
    "calibrate": "evaluation.calibrate:CalibrateConfig",
    "eval": "evaluation.evaluate:EvalConfig",
    "features": "router_train.fit_features:FitFeaturesConfig",
    "unit_reader": "router_train.reader.unit_reader:UnitReaderConfig",
    "reader_pretrain": "router_train.reader.pretrain:ReaderPretrainConfig",
    "answer_floor": "router_train.reader.chat_floor:ChatFloorConfig",
    "push": "serving.hub:PushConfig",
    "serve": "serving.server:ServeConfig",
    "ingest": "tiermem_cli.ingest:IngestConfig",
    "memory": "tiermem.memory.runtime:MemoryConfig",
    "demo": "tiermem_cli.demo:DemoConfig",
    "bench": "benchmarks.run:BenchConfig",
}


def _cls(folder: str):
    module, name = CONFIG_CLASSES[folder].split(":")
    return getattr(importlib.import_module(module), name)


def test_there_are_configs_for_every_stage():
    folders = {p.parent.name for p in ALL}
    assert {"label", "sft", "grpo", "calibrate", "eval", "serve", "push", "accelerate"} <= folders


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_config_validates(path):
    folder = path.parent.name
    if folder == "accelerate":  # accelerate's own format: check the keys `accelerate launch` needs
        data = yaml.safe_load(path.read_text())
        assert {"distributed_type", "num_processes", "mixed_precision"} <= set(data)
        return
    assert folder in CONFIG_CLASSES, f"no dataclass registered for configs/{folder}/"
    cfg = parse_config(_cls(folder), path)
    if folder in ("sft", "grpo"):  # TRL validates its own trainer keys
        recipe = importlib.import_module(f"router_train.lm.{folder}")
        build = recipe.build_sft_config if folder == "sft" else recipe.build_grpo_config
        build(cfg)


def test_unknown_key_is_rejected_with_file_and_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("output_dir: x\nnot_a_key: 1\n")
    with pytest.raises(ConfigError, match=r"bad.yaml.*not_a_key"):
        parse_config(_cls("label"), bad)


def test_overrides_reach_nested_fields(tmp_path):
    cfg = parse_cli(_cls("label"), ["--config", str(CONFIGS / "label" / "sample_local.yaml"),
                                   "seed=7", "split.seed=3"])
    assert cfg.seed == 7 and cfg.split.seed == 3


def test_wrong_type_is_rejected():
    with pytest.raises(ConfigError, match="seed"):
        parse_config(_cls("label"), None, ["seed=abc"])


def test_missing_config_file():
    with pytest.raises(ConfigError, match="not found"):
        parse_config(_cls("label"), "configs/nope.yaml")
