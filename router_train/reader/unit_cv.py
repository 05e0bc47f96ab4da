"""The unit reader's model selection: CV over the train + validation conversations, a reader per fold, a head per
grid point fitted on the other conversations; the best mean AUROC wins. The test split is never read."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from labeling.dataset import domain_of
from serving.routers.unit_reader import TEXT_SCORES
from serving.signals import FEATURES, feature_matrix
from tiermem import contract
from tiermem.models.cross_encoder import CrossEncoder
from tiermem.models.logistic import fit_logistic
from tiermem.settings.errors import DataError

from .finetune import FrozenBottom, train_epochs
from .targets import LEXICAL, pairs
from .unit_head import column_names, head_inputs, head_score, read_units
from .unit_inputs import fresh_reader, question_key

log = logging.getLogger(__name__)


def auroc_or_none(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    from tiermem.stats import auroc

    return auroc(list(scores), list(labels)) if 0 < sum(labels) < len(labels) else None


def escalate(rows: Sequence[dict[str, Any]]) -> np.ndarray:
    return np.array([r["label"] == "ESCALATE" for r in rows], dtype=np.float64)


def loco_scores(rows: list[dict[str, Any]], x: np.ndarray, text_weight: float, l2: float,
                text_columns: bool) -> dict[str, float | None]:
    """conv -> AUROC of a head fitted on the other conversations' rows, scoring this one's."""
    y = escalate(rows)
    conv = np.array([r["conv_id"] for r in rows])
    out: dict[str, float | None] = {}
    for c in sorted(set(conv)):
        fit_on, held = conv != c, conv == c
        head = fit_logistic(x[fit_on], y[fit_on], column_names(x), l2)
        score = head_score(head, x[held], text_weight) if text_columns else head.log_odds(x[held])
        out[str(c)] = auroc_or_none(score.tolist(), (y[held] > 0.5).tolist())
    return out


def summary(per_conv: dict[str, float | None], domains: dict[str, str] | None = None) -> dict[str, Any]:
    """The folds' AUROCs; over several `domains`, also each domain's mean and the worst (what `choose` ranks by)."""
    vals = [v for v in per_conv.values() if v is not None]
    out = {"mean": round(float(np.mean(vals)), 4) if vals else None,
           "min": round(min(vals), 4) if vals else None, "max": round(max(vals), 4) if vals else None,
           "std": round(float(np.std(vals)), 4) if vals else None,
           "per_conversation": {k: None if v is None else round(v, 4) for k, v in per_conv.items()}}
    if domains and len(set(domains.values())) > 1:
        by_domain = {d: [v for c, v in per_conv.items() if domains.get(c) == d and v is not None]
                     for d in sorted(set(domains.values()))}
        out["by_domain"] = {d: round(float(np.mean(v)), 4) if v else None for d, v in by_domain.items()}
        means = list(out["by_domain"].values())
        out["worst_domain"] = None if None in means else min(means)
    return out


def fold_groups(records: list[dict[str, Any]], train_convs: set[str], n_folds: int) -> list[list[str]]:
    """The reader's CV folds of held-out conversations. n_folds 0: one per conversation. Else validation is one
    fold (its reader is the final one) and the train conversations are dealt into n_folds - 1, domain by domain."""
    convs = sorted({str(r["conv_id"]) for r in records})
    if n_folds == 0 or n_folds >= len(convs):
        return [[c] for c in convs]
    domains = {str(r["conv_id"]): domain_of(r) for r in records}
    held = [c for c in convs if c not in train_convs]
    train = sorted((c for c in convs if c in train_convs), key=lambda c: (domains[c], c))
    groups: list[list[str]] = [[] for _ in range(n_folds - 1 if held else n_folds)]
    for i, c in enumerate(train):
        groups[i % len(groups)].append(c)
    return [g for g in ([held] if held else []) + groups if g]


def cross_validate(cfg: Any, records: list[dict[str, Any]], train_convs: set[str]
                   ) -> tuple[dict, dict, dict]:
    """(out-of-fold unit logits per (layers, epochs, targets), the CV table, the weights of the fold trained on
    exactly `train_convs`). Layers 0 is the base as it is: zero-shot, the same logits in every fold."""
    import copy

    convs = sorted({str(r["conv_id"]) for r in records})
    if len(convs) < 2:
        raise DataError(f"cross-validation over conversations needs >= 2, got {convs}")
    oof: dict[tuple[int, int, str], dict[tuple[str, str], list[float]]] = {}
    folds: dict[str, Any] = {}
    snapshots: dict[tuple[int, int, str], Any] = {}
    for layers in cfg.finetune_layers:
        if layers == 0:
            started = time.perf_counter()
            logits = read_units(fresh_reader(cfg), records)
            oof[(0, 0, "none")] = {question_key(r): row for r, row in zip(records, logits, strict=True)}
            folds["zero-shot"] = {"scored_questions": len(records), "wall_s": round(time.perf_counter() - started, 1)}
            log.warning("unit-reader CV zero-shot: %d questions scored, %.0f s", len(records),
                        folds["zero-shot"]["wall_s"])
            continue
        bottom = None
        for e in range(1, cfg.max_epochs + 1):
            oof[(layers, e, LEXICAL)] = {}
        for group in fold_groups(records, train_convs, cfg.cv_folds):
            started = time.perf_counter()
            held = [r for r in records if str(r["conv_id"]) in group]
            rest = [r for r in records if str(r["conv_id"]) not in group]
            train = pairs(rest, cfg.deep_negatives, cfg.deep_positives)
            reader = fresh_reader(cfg)
            bottom = bottom or FrozenBottom(reader, layers)  # frozen weights: shared by every fold
            is_final = {str(r["conv_id"]) for r in rest} == train_convs

            def after_epoch(epoch: int, reader: CrossEncoder = reader, held: list = held,
                            is_final: bool = is_final, layers: int = layers):
                logits = read_units(reader, held)
                oof[(layers, epoch, LEXICAL)].update({question_key(r): row
                                                      for r, row in zip(held, logits, strict=True)})
                if is_final:
                    snapshots[(layers, epoch, LEXICAL)] = copy.deepcopy(
                        (reader.model.state_dict(), reader.span_head.state_dict() if reader.has_spans else None))

            losses = train_epochs(reader, train, cfg, bottom, after_epoch)
            name = f"{layers} layer(s), {LEXICAL}, held out {'+'.join(group)}"
            folds[name] = {"held_out": group, "train_pairs": len(train), "held_questions": len(held),
                           "loss_by_epoch": losses,
                           "wall_s": round(time.perf_counter() - started, 1)}
            log.warning("unit-reader CV %s: %d pairs, losses %s, %.0f s", name, len(train), losses,
                        folds[name]["wall_s"])
    labeled = [r for r in records if r["label"] in contract.ACTIONS]
    signals = feature_matrix([r["question"] for r in labeled], [r["router_summaries"] for r in labeled])
    domains = {str(r["conv_id"]): domain_of(r) for r in labeled}
    table: dict[str, Any] = {"folds": folds, "signals_only": summary(loco_scores(labeled, signals, 0.0, cfg.l2,
                                                                                  False), domains), "grid": []}
    spans_read = any(len(u) > 1 for row in next(iter(oof.values())).values() for u in row)
    scores = [t for t in cfg.text_scores if spans_read or 1 not in TEXT_SCORES[t]]  # 1: the span margin
    if not scores:
        raise DataError(f"text_scores {cfg.text_scores} all read the span margin, and the base {cfg.base!r} has no "
                        "span head")
    for (layers, epoch, targets), by_key in oof.items():
        logits = [by_key[question_key(r)] for r in labeled]
        for text_scores in scores:
            for pooling in cfg.poolings:
                x = head_inputs(labeled, logits, pooling, text_scores)
                text_alone = [-v for v in x[:, len(FEATURES)]]  # the first text feature, a max: high = answered
                for w in cfg.text_weights:
                    table["grid"].append({
                        "finetune_layers": layers, "epochs": epoch, "targets": targets, "head_target": "label",
                        "text_scores": text_scores, "pooling": pooling, "text_weight": w,
                        **summary(loco_scores(labeled, x, w, cfg.l2, True), domains),
                        "text_alone_auroc": auroc_or_none(text_alone, (escalate(labeled) > 0.5).tolist())})
    return oof, table, snapshots


def point_key(g: dict[str, Any]) -> tuple[int, int, str]:
    """A grid point's reader: (layers fine-tuned, epochs, target setting); older grids had lexical targets only."""
    return (g["finetune_layers"], g["epochs"], g.get("targets", "none" if g["finetune_layers"] == 0 else "lexical"))


