"""`make grpo`: TRL GRPOTrainer on the SFT router, rewarding accuracy and penalizing waste and cost; the policy is the
decision token under an action prior, and what it learned is measured without sampling (docs/DESIGN.md). Multi-GPU:
`accelerate launch --config_file configs/accelerate/multi_gpu.yaml -m router_train.lm.grpo --config ...`."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from serving.routers.lm_head import action_token_ids, head_as_trained
from serving.signals import SIGNAL_HEAD_FILE
from tiermem import contract
from tiermem.models.adapter import BASE_KEY, base_config_digest
from tiermem.models.logistic import save_logistic
from tiermem.models.model_dir import refuse_output_over_input
from tiermem.runs.run_meta import RUN_META_FILE, RunMeta, read_run_meta
from tiermem.runs.rundir import launch_run_dir
from tiermem.runs.safe_io import check_file_path
from tiermem.settings.config import ConfigError
from tiermem.settings.errors import MissingFileError

from .decisions import decision_reports
from .recipe_config import RecipeConfig, build_trl_config, recipe_main, trainer_args
from .rewards import build_reward_funcs
from .router_run import RunResult, is_launch_leader, save_and_report, start_model, train_and_save_weights, trunk_data
from .rows import balance_rows, load_label_rows, natural_rows

log = logging.getLogger(__name__)
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "grpo" / "smollm2_135m_cpu.yaml"
CURVES_FILE = "reward_curves.json"
SCALE_REWARDS = ("group", "batch", "none")  # what TRL's GRPOTrainer computes advantages with


RECIPE_DEFAULTS: dict[str, Any] = {
    "num_generations": 4,
    "max_completion_length": 1,  # completion action_token: the action's first token (text: the action prefix)
    "per_device_train_batch_size": 8,  # completions per step: 2 prompts x 4 generations
    "learning_rate": 2e-5,
    "beta": 0.0,
    # TRL's default ("group") divides each group's advantages by its reward std: a wrong ANSWER (-1.5 against +1)
    # and a wasted ESCALATE (+0.6 against +1) then weigh the same, so the reward table's stakes never reach the
    # policy (measured: the validation expected reward fell). "none": advantages in the table's units (Dr. GRPO).
    "scale_rewards": "none",
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
    output_dir: str = "runs/grpo"
    # action_token: a completion is one token, the action's first after the output prefix; text: JSON, parsed
    completion: Literal["action_token", "text"] = "action_token"
    frozen_trunk: bool = True  # action_token: bottom layers once per prompt when the adapter trains the top ones only
    # the SFT run's trunk-state file (its loss.trunk_cache): a prompt that starts an SFT row reuses its states
    trunk_from: str | None = None
    # refit the signal head on the GRPO adapter's margins: null = when the router run has one; false: no head
    signal_head: bool | None = None
    signal_head_l2: float = field(default=1.0, metadata={"ge": 0})  # L2 of the refit (as SFT's loss.signal_head_l2)
    minimal_pairs: bool = True  # train on the train split's minimal pairs too; false: natural rows only (~40%)
    # the sampled policy's action prior, a logit offset on ESCALATE per prompt (action_token only; grpo_learning):
    # SFT's signal head as SFT trained it beside the margin (null: when the SFT run has one)
    prior_head: bool | None = None
    # one constant more, so the sampled escalation share on the train prompts starts at their label share (null: on)
    prior_calibrate: bool | None = None
    # every N steps the policy's exact expected validation reward is checked (0: only before and after training)
    check_steps: int = field(default=25, metadata={"ge": 0})
    # stop after this many checks without a gain, keeping the best checked weights (0: run every step, keep the last)
    patience: int = field(default=3, metadata={"ge": 0})
    # a check is a gain when it beats the best checked reward by more than this
    min_gain: float = field(default=0.0, metadata={"ge": 0})
    # stop at a check when the logged share of one-action groups since the last check is above this: such groups have
    # zero advantage, so the steps left would not move the policy (1.0: never)
    max_zero_variance: float = field(default=0.5, metadata={"ge": 0, "le": 1})

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared ranges and choices too
        if not self.router:
            raise ConfigError("GRPO starts from an SFT adapter: set router= to a `make sft` output directory")
        if self.completion != "action_token" and (self.prior_head or self.prior_calibrate):
            raise ConfigError("prior_head and prior_calibrate shape the sampled action token: they need "
                              "completion=action_token (set them null or false for completion=text)")


def build_grpo_config(cfg: GRPORecipeConfig) -> Any:
    from trl import GRPOConfig

    defaults = {**RECIPE_DEFAULTS, "output_dir": cfg.output_dir, "seed": cfg.seed, "data_seed": cfg.seed}
    if cfg.completion == "text":
        defaults["max_completion_length"] = 24  # the action comes first; the reason need not finish
    args = build_trl_config(GRPOConfig, trainer_args(defaults, cfg.cpu_defaults, cfg.trainer))
    if args.scale_rewards not in SCALE_REWARDS:  # TRL reads it only at the first step, once the model is loaded
        raise ConfigError(f"trainer.scale_rewards must be one of {list(SCALE_REWARDS)}, got {args.scale_rewards!r}")
    if cfg.completion == "action_token" and args.max_completion_length != 1:
        raise ConfigError(f"completion action_token samples the action's first token: trainer.max_completion_length "
                          f"must be 1, got {args.max_completion_length} (completion=text generates the JSON)")
    if cfg.completion == "action_token" and args.mask_truncated_completions:
        raise ConfigError("completion action_token: every one-token completion is cut by the length limit, so "
                          "trainer.mask_truncated_completions would mask them all")
    return args


def train(cfg: GRPORecipeConfig) -> RunResult:
    args = build_grpo_config(cfg)
    if Path(cfg.router).resolve() == Path(cfg.output_dir).resolve():
        raise ConfigError(f"output_dir {cfg.output_dir} is the SFT run itself: GRPO would overwrite the SFT adapter")
    refuse_output_over_input(cfg.output_dir, "grpo", {"router": cfg.router})
    if cfg.trunk_from:
        check_file_path(cfg.trunk_from, "trunk_from")
    # Held until training ends: one run per directory (a distributed launch is one run: rank 0 holds it).
    with launch_run_dir(cfg.output_dir, "grpo", leader=is_launch_leader()):
        return _train(cfg, args)


def _train(cfg: GRPORecipeConfig, args: Any) -> RunResult:
    from transformers import set_seed

    from .grpo_learning import CURVE_COLUMNS, reward_curves, summary_line
    from .grpo_policy import DecisionGRPOTrainer, refit_head

    set_seed(cfg.seed)
    model, tokenizer, base_spec, sft_info = load_policy(cfg)
    refit, prior_head = wants_head(cfg, sft_info, "signal_head"), wants_head(cfg, sft_info, "prior_head")
    train_rows, natural, val_rows, data_info = load_reward_rows(cfg, tokenizer, cfg.completion == "action_token"
                                                                or args.eval_strategy != "no", refit or prior_head)
    data_info[BASE_KEY] = base_config_digest(model.config)  # which base the adapter is proven over
    action_ids = action_token_ids(tokenizer, train_rows["prompt"][0]) if cfg.completion == "action_token" else None
    reward_funcs = build_reward_funcs(cfg.rewards, train_rows["cost_research_input_tokens"],
                                      args.max_completion_length, tokenizer, action_ids)
    data_info["cost_scale_tokens"] = reward_funcs[0].cost_scale
    trainer = DecisionGRPOTrainer(
        model=model,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=policy_rows(cfg, train_rows),
        eval_dataset=(policy_rows(cfg, val_rows)
                      if val_rows is not None and len(val_rows) and args.eval_strategy != "no" else None),
        processing_class=tokenizer,
        action_token=cfg.completion == "action_token",
        frozen_trunk=cfg.frozen_trunk,
        action_ids=action_ids,
        trunk_from=cfg.trunk_from,
    )
    data_info["frozen_trunk"] = trainer.trunk is not None
    if cfg.trunk_from and trainer.trunk is None:
        raise ConfigError(f"trunk_from={cfg.trunk_from} needs the frozen trunk (completion action_token, frozen_trunk "
                          "true, an adapter on the top layers only)")
    probe, bound, before = _explore(cfg, args, trainer, tokenizer, reward_funcs, train_rows, val_rows, prior_head)
    data_info["action_prior"] = probe.info if probe is not None else None
    log.info("GRPO on %d prompts x %d generations, max_completion_length=%d (%s), %s", len(train_rows),
             args.num_generations, args.max_completion_length, cfg.completion,
             "frozen trunk" if trainer.trunk is not None else "full forwards")
    kept: dict[str, int] = {}
    train_metrics = train_and_save_weights(trainer, cfg.output_dir, after_train=None if bound is None else (
        lambda: kept.update(step=bound.restore(trainer.model, trainer.state.global_step))))
    if train_metrics is None:  # another rank: the main process reports and writes the metadata
        return RunResult(Path(cfg.output_dir), {}, trainer.model, tokenizer)
    head, text_weight = None, 1.0
    if refit:
        head, text_weight, data_info["signal_head"] = refit_head(cfg, trainer, tokenizer, natural, val_rows)
        save_logistic(Path(cfg.output_dir) / SIGNAL_HEAD_FILE, head)
    if trainer.trunk is not None:  # prompts whose bottom layers ran here, and those read from trunk_from
        data_info["trunk_states"] = {"computed": trainer.trunk.misses, "from_trunk_from": trainer.trunk.reused,
                                     **(trunk_data(trainer.trunk, cfg.output_dir, cfg.trunk_from).get(
                                         "trunk_states") or {})}
    curves = reward_curves(trainer.state.log_history)
    learned = _learned(cfg, curves, probe, bound, before, kept.get("step"), head, text_weight, val_rows)
    for warning in learned["warnings"]:
        log.warning("\n%s\n!!! %s\n%s", "!" * 70, warning, "!" * 70)
    print(summary_line(learned), flush=True)
    metrics = {
        "train": train_metrics,
        **decision_reports(trainer.model, tokenizer, train_rows, val_rows, cfg, head, text_weight, trainer.trunk),
        "warnings": learned["warnings"],
        "grpo_signal": learned,
        # the curves' headline columns, for the run card (reward_curves.json keeps every logged key)
        "reward_curve": [{k: p.get(k) for k in CURVE_COLUMNS} for p in curves],
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


# ---- what GRPO starts from: the SFT run's policy, its reward rows, the trainer's prompts, and whether it reads the
# SFT run's signal head (refit after training, action prior)


def load_policy(cfg: Any) -> tuple[Any, Any, str, dict[str, Any]]:
    """(model, tokenizer, base spec, SFT run info)."""
    if not (Path(cfg.router) / RUN_META_FILE).is_file():
        raise MissingFileError(f"no SFT router run at {cfg.router} ({RUN_META_FILE} missing): run `make sft` first, "
                               "or point router= at an SFT output directory")
    model, tokenizer, base_spec, _, meta = start_model(cfg)
    sft_info = {"sft_dir": cfg.router, "stage": meta.stage, "validation": meta.metrics.get("validation"),
                "signal_head": bool((meta.data.get("signal_head") or {}).get("file"))}
    return model, tokenizer, base_spec, sft_info


def load_reward_rows(cfg: Any, tokenizer: Any, eval_rewards: bool,
                     signals: bool) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(balanced train rows, natural train rows, validation rows, data info). Validation keeps every labeled row
    (as SFT's) unless the trainer evaluates rewards on it."""
    dataset, train, val = load_label_rows(cfg, tokenizer, f"no labeled rows with known path outcomes in "
                                          f"{cfg.train_split!r}", train_rewards=True, eval_rewards=eval_rewards,
                                          signals=signals)
    if not cfg.minimal_pairs:
        train = natural_rows(train)
    balanced, info = balance_rows(cfg, dataset, train, val, minimal_pairs=True)
    return balanced, train, val, info


