"""Pieces both recipes share: LoRA settings, CPU-aware trainer arguments, the label rows, loading a router run,
training it and saving and reporting the result."""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from router_train.lm.rewards import RewardConfig
from tiermem import contract
from tiermem.models.specs import make_adapter_portable
from tiermem.runs import safe_io
from tiermem.runs.run_meta import RUN_META_FILE, RunMeta, RunMetaFile, file_digests, read_run_meta, verify_files
from tiermem.settings.errors import ConfigError, UsageError

log = logging.getLogger(__name__)
SAVE_STAGING = ".trainer-save"  # trainer.save_model writes here; the files are then moved into the run


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
    top_layers: int | None = None

    def __post_init__(self) -> None:
        if self.top_layers is not None and self.top_layers < 1:
            raise ConfigError(f"lora.top_layers must be >= 1 or null (all layers), got {self.top_layers}")

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

    data: str = "runs/label/dataset"  # DatasetDict saved by `make label`
    output_dir: str = "runs/router"
    train_split: str = "train"
    eval_split: str = "validation"
    lora: LoraSettings = field(default_factory=LoraSettings)
    rewards: RewardConfig = field(default_factory=RewardConfig)  # the reward table (GRPO; SFT's expected_reward)
    balance: str = "none"  # none | oversample | undersample (train split only)
    seed: int = 42
    cpu_defaults: bool = True  # fp32, no gradient checkpointing, threads = cores, when no GPU is present
    max_train_rows: int | None = None
    max_eval_rows: int | None = None
    metrics_train_rows: int = 64  # train rows scored for the train-side decision metrics
    eval_batch_size: int = 8
    eval_generate_limit: int = 16  # greedy generations parsed per split to report format/parse rates
    trainer: dict[str, Any] = field(default_factory=dict)  # passed to TRL's SFTConfig / GRPOConfig, which validate it


def has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def training_device() -> str:
    """Each `accelerate launch` process loads onto its own GPU; CPU otherwise."""
    return f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if has_gpu() else "cpu"


def trainer_args(recipe_defaults: dict[str, Any], cpu_defaults: bool, user: dict[str, Any]) -> dict[str, Any]:
    """recipe defaults < CPU defaults (only without a GPU) < the user's `trainer:` mapping.

    On CPU, fp32 and no gradient checkpointing: bf16 weights were reported ~10x slower per step and
    checkpointing several times slower for a model this small. `make bench` measures it side by side: on an
    avx512_bf16 CPU, TRL's defaults (bf16 autocast + checkpointing) came out ~10% faster on short runs, so
    re-measure on your hardware and override with `cpu_defaults=false` if they win there too.
    """
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
    from tiermem.settings.config import ConfigError, check_field_types

    kwargs = check_field_types(config_cls, kwargs, f"trainer ({config_cls.__name__})")
    try:
        return config_cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"trainer ({config_cls.__name__}): {exc}") from None


def load_label_rows(cfg: RecipeConfig, tokenizer: Any, empty: str, *, train_rewards: bool, eval_rewards: bool,
                    signals: bool = False, teacher: bool = False) -> tuple[Any, Any, Any]:
    """(the label DatasetDict, the train split's rows, the eval split's rows or None without that split).

    `*_rewards`: keep only rows whose path outcomes are known and bring the columns rewards read; `signals`: add
    the serve-time features (router_train.lm.rows.build_rows); `teacher`: the train rows' `teacher_agrees`. `empty`
    says why an empty train split is an error."""
    from labeling.dataset import load_dataset_dict

    from . import rows as rows_lib

    dataset = load_dataset_dict(cfg.data)
    source = f"label dataset {cfg.data}"
    train = rows_lib.build_rows(dataset, cfg.train_split, tokenizer, source=source, with_rewards=train_rewards,
                                with_signals=signals, with_teacher=teacher, limit=cfg.max_train_rows)
    if len(train) == 0:
        raise rows_lib.RecordError(f"{source}: {empty}")
    val = (rows_lib.build_rows(dataset, cfg.eval_split, tokenizer, source=source, with_rewards=eval_rewards,
                               with_signals=signals, limit=cfg.max_eval_rows) if cfg.eval_split in dataset else None)
    return dataset, train, val