def choose(table: dict[str, Any]) -> dict[str, Any]:
    """Best mean LOCO AUROC, or over several domains the best worst-domain mean (a setting must hold on every
    domain); ties: better mean, fewer layers, fewer epochs, smaller text weight, then grid order."""
    scored = [g for g in table["grid"] if g["mean"] is not None]
    if not scored:
        raise DataError("cross-validation: no fold had both labels; cannot choose")
    if all("by_domain" in g for g in scored) and any(g.get("worst_domain") is not None for g in scored):
        scored = [g for g in scored if g.get("worst_domain") is not None]
        return max(scored, key=lambda g: (g["worst_domain"], g["mean"], -g["finetune_layers"], -g["epochs"],
                                          -g["text_weight"]))
    return max(scored, key=lambda g: (g["mean"], -g["finetune_layers"], -g["epochs"], -g["text_weight"]))


def candidates(table: dict[str, Any]) -> list[dict[str, Any]]:
    """The best grid point of each (layers, epochs, targets, text scores): what each fine-tuning step and each of
    the reader's scores adds, zero-shot first."""
    best: dict[tuple[int, int, str, str], dict[str, Any]] = {}
    for g in table["grid"]:
        k = (*point_key(g), g.get("text_scores", "classifier"))
        if g["mean"] is not None and (k not in best or g["mean"] > best[k]["mean"]):
            best[k] = g
    return [{k: v for k, v in best[key].items() if k != "per_conversation"} for key in sorted(best)]