def wants_head(cfg: Any, sft_info: dict[str, Any], option: str) -> bool:
    """Whether GRPO reads the SFT run's signal head for `option` (signal_head: the refit; prior_head: the action
    prior, action_token only): null = when the run has one."""
    has = bool(sft_info.get("signal_head"))
    setting = getattr(cfg, option)
    if setting and not has:
        raise ConfigError(f"{option}=true but the router run {cfg.router} has no signal head (an SFT run with "
                          f"loss.signal_head: true has one); set {option}=null or false")
    wanted = has if setting is None else bool(setting)
    return wanted and (option == "signal_head" or cfg.completion == "action_token")


def policy_rows(cfg: Any, rows: Any) -> Any:
    """The trainer's prompts: with completion action_token each ends with the contract's output prefix."""
    columns = ["prompt", "label", "s_ok", "r_ok", "cost_research_input_tokens"]
    rows = rows.select_columns(columns)
    if cfg.completion == "action_token":
        rows = rows.map(lambda row: {"prompt": row["prompt"] + contract.OUTPUT_PREFIX})
    return rows


def _explore(cfg: GRPORecipeConfig, args: Any, trainer: Any, tokenizer: Any, reward_funcs: list[Any],
             train_rows: Any, val_rows: Any, prior_head: bool) -> tuple[Any, Any, Any]:
    """(the policy probe with its prior set on the trainer, the validation check, the validation logits before
    training); (None, None, None) for completion text, whose policy is TRL's generation."""
    from .grpo_learning import PolicyProbe, RewardPlateauStop

    if cfg.completion != "action_token":
        return None, None, None
    head = head_as_trained(cfg.router, read_run_meta(cfg.router))[0] if prior_head else None
    probe = PolicyProbe(trainer, tokenizer, reward_funcs, temperature=args.temperature,
                        batch_size=cfg.eval_batch_size, head=head, calibrate=cfg.prior_calibrate is not False,
                        train_rows=train_rows, val_rows=val_rows, generations=args.num_generations)
    if probe.prior:
        trainer.set_prior(probe.prior)
    log.info("GRPO action prior: sampled escalation share %.3f on the train prompts (margin alone %.3f, labels "
             "%.3f)", probe.info["escalation_share_at_start"], probe.info["escalation_share_without_prior"],
             probe.info["label_escalation_share"])
    if probe.val is None:
        return probe, None, None
    before = probe.val_logits()
    bound = RewardPlateauStop(probe.val_reward, cfg.check_steps, cfg.patience, cfg.min_gain, cfg.max_zero_variance)
    bound.start(trainer.model, float(probe.val_expected(before).mean()))
    trainer.add_callback(bound)
    return probe, bound, before


