"""What SFT and GRPO configs share and the TRL trainer arguments built from them, CPU-aware."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tiermem.rewards import RewardConfig
from tiermem.settings.config import AT_LEAST_ONE, check_declared, check_field_types, parse_cli
from tiermem.settings.errors import ConfigError, stage_main

log = logging.getLogger(__name__)


@dataclass
class LoraSettings:
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    # Attention and MLP projections of Llama/Qwen-style models; "all-linear" also works with PEFT.
    target_modules: list[str] | str = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    # Adapt only the top N decoder layers (None: all). Frozen lower layers need no backward pass, which is most
    # of a CPU step; the decision is read at the last position, where the top layers decide.
    top_layers: int | None = field(default=None, metadata=AT_LEAST_ONE)

    def __post_init__(self) -> None:
        check_declared(self, "lora.")

    def to_peft(self, num_layers: int | None = None) -> Any:
        from peft import LoraConfig

        layers = None
        if self.top_layers is not None:
            if num_layers is None:
                raise ValueError("lora.top_layers needs the model's number of layers")
            layers = list(range(max(0, num_layers - self.top_layers), num_layers))
        return LoraConfig(
            r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout,
            target_modules=self.target_modules, task_type="CAUSAL_LM", layers_to_transform=layers,
        )


@dataclass
class RecipeConfig:
    """What SFT and GRPO configs share: the label data, splits, adapter, rewards, seeds and metric sizes.
    Each recipe's config (next to its trainer) adds its own fields and passes `trainer:` to TRL's own config."""

    data: str | list[str] = "runs/label/dataset"  # DatasetDict saved by `make label`; several: [a, b], pooled
    output_dir: str = "runs/router"
    train_split: str = "train"
    eval_split: str = "validation"
    lora: LoraSettings = field(default_factory=LoraSettings)
    rewards: RewardConfig = field(default_factory=RewardConfig)  # the reward table (GRPO; SFT's expected_reward)
    balance: Literal["none", "oversample"] = "none"  # oversample: the train split only
    seed: int = 42
    cpu_defaults: bool = True  # fp32, no gradient checkpointing, threads = cores, when no GPU is present
    max_train_rows: int | None = None
    max_eval_rows: int | None = None
    metrics_train_rows: int = 64  # train rows scored for the train-side decision metrics
    eval_batch_size: int = 8
    eval_generate_limit: int = 16  # greedy generations parsed per split to report format/parse rates
    trainer: dict[str, Any] = field(default_factory=dict)  # passed to TRL's SFTConfig / GRPOConfig, which validate it

    def __post_init__(self) -> None:
        from labeling.dataset import data_paths

        data_paths(self.data)
        check_declared(self)  # a recipe's own fields too


def has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def training_device() -> str:
    """Each `accelerate launch` process loads onto its own GPU; CPU otherwise."""
    return f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if has_gpu() else "cpu"


def trainer_args(recipe_defaults: dict[str, Any], cpu_defaults: bool, user: dict[str, Any]) -> dict[str, Any]:
    """recipe defaults < CPU defaults (only without a GPU: fp32, no gradient checkpointing; `make bench` compares
    them with TRL's, docs/DESIGN.md) < the user's `trainer:` mapping."""
    kwargs = dict(recipe_defaults)
    if cpu_defaults and not has_gpu():
        from tiermem.models.specs import setup_cpu_threads

        threads = setup_cpu_threads()
        log.debug("no GPU: CPU defaults (fp32, no gradient checkpointing, %d torch threads)", threads)
        kwargs.update(bf16=False, fp16=False, activation_checkpointing=False, use_cpu=True, dataloader_num_workers=0)
        if "gradient_checkpointing" in user:  # the deprecated alias only applies when the new name is unset
            kwargs.pop("activation_checkpointing")
    kwargs.update(user)
    return kwargs


def build_trl_config(config_cls: type, kwargs: dict[str, Any]) -> Any:
    """TRL validates its own keys; its complaint becomes one ConfigError line naming the `trainer:` section."""
    kwargs = check_field_types(config_cls, kwargs, f"trainer ({config_cls.__name__})")
    try:
        return config_cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"trainer ({config_cls.__name__}): {exc}") from None


def recipe_main(stage: str, config_cls: type, default_config: Path,
                train: Callable[[Any], Any]) -> Callable[[list[str] | None], int]:
    """A recipe's `main(argv)`: its config from argv over the shipped default config (when present), then `train`."""

    @stage_main(stage)
    def main(argv: list[str]) -> int:
        train(parse_cli(config_cls, argv, default_config=default_config if default_config.is_file() else None))
        return 0

    return main
