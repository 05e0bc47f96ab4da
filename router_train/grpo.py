"""`make grpo`: TRL GRPOTrainer on the SFT router, rewarding accuracy and penalizing waste and cost.

Starts from the SFT adapter: from the base model the strict reward tends to give every sample the same (negative)
reward, i.e. zero variance and zero gradient. A run whose reward variance stays zero is
reported loudly and recorded in the run's metadata. Saves like SFT plus `reward_curves.json`.

Multi-GPU (vLLM colocated generation): accelerate launch --config_file configs/accelerate/multi_gpu.yaml \
    -m router_train.grpo --config configs/grpo/qwen3_0.6b_gpu.yaml
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tiermem import contract
from tiermem.artifacts import RUN_META_FILE, RunMeta
from tiermem.config import ConfigError, parse_cli
from tiermem.errors import MissingFileError, stage_main
from tiermem.model_dir import refuse_output_over_input
from tiermem.models import DEFAULT_LM
from tiermem.rundir import launch_run_dir

from .common import (
    RecipeConfig,
    RunResult,
    balance_rows,
    build_trl_config,
    decision_reports,
    is_launch_leader,
    load_adapter_run,
    load_label_rows,
    save_and_report,
    train_and_save_weights,
    trainer_args,
    training_device,
)
from .rewards import build_reward_funcs

log = logging.getLogger(__name__)
DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "grpo" / "smollm2_135m_cpu.yaml"
CURVES_FILE = "reward_curves.json"
_CURVE_PREFIXES = ("reward", "rewards/", "reward_parts/", "case/", "decision/", "format/", "frac_reward_zero_std",
                   "loss", "kl", "entropy", "completions/mean_length", "learning_rate")

RECIPE_DEFAULTS: dict[str, Any] = {
    "num_generations": 4,
    "max_completion_length": 24,  # the action comes first; the reason needs not finish for the decision reward
    "per_device_train_batch_size": 8,  # completions per step: 2 prompts x 4 generations
    "learning_rate": 2e-5,
    "beta": 0.0,
    "temperature": 1.0,
    "num_train_epochs": 1.0,
    "logging_steps": 1,
    "save_strategy": "no",
    "eval_strategy": "no",
    "report_to": "none",
}


@dataclass
class GRPORecipeConfig(RecipeConfig):
    router: str | None = "runs/sft"  # the SFT router run to refine (adapter + tiermem_router.json)
    allow_no_sft: bool = False  # start from the bare base model with a fresh adapter (not recommended)
    model: str = DEFAULT_LM  # base spec, used only with allow_no_sft and no router; lora then sets the new adapter
    output_dir: str = "runs/grpo"


def build_grpo_config(cfg: GRPORecipeConfig) -> Any:
    from trl import GRPOConfig

    defaults = {**RECIPE_DEFAULTS, "output_dir": cfg.output_dir, "seed": cfg.seed, "data_seed": cfg.seed}
    return build_trl_config(GRPOConfig, trainer_args(defaults, cfg.cpu_defaults, cfg.trainer))


def load_policy(cfg: GRPORecipeConfig) -> tuple[Any, Any, str, dict[str, Any] | None, Any]:
    """(model, tokenizer, base spec, SFT run info, peft_config for a fresh adapter or None)."""
    from tiermem.models import load_causal_lm

    if cfg.router:
        if not (Path(cfg.router) / RUN_META_FILE).is_file():
            raise MissingFileError(
                f"no SFT router run at {cfg.router} ({RUN_META_FILE} missing): run `make sft` first, or point "
                "router= at an SFT output directory"
            )
        model, tokenizer, meta = load_adapter_run(cfg.router, trainable=True)
        sft_info = {"sft_dir": cfg.router, "stage": meta.stage, "validation": meta.metrics.get("validation")}
        return model, tokenizer, meta.base_model, sft_info, None
    if not cfg.allow_no_sft:
        raise ConfigError(
            "GRPO starts from an SFT adapter: set router= to a `make sft` output, or allow_no_sft=true to start "
            "from the bare base model (expect zero reward variance there: no learning signal)"
        )
    log.warning("=" * 70 + "\nGRPO WITHOUT SFT: fresh LoRA adapter on %s. Expect zero reward variance.\n" + "=" * 70,
                cfg.model)
    model, tokenizer = load_causal_lm(cfg.model, device=training_device())
    return model, tokenizer, cfg.model, None, cfg.lora.to_peft()


def load_reward_rows(cfg: GRPORecipeConfig, tokenizer: Any) -> tuple[Any, Any, dict[str, Any]]:
    dataset, train, val = load_label_rows(cfg, tokenizer, f"no labeled rows with known path outcomes in "
                                          f"{cfg.train_split!r}", train_rewards=True, eval_rewards=True)
    balanced, info = balance_rows(cfg, dataset, train, val)
    return balanced, val, info


def completion_tokens_needed(cfg: GRPORecipeConfig, tokenizer: Any, rows: Any) -> dict[str, int]:
    """Tokens each action's completion needs under the format scope: its prefix, or its longest full target."""
    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    if cfg.rewards.format_scope == "action":
        return {a: count(contract.OUTPUT_PREFIX + a + '"') for a in contract.ACTIONS}
    needed: dict[str, int] = {}
    for label, completion in zip(rows["label"], rows["completion"], strict=True):
        needed[label] = max(needed.get(label, 0), count(completion))  # the eos is part of a finished completion
    return needed


