"""Uncertainty and ranking statistics for routing evaluation (numpy only): the two-stage cluster bootstrap as count
vectors over the questions (paired by construction), AUROC, AUPRC and the reliability curve (docs/DESIGN.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

LEVEL = 0.95


def bootstrap_counts(clusters: Sequence[Any], n_boot: int = 1000, seed: int = 0) -> np.ndarray:
    """(n_boot, n) draw counts of a two-stage cluster bootstrap: K of the K clusters with replacement, then for each
    drawn copy of a cluster of size m, m of its questions with replacement."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    rng = np.random.default_rng(seed)
    ids = {c: k for k, c in enumerate(dict.fromkeys(clusters))}
    label = np.asarray([ids[c] for c in clusters], dtype=np.int64)
    n, k = len(label), len(ids)
    counts = np.zeros((n_boot, n), dtype=np.float64)
    if k == 0:
        return counts
    order = np.argsort(label, kind="stable")  # questions grouped by cluster
    size = np.bincount(label, minlength=k)
    start = np.concatenate([[0], np.cumsum(size)[:-1]])
    for b in range(n_boot):
        copies = rng.integers(0, k, size=k)  # stage 1: clusters with replacement
        slots = np.repeat(copies, size[copies])  # stage 2: size_k draws within each drawn copy
        picked = start[slots] + (rng.random(len(slots)) * size[slots]).astype(np.int64)
        counts[b, order] = np.bincount(picked, minlength=n)
    return counts


def ones(n: int) -> np.ndarray:
    """The count matrix of the original sample (one replicate, every question once): point estimates."""
    return np.ones((1, n), dtype=np.float64)


def interval(estimate: float | None, reps: np.ndarray, level: float = LEVEL) -> dict[str, Any] | None:
    """Percentile interval of bootstrap replicates (NaN replicates, e.g. an undefined ratio, are left out)."""
    if estimate is None or (isinstance(estimate, float) and math.isnan(estimate)):
        return None
    reps = np.asarray(reps, dtype=np.float64)
    valid = reps[~np.isnan(reps)]
    if valid.size == 0:
        return {"estimate": float(estimate), "lo": None, "hi": None, "n_boot": 0}
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(valid, [tail, 100 - tail])
    return {"estimate": float(estimate), "lo": float(lo), "hi": float(hi), "n_boot": int(valid.size)}


def weighted_mean(values: Sequence[float], counts: np.ndarray) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    total = counts.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, counts @ v / np.where(total > 0, total, 1), np.nan)


