"""The unit reader's final fit at the settings CV chose: the reader, its head on out-of-fold unit logits, the base
reader's own best head beside it, and the out-of-fold router scores for calibrate."""

from __future__ import annotations

from typing import Any

import numpy as np

from serving.routers.unit_reader import ZERO_SHOT_HEAD_FILE
from tiermem.models.cross_encoder import CrossEncoder
from tiermem.models.logistic import LogisticModel, fit_logistic

from .finetune import FrozenBottom, train_epochs
from .targets import pairs
from .unit_cv import choose, escalate, point_key
from .unit_head import head_inputs, head_names, head_score
from .unit_inputs import fresh_reader, question_key

Record = dict[str, Any]


def final_reader(cfg: Any, train_records: list[Record], chosen: tuple[int, int, str], snapshots: dict,
                 table: dict[str, Any], train_convs: set[str]) -> tuple[CrossEncoder, list[float], int]:
    """(the reader at the chosen (layers, epochs, targets), its loss by epoch, the train split's pair count)."""
    final_pairs = pairs(train_records, cfg.deep_negatives, cfg.deep_positives)
    reader = fresh_reader(cfg)
    losses: list[float] = []
    if chosen in snapshots:
        # the fold that held out every other CV conversation trained on exactly the train split: its weights at
        # the chosen epoch are the model CV measured, so they are the final reader (no second training)
        model_state, span_state = snapshots[chosen]
        reader.model.load_state_dict(model_state)
        if span_state is not None:
            reader.span_head.load_state_dict(span_state)
        held_out = next(c for c, fold in table["folds"].items() if c.startswith(f"{chosen[0]} layer(s), {chosen[2]},")
                        and not set(fold["held_out"]) & train_convs)
        losses = table["folds"][held_out]["loss_by_epoch"]
    elif chosen[0] > 0:
        losses = train_epochs(reader, final_pairs, cfg, FrozenBottom(reader, chosen[0]), epochs=chosen[1])
    return reader, losses, len(final_pairs)


def final_head(cfg: Any, rows: list[Record], oof: dict, point: dict[str, Any]) -> LogisticModel:
    """The head at `point`, fitted on the labeled train records' out-of-fold unit logits."""
    x = head_inputs(rows, [oof[point_key(point)][question_key(r)] for r in rows], point["pooling"],
                    point["text_scores"])
    return fit_logistic(x, escalate(rows), head_names(point["pooling"], point["text_scores"]), cfg.l2)


def zero_shot_head(cfg: Any, table: dict[str, Any], rows: list[Record], oof: dict) -> dict[str, Any]:
    """The base reader's own best head for the run's `extra` when CV chose a fine-tuned reader; else {}."""
    zero_shot = [g for g in table["grid"] if g["finetune_layers"] == 0 and g["mean"] is not None]
    if not zero_shot:
        return {}
    point = choose({"grid": zero_shot})
    entry = {"head": ZERO_SHOT_HEAD_FILE, **{k: point[k] for k in ("pooling", "text_weight", "text_scores")},
             "cv_mean": point["mean"]}
    return {"zero_shot": entry, "zero_shot_head": final_head(cfg, rows, oof, point)}


def out_of_fold_scores(cfg: Any, records: list[Record], oof: dict, best: dict[str, Any]) -> dict[str, Any]:
    """Out-of-fold router scores over every CV record (each conversation scored by a head fitted on the others),
    written for calibrate; returns what the run's metadata keeps of them."""
    from tiermem.runs.oof_scores import loco, write_oof_scores

    logits = [oof[point_key(best)][question_key(r)] for r in records]
    x = head_inputs(records, logits, best["pooling"], best["text_scores"])
    y = escalate(records)  # loco fits on labeled rows only
    names = head_names(best["pooling"], best["text_scores"])

    def score_held(fit: np.ndarray, held: np.ndarray) -> np.ndarray:
        return head_score(fit_logistic(x[fit], y[fit], names, cfg.l2), x[held], best["text_weight"])

    settings = {k: best[k] for k in ("finetune_layers", "epochs", "targets", "head_target", "text_scores", "pooling",
                                     "text_weight")}
    return write_oof_scores(cfg.output_dir, records, loco(records, score_held), {
        "dataset": cfg.data, "splits": list(cfg.cv_splits), "settings": settings,
        "method": f"cross-validation ({cfg.cv_folds or 'one per conversation'} folds): out-of-fold unit "
                  "logits, head fitted on the other conversations"})