def _learned(cfg: GRPORecipeConfig, curves: list[dict[str, Any]], probe: Any, bound: Any, before: Any,
             kept_step: int | None, head: Any, text_weight: float, val_rows: Any) -> dict[str, Any]:
    """metrics.grpo_signal: the learning signal over the logged steps and the validation reward before and after."""
    from .grpo_learning import paired, signal_summary, signal_warnings

    summary = signal_summary(curves)
    policy = router = None
    if probe is not None and before is not None:
        after = probe.val_logits()
        convs = list(val_rows["conv_id"])
        policy = paired(probe.val_expected(before), probe.val_expected(after), convs, cfg.seed)
        _, sft_head, sft_weight = head_as_trained(cfg.router, read_run_meta(cfg.router))
        router = paired(probe.router_rewards(before, sft_head, sft_weight),
                        probe.router_rewards(after, head, text_weight), convs, cfg.seed)
    warnings = signal_warnings(summary, policy)
    return {**summary, "validation_expected_reward": policy, "validation_router_reward": router,
            "checks": bound.checks if bound is not None else [],
            "stopped_at_step": bound.stopped_at if bound is not None else None,
            "stop_reason": bound.stop_reason if bound is not None else None, "kept_step": kept_step,
            "verdict": "not a refinement" if warnings else ("refined" if policy else "not measured"),
            "warnings": warnings}


main = recipe_main("grpo", GRPORecipeConfig, DEFAULT_CONFIG, train)


if __name__ == "__main__":
    raise SystemExit(main())
