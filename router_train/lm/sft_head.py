"""SFT's signal head and what SFT chooses on validation: the starting head, the epoch kept, and the LM margin's weight
in the served score (margin x text_weight + head(signals)). `cfg`: the SFT config (SFTRecipeConfig) throughout."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

from serving.routers.lm_head import head_as_trained, served_score
from serving.signals import FEATURES, SIGNAL_HEAD_FILE
from tiermem.models.logistic import LogisticModel, fit_logistic
from tiermem.runs.run_meta import RunMeta

from .objectives import TEXT_WEIGHTS
from .rows import natural_rows

log = logging.getLogger(__name__)


def initial_signal_head(cfg: Any, train_rows: Any, init_meta: RunMeta | None,
                        init_dir: str | None) -> tuple[LogisticModel | None, bool]:
    """(the head training starts from, whether to centre it against the untrained adapter): the continued
    router's own head as it was trained, or a logistic regression on the natural train rows' signals."""
    if not cfg.loss.signal_head:
        return None, False
    info = (init_meta.data.get("signal_head") or {}) if init_meta else {}
    if info.get("file"):  # training combines the head with the margin at weight 1: the head as it was trained
        return head_as_trained(init_dir, init_meta)[0], False
    natural = natural_rows(train_rows)  # as the head trains: see objectives.py
    y = np.array([label == "ESCALATE" for label in natural["label"]], dtype=np.float64)
    x = np.array(natural["signals"], dtype=np.float64)
    return fit_logistic(x, y, FEATURES, cfg.loss.signal_head_l2), True


def text_weight_grid(cfg: Any, model: Any, tokenizer: Any, head: LogisticModel | None, val_rows: Any,
                     trunk: Any = None) -> tuple[np.ndarray, dict[str, float]] | None:
    """(the validation margins, {weight: the served score's worst-domain validation AUROC} over TEXT_WEIGHTS, or the
    fixed loss.text_weight alone); None without validation rows of both labels."""
    from tiermem.stats import worst_group_auroc

    from .decisions import escalation_scores

    labels = [label == "ESCALATE" for label in (val_rows["label"] if val_rows is not None else [])]
    if not 0 < sum(labels) < len(labels):
        return None
    margins = np.array(escalation_scores(model, tokenizer, val_rows["prompt"], cfg.eval_batch_size, trunk=trunk))
    heads = None if head is None else head.log_odds(np.array(val_rows["signals"], dtype=np.float64))
    domains = list(val_rows["domain"])  # several domains: each weight by its worst domain's AUROC
    weights = TEXT_WEIGHTS if cfg.loss.text_weight is None else (cfg.loss.text_weight,)
    return margins, {str(w): worst_group_auroc(served_score(margins, heads, w).tolist(), labels, domains)
                     for w in weights}


def choose_text_weight(cfg: Any, model: Any, tokenizer: Any, head: LogisticModel, val_rows: Any,
                       trained_weight: float = 1.0,
                       trunk: Any = None) -> tuple[float, dict[str, float] | None, LogisticModel]:
    """(loss.text_weight, else the TEXT_WEIGHTS entry of best validation AUROC, ties to the larger; {weight: AUROC}
    or None; the head, its bias moved by (trained_weight - weight) x the mean validation margin so the score keeps
    the level of the `head + trained_weight x margin` it was fitted in, and the uncalibrated threshold its meaning)."""
    if cfg.loss.text_weight is not None:
        return float(cfg.loss.text_weight), None, head
    scored = text_weight_grid(cfg, model, tokenizer, head, val_rows, trunk)
    if scored is None:
        log.warning("no validation rows with both labels: text_weight stays 1.0")
        return 1.0, None, head
    margins, grid = scored
    best = max(TEXT_WEIGHTS, key=lambda w: (grid[str(w)], w))
    log.info("text_weight %s chosen on %d validation rows (AUROC by weight: %s)", best, len(margins), grid)
    shifted = dataclasses.replace(head, bias=float(head.bias + (trained_weight - best) * margins.mean()))
    return float(best), grid, shifted


def epoch_choice_callback(cfg: Any, trainer: Any, tokenizer: Any, val_rows: Any) -> Any:
    """A callback scoring validation after each epoch (the best AUROC of `text_weight_grid`), which keeps the best
    epoch's trainable weights (adapter and signal head) and puts them back at train end."""
    from transformers import TrainerCallback

    from tiermem.models.torch_state import restore_trainable, trainable_snapshot

    class EpochChoice(TrainerCallback):
        def __init__(self) -> None:
            self.epochs: list[dict[str, Any]] = []
            self.best: tuple[float, int, dict[str, Any]] | None = None

        def on_epoch_end(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any) -> Any:
            head = trainer.signal_head.to_logistic() if trainer.signal_head is not None else None
            scored = text_weight_grid(cfg, trainer.model, tokenizer, head, val_rows, getattr(trainer, "trunk", None))
            score = None if scored is None else max(scored[1].values())
            epoch = round(state.epoch or len(self.epochs) + 1)
            self.epochs.append({"epoch": epoch, "step": state.global_step, "validation_auroc": score})
            log.info("sft epoch %d: validation AUROC %s", epoch, score)
            if score is not None and (self.best is None or score > self.best[0]):
                self.best = (score, epoch, trainable_snapshot(trainer.model))
            return control

        def on_train_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
            if self.best is not None and self.epochs and self.best[1] != self.epochs[-1]["epoch"]:
                restore_trainable(trainer.model, self.best[2])
                log.info("sft: kept epoch %d (validation AUROC %.4f)", self.best[1], self.best[0])
            return control

        def report(self) -> dict[str, Any]:
            return {"epochs": self.epochs, "kept_epoch": self.best[1] if self.best else None}

    return EpochChoice()


def trained_signal_head(cfg: Any, trainer: Any, tokenizer: Any, val_rows: Any, head_init: LogisticModel,
                        centre_head: bool) -> tuple[LogisticModel, float, dict[str, Any]]:
    """(the trained head shifted for the text weight chosen on validation, that weight, its `data.signal_head`)."""
    head = trainer.signal_head.to_logistic()
    trained_bias = head.bias
    text_weight, grid, head = choose_text_weight(cfg, trainer.model, tokenizer, head, val_rows,
                                                 trunk=getattr(trainer, "trunk", None))
    info = {"file": SIGNAL_HEAD_FILE, "features": list(FEATURES),
            "init": "router" if not centre_head else "logistic regression on train",
            "init_weights": dict(zip(FEATURES, head_init.weights, strict=True)),
            "weights": dict(zip(FEATURES, head.weights, strict=True)),
            "text_weight": text_weight, "text_weight_validation_auroc": grid,
            "bias_shift": head.bias - trained_bias}
    return head, text_weight, info