def balance_rows(cfg: RecipeConfig, dataset: Any, train: Any, val: Any,
                 minimal_pairs: bool = False) -> tuple[Any, dict[str, Any]]:
    """The train rows balanced by `cfg.balance`, and what the run's metadata records of the rows (`data`);
    `minimal_pairs`: count the train rows that are minimal pairs too."""
    from . import rows as rows_lib

    balanced = rows_lib.balance(train, cfg.balance, cfg.seed)
    info = {
        "data": cfg.data,
        "label_rules": rows_lib.label_rules(dataset),
        "router_input": rows_lib.router_input(dataset, cfg.train_split),
        "train_labels": rows_lib.label_counts(train),
        **({"train_minimal_pairs": int(sum(train["augmented"]))} if minimal_pairs else {}),
        "train_labels_after_balance": rows_lib.label_counts(balanced),
        "validation_labels": rows_lib.label_counts(val) if val is not None else None,
        "balance": cfg.balance,
    }
    return balanced, info


def load_adapter_run(run_dir: str | Path, *, trainable: bool) -> tuple[Any, Any, RunMeta]:
    """Base model + the run's LoRA adapter; refuses a run saved under another contract version."""
    from peft import PeftModel
    from transformers import AutoTokenizer

    from tiermem.models.specs import load_causal_lm

    run_dir = Path(run_dir)
    meta = read_run_meta(run_dir)
    contract.check_version(meta.contract_version, where=str(run_dir))
    if not meta.adapter:
        raise UsageError(f"{run_dir}: holds merged weights, not a LoRA adapter; load it as a model spec instead")
    verify_files(run_dir, meta)  # GRPO starts from these weights: the same check as serving them
    base, _ = load_causal_lm(meta.base_model, device=training_device())
    tokenizer = AutoTokenizer.from_pretrained(str(run_dir))
    model = PeftModel.from_pretrained(base, str(run_dir), is_trainable=trainable)
    # The saved config names the base by hub id (portable); in memory it names the local copy just loaded, so
    # PEFT's save-time vocabulary check reads that copy instead of querying the hub (offline: a warning).
    for adapter_config in model.peft_config.values():
        adapter_config.base_model_name_or_path = base.name_or_path
    model.train(trainable)
    return model, tokenizer, meta


def clear_run_meta(output_dir: str | Path) -> None:
    """A rerun removes the old metadata when training starts, so a crashed run never looks like a finished one
    (and a run that fails on its inputs leaves the previous finished run as it was)."""
    (Path(output_dir) / RUN_META_FILE).unlink(missing_ok=True)


def save_run(tokenizer: Any, output_dir: str | Path, meta: RunMeta) -> Path:
    """Main process, after `trainer.save_model` (which every process calls): tokenizer, the adapter config made
    portable (its base named by hub id, not by this machine's path), our model card in place of PEFT's empty
    template, then the metadata with the sha256 of every weight file, written last because it marks a complete
    run."""
    from serving.model_card import save_with_card

    safe_io.save_pretrained(tokenizer, output_dir)
    if meta.adapter:
        base = make_adapter_portable(output_dir, meta.base_model)
        if base is None:
            log.warning("base model %s has no hub id: %s/adapter_config.json names a local path, so plain PEFT "
                        "loads it only on this machine (our loaders use tiermem_router.json)", meta.base_model,
                        output_dir)
    meta.files = file_digests(output_dir)
    return save_with_card(RunMetaFile.new(output_dir, meta))


def is_main_process(trainer: Any) -> bool:
    return bool(trainer.accelerator.is_main_process)


def is_launch_leader() -> bool:
    """Before the trainer exists: rank 0 of a torchrun / accelerate launch, or a plain single process. Only it
    locks the run directory; the other ranks of the same run write their shards into it too."""
    return os.environ.get("RANK", "0").strip() in ("", "0")


@dataclass
class RunResult:
    output_dir: Path
    metrics: dict[str, Any]
    model: Any  # the trained PeftModel, still in memory
    tokenizer: Any


