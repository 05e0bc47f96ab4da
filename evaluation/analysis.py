"""Intervals, ranking quality and paired comparisons for `make eval`, all from one count matrix of the two-stage
cluster bootstrap, so the intervals of differences are paired."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from evaluation.metrics import Case
from tiermem import stats

RATE_METRICS = ("accuracy", "escalation_rate", "mean_input_tokens", "hard_recall", "false_cache_hit_rate",
                "false_cache_miss_rate", "repair_rate", "regress_rate")
SMALL_N = 100  # questions: below this, say that the test set is small
FEW_CLUSTERS = 5  # conversations: below this the bootstrap cannot see between-conversation variation


@dataclass
class RouterOutput:
    """One router's outputs per case: the replayed cases, then the `ranked_only` ones (see analyze)."""

    key: str  # its row in the table
    escalate: list[float]  # 1 / 0 per case
    scores: list[float] | None  # log-odds (any score where higher = escalate); None: the router gives none
    p: list[float] | None  # fitted probabilities of ESCALATE, for the reliability curve; None: not a probability


def _arrays(cases: Sequence[Case]) -> dict[str, np.ndarray]:
    return {
        "s_ok": np.array([c.s_ok for c in cases], dtype=float), "r_ok": np.array([c.r_ok for c in cases], dtype=float),
        "hard": np.array([c.label == "ESCALATE" for c in cases], dtype=float),
        "s_tok": np.array([c.s_tokens for c in cases], dtype=float),
        "r_tok": np.array([c.r_tokens for c in cases], dtype=float),
    }


def _rates(a: Mapping[str, np.ndarray], w: Sequence[float], counts: np.ndarray):
    return stats.policy_rates(w, a["s_ok"], a["r_ok"], a["hard"], a["s_tok"], a["r_tok"], counts)


def _num(x: float) -> float | None:
    return None if x is None or np.isnan(x) else float(x)


def _reading(a: str, b: str, metric: str, lo: float | None, hi: float | None, random: bool = False) -> str:
    if lo is None or hi is None:
        return f"{metric}: undefined on this sample"
    if lo > 0:
        return f"{a} is better than {b} on {metric} (interval above 0)" if metric != "mean input tokens" else \
            f"{a} uses more tokens than {b}"
    if hi < 0:
        return f"{a} is worse than {b} on {metric} (interval below 0)" if metric != "mean input tokens" else \
            f"{a} uses fewer tokens than {b}"
    if random:
        return f"{a} is no better than random on {metric}: the interval includes the random value"
    return f"{a} and {b} are not distinguishable on {metric}: the interval of the difference includes 0"


def _diff(a: str, b: str, metric: str, point: float, reps: np.ndarray, level: float,
          random: bool = False) -> dict[str, Any]:
    iv = stats.interval(point, reps, level) or {"estimate": None, "lo": None, "hi": None}
    return {"a": a, "b": b, "metric": metric, "estimate": iv["estimate"], "lo": iv.get("lo"), "hi": iv.get("hi"),
            "reading": _reading(a, b, metric, iv.get("lo"), iv.get("hi"), random)}


