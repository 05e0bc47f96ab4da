"""`make sft`: LoRA distillation of the hindsight labels into the router (TRL SFTTrainer + PEFT) on the contract's
rows; the run holds the adapter, tokenizer and tiermem_router.json. Multi-GPU: `accelerate launch` (README.md)."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labeling.dataset import RecordError
from serving.routers.lm_head import action_token_ids
from serving.signals import SIGNAL_HEAD_FILE
from tiermem import contract
from tiermem.models.adapter import BASE_KEY, base_config_digest
from tiermem.models.logistic import save_logistic
from tiermem.models.model_dir import refuse_output_over_input
from tiermem.models.specs import DEFAULT_LM
from tiermem.rewards import RewardConfig, resolve_cost_scale, score_decision
from tiermem.runs.run_meta import RunMeta
from tiermem.runs.rundir import launch_run_dir
from tiermem.runs.safe_io import check_file_path, refuse_link

from .decisions import decision_reports
from .objectives import REWARD_COLUMNS, REWARD_LOSSES, LossConfig, RouterSFTTrainer, balanced_class_weights
from .recipe_config import RecipeConfig, build_trl_config, recipe_main, trainer_args
from .router_run import (
    RunResult,
    is_launch_leader,
    save_and_report,
    start_model,
    train_and_save_weights,
    trunk_data,
)
from .rows import balance_rows, load_label_rows, natural_rows
from .sft_head import epoch_choice_callback, initial_signal_head, trained_signal_head

log = logging.getLogger(__name__)
DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "sft" / "smollm2_135m_cpu.yaml"

# TRL/transformers arguments the recipe sets unless the YAML's `trainer:` mapping says otherwise.
RECIPE_DEFAULTS: dict[str, Any] = {
    "max_length": 1024,
    "completion_only_loss": True,  # loss on the router's JSON only, never on the prompt
    "per_device_train_batch_size": 4,
    "gradient_accumulation_steps": 1,
    "learning_rate": 2e-4,
    "num_train_epochs": 1.0,
    "lr_scheduler_type": "cosine",
    "warmup_steps": 0.05,
    "logging_steps": 5,
    "save_strategy": "no",  # the recipe saves once, at the end, with its metadata
    "eval_strategy": "no",
    "report_to": "none",
    # Data parallel: the signal head runs after the model's forward (in compute_loss), so DDP's unused-parameter
    # search would mark it unused at forward time and then see its gradient arrive ("marked as ready twice").
    # Every trainable parameter gets a gradient each step (a minimal pair's zero one included), so no search is
    # needed.
    "ddp_find_unused_parameters": False,
}


@dataclass
class SFTRecipeConfig(RecipeConfig):
    model: str = DEFAULT_LM  # router base: packaged:..., a local dir or a hub id
    output_dir: str = "runs/sft"
    loss: LossConfig = field(default_factory=LossConfig)
    router: str | None = None  # continue training this router run's adapter (e.g. runs/sft); None: a new adapter
    # the seed's teacher filter: train only on rows whose teacher decision (labeling's teacher role, or one recorded
    # in the label run's judgments) equals the label; rows without a teacher decision stay. Validation is not filtered
    teacher_filter: bool = False
    # score the validation rows after every epoch (the AUROC the served score reaches: the best text weight beside
    # the head, as text_weight null chooses it) and keep the best epoch's adapter and head (ties: the earlier)
    epoch_choice: bool = True
    # train on the train split's minimal pairs too (they train the LM's margin only: the signal head reads natural
    # retrieval); false: natural rows only, about 40% of the rows and of the frozen trunk's minutes
    minimal_pairs: bool = True


def build_sft_config(cfg: SFTRecipeConfig) -> Any:
    from trl import SFTConfig

    defaults = {**RECIPE_DEFAULTS, "output_dir": cfg.output_dir, "seed": cfg.seed, "data_seed": cfg.seed}
    return build_trl_config(SFTConfig, trainer_args(defaults, cfg.cpu_defaults, cfg.trainer))


def train(cfg: SFTRecipeConfig) -> RunResult:
    from transformers import set_seed

    args = build_sft_config(cfg)  # validates the trainer mapping before any model is loaded
    if cfg.loss.trunk_cache:  # written after training: a path it could not be written to is named now
        refuse_link(check_file_path(cfg.loss.trunk_cache, "loss.trunk_cache", may_be_new=True,
                                    made_here=cfg.output_dir))
    set_seed(cfg.seed)
    refuse_output_over_input(cfg.output_dir, "sft", {"model": cfg.model, "router": cfg.router, "data": cfg.data})
    # Held until training ends: one run per directory (a distributed launch is one run: rank 0 holds it).
    with launch_run_dir(cfg.output_dir, "sft", leader=is_launch_leader()):
        return _train(cfg, args)


def _train(cfg: SFTRecipeConfig, args: Any) -> RunResult:
    model, tokenizer, base_spec, peft_config, init_meta = start_model(cfg)
    train_rows, val_rows, data_info = load_rows(cfg, tokenizer)
    data_info[BASE_KEY] = base_config_digest(model.config)  # which base the adapter is proven over
    head_init, centre_head = initial_signal_head(cfg, train_rows, init_meta, cfg.router)
    data_info.update(token_lengths(train_rows, tokenizer, args.max_length))
    log.info("SFT on %d rows (%s), validation %s", len(train_rows), data_info["train_labels_after_balance"],
             data_info["validation_labels"])
    columns = (["prompt", "completion"] + (list(REWARD_COLUMNS) if cfg.loss.kind in REWARD_LOSSES else [])
               + (["signals", "augmented"] if head_init is not None else []))
    weights = balanced_class_weights(list(train_rows["label"]))  # the decision loss's: inverse label frequency
    data_info["class_weights"] = list(weights) if cfg.loss.kind == "decision" else None
    trainer = RouterSFTTrainer(
        model=model,
        args=args,
        train_dataset=train_rows.select_columns(columns),
        eval_dataset=(val_rows.select_columns(["prompt", "completion"])
                      if val_rows is not None and args.eval_strategy != "no" and cfg.loss.kind not in REWARD_LOSSES
                      else None),
        processing_class=tokenizer,
        peft_config=peft_config,
        loss=cfg.loss,
        action_ids=action_token_ids(tokenizer, train_rows["prompt"][0]),
        class_weights=weights,
        signal_head=head_init,
        centre_signal_head=centre_head,
    )
    choice = epoch_choice_callback(cfg, trainer, tokenizer, val_rows) if cfg.epoch_choice else None
    if choice is not None:
        trainer.add_callback(choice)
    train_metrics = train_and_save_weights(trainer, cfg.output_dir)
    if train_metrics is None:  # another rank: the main process reports and writes the metadata
        return RunResult(Path(cfg.output_dir), {}, trainer.model, tokenizer)
    if choice is not None:
        train_metrics["epoch_choice"] = choice.report()
    head, text_weight = None, 1.0
    if trainer.signal_head is not None:
        head, text_weight, data_info["signal_head"] = trained_signal_head(cfg, trainer, tokenizer, val_rows,
                                                                          head_init, centre_head)
        save_logistic(Path(cfg.output_dir) / SIGNAL_HEAD_FILE, head)
    metrics = {
        "train": train_metrics,
        **decision_reports(trainer.model, tokenizer, train_rows, val_rows, cfg, head, text_weight, trainer.trunk),
        "log_history": trainer.state.log_history,
    }
    if trainer.trunk is not None:  # again: the reports added the validation prompts' states, which GRPO reads
        trainer.trunk.save()
        data_info.update(trunk_data(trainer.trunk, cfg.output_dir))
    if metrics["validation"] is None:
        log.warning("no labeled validation rows: validation metrics are missing from this run")
    meta = RunMeta(
        contract_version=contract.CONTRACT_VERSION, base_model=base_spec,
        stage="sft" if cfg.loss.kind != "expected_reward" else "expected_reward", adapter=True,
        training={**asdict(cfg), "resolved_trainer_args": _resolved(args)}, data=data_info, metrics=metrics,
    )
    return save_and_report("sft", trainer.model, tokenizer, meta, cfg.output_dir)


# ---- what SFT trains on: its rows (the label rows, filtered by the teacher and the minimal-pairs setting, with
# both actions' rewards for the reward losses)


def with_action_rewards(rows: Any, rewards: RewardConfig, scale: float | None) -> Any:
    """reward_answer / reward_escalate per row: what each action would earn under the reward table."""
    def both(row: dict[str, Any]) -> dict[str, float]:
        return {col: score_decision(action, bool(row["s_ok"]), bool(row["r_ok"]), row["cost_research_input_tokens"],
                                    rewards, scale).total
                for col, action in zip(REWARD_COLUMNS, ("ANSWER", "ESCALATE"), strict=True)}

    return rows.map(both)


def load_rows(cfg: Any, tokenizer: Any) -> tuple[Any, Any, dict[str, Any]]:
    need_rewards = cfg.loss.kind in REWARD_LOSSES
    dataset, train, val = load_label_rows(cfg, tokenizer, f"no labeled rows in split {cfg.train_split!r}; nothing "
                                          "to train on", train_rewards=need_rewards, eval_rewards=False,
                                          signals=cfg.loss.signal_head, teacher=cfg.teacher_filter)
    if not cfg.minimal_pairs:
        train = natural_rows(train)
        if len(train) == 0:
            raise RecordError(f"label dataset {cfg.data}: minimal_pairs=false left no train row (every row of split "
                              f"{cfg.train_split!r} is a minimal pair)")
    teacher_info = None
    if cfg.teacher_filter:
        before = len(train)
        train = train.filter(lambda row: row["teacher_agrees"] is not False)
        teacher_info = {"rows_before": before, "kept": len(train), "dropped_teacher_disagrees": before - len(train),
                        "without_teacher_decision": sum(v is None for v in train["teacher_agrees"])}
        log.info("teacher filter: %d of %d train rows kept (the teacher's decision equals the label, or none)",
                 len(train), before)
        if len(train) == 0:
            raise RecordError(f"label dataset {cfg.data}: teacher_filter left no train row (the teacher disagrees "
                              "with every label)")
    scale = None
    if need_rewards:
        scale = resolve_cost_scale(cfg.rewards, train["cost_research_input_tokens"])
        train = with_action_rewards(train, cfg.rewards, scale)
    balanced, info = balance_rows(cfg, dataset, train, val, minimal_pairs=True)
    info["loss"] = cfg.loss.kind
    if teacher_info is not None:
        info["teacher_filter"] = teacher_info
    if need_rewards:
        info["cost_scale_tokens"] = scale
    return balanced, val, info


def token_lengths(rows: Any, tokenizer: Any, max_length: int | None) -> dict[str, Any]:
    """What the run's metadata records of the train rows' token lengths (rows over `max_length` are truncated)."""
    lengths = [len(tokenizer(p + c)["input_ids"]) for p, c in zip(rows["prompt"], rows["completion"], strict=True)]
    over = sum(n > max_length for n in lengths) if max_length else 0
    if over:
        log.warning("%d of %d train rows exceed max_length=%d tokens and are truncated", over, len(lengths),
                    max_length)
    return {"train_tokens_max": max(lengths), "train_tokens_mean": sum(lengths) / len(lengths),
            "train_rows_over_max_length": over}


def _resolved(args: Any) -> dict[str, Any]:
    keys = ("learning_rate", "num_train_epochs", "max_steps", "per_device_train_batch_size",
            "gradient_accumulation_steps", "max_length", "bf16", "fp16", "gradient_checkpointing",
            "completion_only_loss", "lr_scheduler_type", "warmup_steps", "seed", "use_cpu")
    return {k: getattr(args, k) for k in keys if hasattr(args, k)}


main = recipe_main("sft", SFTRecipeConfig, DEFAULT_CONFIG, train)


if __name__ == "__main__":
    raise SystemExit(main())