def train_and_save_weights(trainer: Any, output_dir: str | Path,
                           after_train: Any = None) -> dict[str, Any] | None:
    """Train, then save the weights from every process (sharded/distributed saves need all ranks). Returns the
    train metrics (with global_step and seconds_per_step) on the main process, None on the others: only the main
    process reports and writes the run's metadata (`save_and_report`). `after_train()` runs between the two, on
    every rank (GRPO puts its best checked weights back there)."""
    # Only now, with the model and the rows loaded, does the old run stop being the run in this directory.
    clear_run_meta(output_dir)
    staging = safe_io.refuse_link(Path(output_dir) / SAVE_STAGING)
    if is_main_process(trainer):  # the trainer's save writes only inside this folder, made fresh by the stage
        shutil.rmtree(staging, ignore_errors=True)  # a killed run's partial save
        staging.mkdir(parents=True)
    started = time.perf_counter()
    result = trainer.train()
    if after_train is not None:
        after_train()
    if getattr(trainer, "trunk", None) is not None:  # SFT's frozen trunk: its states, for the next run to reuse
        trainer.trunk.save()
    steps = trainer.state.global_step
    args = trainer.args
    train_metrics = {**result.metrics, "global_step": steps,
                     "seconds_per_step": (time.perf_counter() - started) / max(steps, 1),
                     # data parallel: every process trains on its share of each global batch
                     "world_size": args.world_size,
                     "global_batch_size": args.per_device_train_batch_size * args.gradient_accumulation_steps
                     * args.world_size}
    # Every rank saves into one staging folder (sharded saves need them all); the main process then moves the
    # files into the run by rename, so the trainer's plain open() never meets a link planted in the run.
    staging = Path(output_dir) / SAVE_STAGING
    trainer.save_model(str(staging))
    trainer.accelerator.wait_for_everyone()
    if not is_main_process(trainer):
        return None
    safe_io.move_into(staging, output_dir)
    shutil.rmtree(staging, ignore_errors=True)
    return train_metrics


def decision_reports(model: Any, tokenizer: Any, train_rows: Any, val_rows: Any, cfg: RecipeConfig,
                     signal_head: Any = None, text_weight: float = 1.0) -> dict[str, Any]:
    """The run's `train_decisions` (the first cfg.metrics_train_rows train rows) and `validation` metrics, against
    the train split's majority label."""
    majority = majority_label(list(train_rows["label"]))
    return {
        "train_decisions": decision_report(model, tokenizer, train_rows, majority, cfg, cfg.metrics_train_rows,
                                           signal_head, text_weight),
        "validation": decision_report(model, tokenizer, val_rows, majority, cfg, None, signal_head, text_weight),
    }


def save_and_report(stage: str, model: Any, tokenizer: Any, meta: RunMeta, output_dir: str | Path,
                    files: dict[str, str] | None = None) -> RunResult:
    """Write the run (the recipe's own `files` by name and text, then save_run: metadata last, it marks a finished
    run) and print its summary line."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (files or {}).items():
        safe_io.write_atomic(out / name, text)
    save_run(tokenizer, out, meta)
    log.info("saved the %s router to %s", stage, out)
    print_summary(stage, out, meta.metrics)
    return RunResult(out, meta.metrics, model, tokenizer)


def decision_report(
    model: Any, tokenizer: Any, rows: Any, majority: str | None, cfg: Any, limit: int | None,
    signal_head: Any = None, text_weight: float = 1.0,
) -> dict[str, Any] | None:
    """Decision metrics on a split's rows (first `limit` rows), or None without rows. With a signal head (a
    serving.signals.LogisticModel), the rows' `signals` column feeds it, as serving's features would."""
    from .decisions import evaluate_router

    if rows is None or len(rows) == 0:
        return None
    rows = rows.select(range(min(len(rows), limit))) if limit else rows
    return evaluate_router(model, tokenizer, rows["prompt"], rows["label"], majority,
                           batch_size=cfg.eval_batch_size, generate_limit=cfg.eval_generate_limit,
                           signal_head=signal_head, signals=rows["signals"] if signal_head is not None else None,
                           text_weight=text_weight)


def print_summary(stage: str, out: Path, metrics: dict[str, Any]) -> None:
    val = metrics.get("validation") or {}
    if val.get("n"):
        majority = val["baseline_majority_accuracy"]
        print(f"[{stage}] validation n={val['n']}: decision accuracy {val['accuracy']:.3f} "
              f"(majority-class {'n/a' if majority is None else f'{majority:.3f}'}, "
              f"always-escalate {val['baseline_always_escalate_accuracy']:.3f}), "
              f"escalation rate {val['escalation_rate']:.3f}")
    else:
        print(f"[{stage}] no labeled validation rows: no validation metrics")
    print(f"[{stage}] run saved to {out}")


def majority_label(labels: list[str]) -> str | None:
    if not labels:
        return None
    counts = {a: labels.count(a) for a in contract.ACTIONS}
    return max(contract.ACTIONS, key=lambda a: (counts[a], a == "ESCALATE"))  # ties -> ESCALATE (safe side)
