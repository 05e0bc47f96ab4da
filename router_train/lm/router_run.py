"""A router run of SFT or GRPO: its start, training with the save every rank joins, the run written, its summary."""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from router_train.lm.recipe_config import training_device
from tiermem.models.adapter import BASE_KEY
from tiermem.models.specs import make_adapter_portable
from tiermem.runs import safe_io
from tiermem.runs.run_meta import RUN_META_FILE, RunMeta
from tiermem.runs.rundir import claim_output_dir
from tiermem.settings.errors import UsageError

log = logging.getLogger(__name__)
SAVE_STAGING = ".trainer-save"  # trainer.save_model writes here; the files are then moved into the run


def load_adapter_run(run_dir: str | Path, *, trainable: bool) -> tuple[Any, Any, RunMeta]:
    """A router run's adapter to train on, loaded and checked as serving loads it (serving's one adapter loader)."""
    from serving.routers.base import open_run_dir
    from serving.routers.local import load_adapter_model

    meta = open_run_dir(run_dir, where=str(run_dir))
    if not meta.adapter:
        raise UsageError(f"{run_dir}: holds merged weights, not a LoRA adapter; load it as a model spec instead")
    model, tokenizer = load_adapter_model(run_dir, meta, device=training_device(), trainable=trainable)
    # The saved config names the base by hub id (portable); in memory it names the local copy just loaded, so
    # PEFT's save-time vocabulary check reads that copy instead of querying the hub (offline: a warning).
    for adapter_config in model.peft_config.values():
        adapter_config.base_model_name_or_path = model.get_base_model().name_or_path
    model.train(trainable)
    return model, tokenizer, meta


def start_model(cfg: Any) -> tuple[Any, Any, str, Any, RunMeta | None]:
    """(model, tokenizer, base spec, peft_config for a new adapter or None, the continued run's metadata or None):
    the router run `cfg.router` continued, else a new LoRA adapter (cfg.lora) on cfg.model."""
    from tiermem.models.specs import load_causal_lm

    if cfg.router:
        model, tokenizer, meta = load_adapter_run(cfg.router, trainable=True)
        return model, tokenizer, meta.base_model, None, meta
    model, tokenizer = load_causal_lm(cfg.model, device=training_device())
    return model, tokenizer, cfg.model, cfg.lora.to_peft(model.config.num_hidden_layers), None


def save_run(tokenizer: Any, output_dir: str | Path, meta: RunMeta) -> Path:
    """Main process, after `trainer.save_model`: tokenizer, the adapter config made portable (its base named by hub
    id), then write_router_run (model card, metadata with the weights' sha256, last: it marks a complete run)."""
    from serving.routers.score_run import write_router_run

    safe_io.save_pretrained(tokenizer, output_dir)
    if meta.adapter and BASE_KEY not in meta.data:
        raise ValueError(f"the metadata of an adapter run names no base identity (data.{BASE_KEY})")
    if meta.adapter:
        base = make_adapter_portable(output_dir, meta.base_model)
        if base is None:
            log.warning("base model %s has no hub id: %s/adapter_config.json names a local path, so plain PEFT "
                        "loads it only on this machine (our loaders use tiermem_router.json)", meta.base_model,
                        output_dir)
    return write_router_run(output_dir, meta)


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
    """Train, run `after_train()` on every rank, then save the weights from every process (sharded saves need all
    ranks). Returns the train metrics on the main process, None on the others (only it writes the metadata)."""
    # Only now, with the model and the rows loaded, does the old run stop being the run in this directory: its
    # metadata goes, so a crashed run never looks like a finished one (one that fails on its inputs leaves it as was).
    (Path(output_dir) / RUN_META_FILE).unlink(missing_ok=True)
    staging = safe_io.refuse_link(Path(output_dir) / SAVE_STAGING)
    main_process = bool(trainer.accelerator.is_main_process)
    if main_process:  # the trainer's save writes only inside this folder, made fresh by the stage
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
    trainer.save_model(str(staging))
    trainer.accelerator.wait_for_everyone()
    if not main_process:
        return None
    safe_io.move_into(staging, output_dir)
    shutil.rmtree(staging, ignore_errors=True)
    return train_metrics


def trunk_data(trunk: Any, output_dir: str | Path, read_from: str | None = None) -> dict[str, Any]:
    """`data.trunk_states`: the state file the run wrote (its sha256, checked by the next reader) or read (`read_from`:
    GRPO's trunk_from), and what was said of it."""
    from tiermem.models.trunk_file import RECORD_KEY, trunk_record

    if read_from is not None:
        path, written, sequences = Path(read_from), False, len(trunk.prefix_states)
    else:
        path, written = trunk.cache_file, trunk.writable
        sequences = len(trunk.cache) if written else trunk.saved or 0
    if path is None or not path.is_file():
        return {}
    record = trunk_record(path, output_dir, trunk.fingerprint, sequences, written)
    return {RECORD_KEY: {**record, "notes": list(trunk.notes)} if trunk.notes else record}


def save_and_report(stage: str, model: Any, tokenizer: Any, meta: RunMeta, output_dir: str | Path,
                    files: dict[str, str] | None = None) -> RunResult:
    """Write the run (the recipe's `files` by name and text, then save_run: metadata last) and print its summary."""
    out = claim_output_dir(output_dir, stage, lock=False)  # the stage's own claim, or a marker made for it now
    for name, text in (files or {}).items():
        safe_io.write_atomic(out / name, text)
    save_run(tokenizer, out, meta)
    log.info("saved the %s router to %s", stage, out)
    print_summary(stage, out, meta.metrics)
    return RunResult(out, meta.metrics, model, tokenizer)


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