def reward_curves(log_history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    curves = []
    for entry in log_history:
        if "reward" not in entry:
            continue
        point = {"step": entry.get("step")}
        point.update({k: v for k, v in entry.items() if k.startswith(_CURVE_PREFIXES)})
        curves.append(point)
    return curves


def zero_variance_warning(curves: list[dict[str, Any]]) -> str | None:
    """A run where every logged step had zero reward spread across each prompt's samples learned nothing."""
    spreads = [p.get("frac_reward_zero_std") for p in curves if p.get("frac_reward_zero_std") is not None]
    if spreads and all(s >= 1.0 for s in spreads):
        return (f"GRPO reward variance was zero at every one of {len(spreads)} logged steps: all samples of each "
                "prompt got the same reward, so advantages and gradients were zero and the adapter did not learn "
                "from the rewards. Start from a better SFT adapter, raise temperature or num_generations.")
    return None


def train(cfg: GRPORecipeConfig) -> RunResult:
    args = build_grpo_config(cfg)
    if cfg.router and Path(cfg.router).resolve() == Path(cfg.output_dir).resolve():
        raise ConfigError(f"output_dir {cfg.output_dir} is the SFT run itself: GRPO would overwrite the SFT adapter")
    refuse_output_over_input(cfg.output_dir, "grpo", {"router": cfg.router, "model": cfg.model})
    # Held until training ends: one run per directory (a distributed launch is one run: rank 0 holds it).
    with launch_run_dir(cfg.output_dir, "grpo", leader=is_launch_leader()):
        return _train(cfg, args)


def _train(cfg: GRPORecipeConfig, args: Any) -> RunResult:
    from transformers import set_seed
    from trl import GRPOTrainer

    set_seed(cfg.seed)
    model, tokenizer, base_spec, sft_info, peft_config = load_policy(cfg)
    train_rows, val_rows, data_info = load_reward_rows(cfg, tokenizer)
    reward_funcs = build_reward_funcs(cfg.rewards, train_rows["cost_research_input_tokens"],
                                      args.max_completion_length, completion_tokens_needed(cfg, tokenizer, train_rows))
    data_info["cost_scale_tokens"] = reward_funcs[0].cost_scale
    columns = ["prompt", "label", "s_ok", "r_ok", "cost_research_input_tokens"]
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=train_rows.select_columns(columns),
        eval_dataset=(val_rows.select_columns(columns)
                      if val_rows is not None and len(val_rows) and args.eval_strategy != "no" else None),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    log.info("GRPO on %d prompts x %d generations, max_completion_length=%d", len(train_rows),
             args.num_generations, args.max_completion_length)
    train_metrics = train_and_save_weights(trainer, cfg.output_dir)
    if train_metrics is None:  # another rank: the main process reports and writes the metadata
        return RunResult(Path(cfg.output_dir), {}, trainer.model, tokenizer)
    curves = reward_curves(trainer.state.log_history)
    warning = zero_variance_warning(curves)
    if warning:
        log.warning("\n%s\n!!! %s\n%s", "!" * 70, warning, "!" * 70)
    metrics = {
        "train": train_metrics,
        **decision_reports(trainer.model, tokenizer, train_rows, val_rows, cfg),
        "warnings": [warning] if warning else [],
        # the curves' headline columns, for the run card (reward_curves.json keeps every logged key)
        "reward_curve": [{k: p.get(k) for k in ("step", "reward", "reward_std", "frac_reward_zero_std")}
                         for p in curves],
    }
    meta = RunMeta(
        contract_version=contract.CONTRACT_VERSION, base_model=base_spec, stage="grpo", adapter=True,
        training={**asdict(cfg), "sft": sft_info,
                  "resolved_trainer_args": {k: getattr(args, k) for k in (
                      "learning_rate", "num_generations", "max_completion_length", "per_device_train_batch_size",
                      "beta", "temperature", "loss_type", "scale_rewards", "max_steps", "num_train_epochs",
                      "bf16", "use_vllm", "vllm_mode", "seed")}},
        data=data_info, metrics=metrics,
    )
    return save_and_report("grpo", trainer.model, tokenizer, meta, cfg.output_dir,
                           files={CURVES_FILE: json.dumps(curves, indent=1)})


@stage_main("grpo")
def main(argv: list[str]) -> int:
    train(parse_cli(GRPORecipeConfig, argv, default_config=DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