def weighted_ratio(num: Sequence[float], den: Sequence[float], counts: np.ndarray) -> np.ndarray:
    """sum(c * num) / sum(c * den) per replicate; NaN where the denominator is 0 (undefined in that sample)."""
    n = counts @ np.asarray(num, dtype=np.float64)
    d = counts @ np.asarray(den, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(d > 0, n / np.where(d > 0, d, 1), np.nan)


def policy_rates(escalate: Sequence[float], s_ok: Sequence[bool], r_ok: Sequence[bool],
                 label_escalate: Sequence[bool], s_tokens: Sequence[float], r_tokens: Sequence[float],
                 counts: np.ndarray) -> dict[str, np.ndarray]:
    """The eval table's rates per replicate, with metrics.replay's definitions (rates instead of counts for the
    false cache hits / misses: per question over all replayed questions; the answering model's input tokens)."""
    w = np.asarray(escalate, dtype=np.float64)
    s = np.asarray(s_ok, dtype=np.float64)
    r = np.asarray(r_ok, dtype=np.float64)
    hard = np.asarray(label_escalate, dtype=np.float64)
    tok = (1 - w) * np.asarray(s_tokens, dtype=np.float64) + w * np.asarray(r_tokens, dtype=np.float64)
    return {
        "accuracy": weighted_mean((1 - w) * s + w * r, counts),
        "escalation_rate": weighted_mean(w, counts),
        "mean_input_tokens": weighted_mean(tok, counts),
        "hard_recall": weighted_ratio(w * hard, hard, counts),
        "false_cache_hit_rate": weighted_mean((1 - w) * r * (1 - s), counts),
        "false_cache_miss_rate": weighted_mean(w * s, counts),
        "repair_rate": weighted_ratio(w * (1 - s) * r, w * (1 - s), counts),
        "regress_rate": weighted_ratio(w * s * (1 - r), w * s, counts),
    }


def random_accuracy(rate: np.ndarray, s_ok: Sequence[bool], r_ok: Sequence[bool], counts: np.ndarray) -> np.ndarray:
    """Expected accuracy of a router escalating a random `rate` share (per replicate)."""
    weak = weighted_mean(np.asarray(s_ok, dtype=np.float64), counts)
    strong = weighted_mean(np.asarray(r_ok, dtype=np.float64), counts)
    return (1 - rate) * weak + rate * strong


# ---- ranking ---------------------------------------------------------------------------------------------


def _groups(scores: Sequence[float]) -> tuple[np.ndarray, int]:
    s = np.asarray(scores, dtype=np.float64)
    if np.isnan(s).any():
        raise ValueError("scores contain NaN")
    _, inverse = np.unique(s, return_inverse=True)  # ascending unique scores
    return inverse, int(inverse.max()) + 1 if len(inverse) else 0


def auroc_reps(scores: Sequence[float], positive: Sequence[bool], counts: np.ndarray) -> np.ndarray:
    """AUROC per replicate: P(score of a positive > score of a negative) + 1/2 P(equal); NaN without both classes."""
    inverse, u = _groups(scores)
    y = np.asarray(positive, dtype=np.float64)
    out = np.empty(len(counts))
    for b, c in enumerate(counts):
        pos = np.bincount(inverse, weights=c * y, minlength=u)
        neg = np.bincount(inverse, weights=c * (1 - y), minlength=u)
        tp, tn = pos.sum(), neg.sum()
        if tp <= 0 or tn <= 0:
            out[b] = np.nan
            continue
        below = np.cumsum(neg) - neg
        out[b] = float(np.sum(pos * (below + 0.5 * neg)) / (tp * tn))
    return out


def auroc(scores: Sequence[float], positive: Sequence[bool]) -> float:
    value = auroc_reps(scores, positive, ones(len(scores)))[0]
    if math.isnan(value):
        raise ValueError("AUROC needs both classes among the labeled records")
    return float(value)


def worst_group_auroc(scores: Sequence[float], positive: Sequence[bool], groups: Sequence[str]) -> float:
    """The AUROC model selection ranks by: the lowest of the groups' (domains'), so a choice holds on every domain; a
    group without both classes is left out (the pooled AUROC when none has both)."""
    if len(set(groups)) < 2:
        return auroc(scores, positive)
    per = []
    for g in sorted(set(groups)):
        idx = [i for i, x in enumerate(groups) if x == g]
        y = [positive[i] for i in idx]
        if 0 < sum(y) < len(y):
            per.append(auroc([scores[i] for i in idx], y))
    return min(per) if per else auroc(scores, positive)


def average_precision_reps(scores: Sequence[float], positive: Sequence[bool], counts: np.ndarray) -> np.ndarray:
    """Average precision (area under the precision-recall steps, tied scores as one step) per replicate."""
    inverse, u = _groups(scores)
    y = np.asarray(positive, dtype=np.float64)
    out = np.empty(len(counts))
    for b, c in enumerate(counts):
        pos = np.bincount(inverse, weights=c * y, minlength=u)[::-1]  # descending scores
        neg = np.bincount(inverse, weights=c * (1 - y), minlength=u)[::-1]
        total = pos.sum()
        if total <= 0:
            out[b] = np.nan
            continue
        tp, fp = np.cumsum(pos), np.cumsum(neg)
        with np.errstate(invalid="ignore", divide="ignore"):
            precision = np.where(tp + fp > 0, tp / np.where(tp + fp > 0, tp + fp, 1), 0.0)
        out[b] = float(np.sum(pos * precision) / total)
    return out


def apgr_reps(scores: Sequence[float], s_ok: Sequence[bool], r_ok: Sequence[bool], counts: np.ndarray) -> np.ndarray:
    """APGR per replicate, as metrics.sweep: area under PGR(escalation rate) over thresholds from never to always
    escalating (tied scores escalate together). NaN where raw-only is not better than summary-only."""
    inverse, u = _groups(scores)
    s = np.asarray(s_ok, dtype=np.float64)
    r = np.asarray(r_ok, dtype=np.float64)
    out = np.empty(len(counts))
    for b, c in enumerate(counts):
        n = c.sum()
        weak, strong = (c @ s) / n, (c @ r) / n
        if strong - weak <= 0:
            out[b] = np.nan
            continue
        w_group = np.bincount(inverse, weights=c, minlength=u)[::-1]
        gain = np.bincount(inverse, weights=c * (r - s), minlength=u)[::-1]
        rates = np.concatenate([[0.0], np.cumsum(w_group) / n])
        acc = weak + np.concatenate([[0.0], np.cumsum(gain) / n])
        pgr = (acc - weak) / (strong - weak)
        out[b] = float(np.sum(np.diff(rates) * (pgr[1:] + pgr[:-1]) / 2))
    return out


def reliability(p: Sequence[float], positive: Sequence[bool], bins: int = 10) -> dict[str, Any]:
    """Equal-width reliability curve of p (P(positive)) and ECE = sum_bins (n_bin / n) |observed - mean p|."""
    pv = np.asarray(p, dtype=np.float64)
    y = np.asarray(positive, dtype=np.float64)
    idx = np.minimum((pv * bins).astype(int), bins - 1)
    curve = []
    for k in range(bins):
        m = idx == k
        if m.any():
            curve.append({"lo": k / bins, "hi": (k + 1) / bins, "n": int(m.sum()), "mean_p": float(pv[m].mean()),
                          "observed": float(y[m].mean())})
    return {"bins": bins, "curve": curve, "ece": float(ece_reps(pv, y, ones(len(pv)), bins)[0])}


def ece_reps(p: Sequence[float], positive: Sequence[bool], counts: np.ndarray, bins: int = 10) -> np.ndarray:
    pv = np.asarray(p, dtype=np.float64)
    y = np.asarray(positive, dtype=np.float64)
    idx = np.minimum((pv * bins).astype(int), bins - 1)
    out = np.empty(len(counts))
    for b, c in enumerate(counts):
        n = np.bincount(idx, weights=c, minlength=bins)
        sp = np.bincount(idx, weights=c * pv, minlength=bins)
        sy = np.bincount(idx, weights=c * y, minlength=bins)
        total = n.sum()
        out[b] = float(np.sum(np.abs(sy - sp)) / total) if total > 0 else np.nan
    return out