def analyze(cases: Sequence[Case], clusters: Sequence[str], outputs: Sequence[RouterOutput],
            baselines: Mapping[str, Sequence[float]], *, main: str | None = "routed", n_boot: int = 1000,
            seed: int = 0, level: float = 0.95, bins: int = 10, ranked_only: Sequence[Case] = (),
            ranked_only_clusters: Sequence[str] = (), pairs: Sequence[Sequence[str]] = ()) -> dict[str, Any]:
    """Intervals for every policy's rates, ranking quality per router and paired comparisons.

    `baselines`: row key -> escalation weights over `cases` (constant r for the random router: its exact expected
    value). `ranked_only`: labeled cases whose path outcome is unknown (not replayable): the outputs cover them
    after `cases`, and they count in the metrics that read only the label (AUROC, AUPRC, ECE, reliability), never
    in the replayed rates or APGR. One bootstrap draws over both, so every interval stays paired.
    `pairs`: more (a, b) row keys compared head to head (accuracy, AUROC, APGR and mean input tokens, each at its
    row's threshold), e.g. a refined router against the one it started from; a pair with the main router replaces
    that row's comparison with the main router.
    """
    n, m = len(cases), len(ranked_only)
    if len(ranked_only_clusters) != m:
        raise ValueError(f"{m} ranked-only cases but {len(ranked_only_clusters)} clusters")
    for o in outputs:
        for name in ("escalate", "scores", "p"):
            value = getattr(o, name)
            if value is not None and len(value) != n + m:
                raise ValueError(f"{o.key}: {len(value)} {name} for {n} replayed + {m} ranked-only cases")
    a = _arrays(cases)
    all_clusters = [*clusters, *ranked_only_clusters]
    point_all = stats.ones(n + m)
    reps_all = stats.bootstrap_counts(all_clusters, n_boot, seed) if n_boot else np.zeros((0, n + m))
    point, reps = point_all[:, :n], reps_all[:, :n]
    n_clusters = len(set(clusters))
    intervals: dict[str, dict[str, Any]] = {}
    rate_reps: dict[str, dict[str, np.ndarray]] = {}
    rate_points: dict[str, dict[str, np.ndarray]] = {}
    policies = [(o.key, o.escalate[:n]) for o in outputs]
    policies += [(k, list(w)) for k, w in baselines.items()]
    for key, w in policies:
        rate_points[key] = _rates(a, w, point)
        rate_reps[key] = _rates(a, w, reps)
        intervals[key] = {m: stats.interval(_num(rate_points[key][m][0]), rate_reps[key][m], level)
                          for m in RATE_METRICS}

    ranking: dict[str, Any] = {}
    comparisons: list[dict[str, Any]] = []
    pair_keys = {(a, b) for a, b in pairs}
    ranked = [*cases, *ranked_only]
    lab = np.array([c.label in ("ANSWER", "ESCALATE") for c in ranked], dtype=bool)
    y = np.array([c.label == "ESCALATE" for c in ranked], dtype=float)[lab]
    score_reps: dict[str, dict[str, np.ndarray]] = {}
    score_points: dict[str, dict[str, float | None]] = {}
    for o in outputs:
        entry: dict[str, Any] = {"n_labeled": int(lab.sum()), "escalate_share": float(y.mean()) if lab.any() else None}
        if o.scores is None:
            entry["note"] = "no score: ranking metrics need a router score (log-odds or probability)"
            ranking[o.key] = entry
            continue
        s = np.asarray(o.scores, dtype=float)
        both = lab.any() and 0 < y.sum() < len(y)
        pts: dict[str, float | None] = {}
        rps: dict[str, np.ndarray] = {}
        if both:
            for name, fn in (("auroc", stats.auroc_reps), ("auprc", stats.average_precision_reps)):
                pts[name] = _num(fn(s[lab], y, point_all[:, lab])[0])
                rps[name] = fn(s[lab], y, reps_all[:, lab])
        else:
            entry["note"] = "AUROC/AUPRC need both labels among the labeled records"
        pts["apgr"] = _num(stats.apgr_reps(s[:n], a["s_ok"], a["r_ok"], point)[0])
        rps["apgr"] = stats.apgr_reps(s[:n], a["s_ok"], a["r_ok"], reps)
        if o.p is not None and lab.any():
            p = np.asarray(o.p, dtype=float)
            entry["reliability"] = stats.reliability(p[lab], y, bins)
            pts["ece"] = entry["reliability"]["ece"]
            rps["ece"] = stats.ece_reps(p[lab], y, reps_all[:, lab], bins)
        for name, value in pts.items():
            entry[name] = stats.interval(value, rps[name], level)
        ranking[o.key] = entry
        score_points[o.key], score_reps[o.key] = pts, rps

    def rate_diffs(a_key: str, b_key: str, metrics: Sequence[str], **extra: Any) -> None:
        for metric in metrics:
            label = "mean input tokens" if metric == "mean_input_tokens" else metric
            comparisons.append({**_diff(a_key, b_key, label, float(rate_points[a_key][metric][0]
                                                                   - rate_points[b_key][metric][0]),
                                        rate_reps[a_key][metric] - rate_reps[b_key][metric], level), **extra})

    def score_diffs(a_key: str, b_key: str, **extra: Any) -> None:
        for metric in ("auroc", "apgr"):
            pa, pb = score_points.get(a_key, {}).get(metric), score_points.get(b_key, {}).get(metric)
            if pa is not None and pb is not None:
                comparisons.append({**_diff(a_key, b_key, metric.upper(), pa - pb,
                                            score_reps[a_key][metric] - score_reps[b_key][metric], level), **extra})

    for o in outputs:
        rp, rr = rate_points[o.key], rate_reps[o.key]
        rand_p = stats.random_accuracy(rp["escalation_rate"], a["s_ok"], a["r_ok"], point)
        rand_r = stats.random_accuracy(rr["escalation_rate"], a["s_ok"], a["r_ok"], reps)
        comparisons.append(_diff(o.key, "random at its escalation rate", "accuracy",
                                 float(rp["accuracy"][0] - rand_p[0]), rr["accuracy"] - rand_r, level, random=True))
        pts, rps = score_points.get(o.key, {}), score_reps.get(o.key, {})
        for metric in ("auroc", "apgr"):
            if pts.get(metric) is not None:
                comparisons.append(_diff(o.key, "random (0.5)", metric.upper(), pts[metric] - 0.5,
                                         rps[metric] - 0.5, level, random=True))
        for base in ("summary_only", "raw_only"):
            rate_diffs(o.key, base, ("accuracy", "mean_input_tokens"))
        if main is not None and o.key != main and main in rate_points and (o.key, main) not in pair_keys:
            rate_diffs(o.key, main, ("accuracy",))
            score_diffs(o.key, main)

    for a_key, b_key in pairs:
        if a_key in rate_points and b_key in rate_points:
            rate_diffs(a_key, b_key, ("accuracy", "mean_input_tokens"), pair=True)
            score_diffs(a_key, b_key, pair=True)

    notes = []
    if n < SMALL_N:
        notes.append(f"only {n} questions: intervals are wide, and a few dozen questions prove nothing either way")
    if n_clusters < FEW_CLUSTERS:
        notes.append(f"only {n_clusters} conversation(s): the bootstrap cannot see how much results vary between "
                     "conversations, so even these intervals are optimistic about new conversations")
    return {
        "uncertainty": {"method": "two-stage cluster bootstrap (conversations, then questions), percentile",
                        "n_boot": n_boot, "seed": seed, "level": level, "n": n, "n_ranked_only": m,
                        "n_clusters": n_clusters,
                        "notes": notes},
        "intervals": intervals, "ranking": ranking, "comparisons": comparisons,
    }


def per_conversation_auroc(cases: Sequence[Case], clusters: Sequence[str],
                           outputs: Sequence[RouterOutput]) -> dict[str, dict[str, Any]]:
    """conversation -> {n_labeled, escalate_share, auroc: {router: value or None}}: the spread that a pooled AUROC
    hides. Point estimates (one conversation is one bootstrap cluster); None without both labels."""
    out: dict[str, dict[str, Any]] = {}
    for conv in dict.fromkeys(clusters):
        idx = [i for i, (c, k) in enumerate(zip(cases, clusters, strict=True))
               if k == conv and c.label in ("ANSWER", "ESCALATE")]
        y = [cases[i].label == "ESCALATE" for i in idx]
        both = 0 < sum(y) < len(y)
        out[conv] = {"n_labeled": len(idx), "escalate_share": sum(y) / len(y) if y else None,
                     "auroc": {o.key: (stats.auroc([o.scores[i] for i in idx], y) if both else None)
                               for o in outputs if o.scores is not None}}
    return out
