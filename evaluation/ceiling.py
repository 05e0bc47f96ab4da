"""The ranking's ceiling: the fewest tokens within w points of raw-only at a threshold chosen on the evaluated data
(a CEILING, never an operating point), the false-cache-hit share at the ANSWER end, the calibrated point beside."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from evaluation.metrics import Case, PolicyMetrics
from evaluation.sweep import SweepPoint

WITHIN_POINTS = (1, 2)  # accuracy points (1 point = 0.01) below raw-only
TOP_SHARES = (10, 20)  # percent of the most ANSWER-confident decisions
CEILING_NOTE = ("CEILING, not an operating point: the threshold is chosen on the evaluated data itself, after "
                "seeing the answers; it bounds what any calibration of this ranking could save")
_EPS = 1e-9


def raw_only(cases: Sequence[Case]) -> dict[str, float]:
    """Raw-only's accuracy and mean input tokens (always escalating, no router cost: the baseline row)."""
    n = len(cases)
    return {"accuracy": sum(c.r_ok for c in cases) / n, "mean_input_tokens": sum(c.r_tokens for c in cases) / n}


def _fewer(tokens: float, raw_tokens: float) -> float | None:
    return 1.0 - tokens / raw_tokens if raw_tokens > 0 else None


def fewest_tokens_within(points: Sequence[SweepPoint], raw_accuracy: float, raw_tokens: float,
                         points_below: float) -> dict[str, Any]:
    """The sweep point with the fewest mean input tokens whose accuracy is >= raw_accuracy - points_below/100
    (ties: the more accurate, then the higher threshold). None fields when no point qualifies."""
    floor = raw_accuracy - points_below / 100.0
    ok = [p for p in points if p.accuracy >= floor - _EPS]
    if not ok:
        return {"mean_input_tokens": None, "tokens_fewer_share": None, "accuracy": None, "threshold_logit": None,
                "escalation_rate": None}
    best = min(ok, key=lambda p: (p.mean_input_tokens, -p.accuracy, -p.threshold_logit))
    return {"mean_input_tokens": best.mean_input_tokens,
            "tokens_fewer_share": _fewer(best.mean_input_tokens, raw_tokens), "accuracy": best.accuracy,
            "threshold_logit": None if math.isinf(best.threshold_logit) else best.threshold_logit,
            "escalation_rate": best.escalation_rate}


def false_cache_hit_share(cases: Sequence[Case], scores: Sequence[float], percent: float) -> dict[str, Any]:
    """Among the ceil(percent% x n) cases with the lowest escalation scores: how many are false cache hits (r_ok and
    not s_ok, metrics.replay's definition) and their share. Ties at the cut count by their expected share."""
    if len(scores) != len(cases) or not cases:
        raise ValueError(f"{len(scores)} scores for {len(cases)} cases")
    m = max(1, math.ceil(percent / 100.0 * len(cases) - _EPS))
    false_hit = [bool(c.r_ok and not c.s_ok) for c in cases]
    cut = sorted(scores)[m - 1]
    below = [f for s, f in zip(scores, false_hit, strict=True) if s < cut]
    tied = [f for s, f in zip(scores, false_hit, strict=True) if s == cut]
    count = sum(below) + sum(tied) * (m - len(below)) / len(tied)
    return {"percent": percent, "n_decisions": m, "false_cache_hits": count, "share": count / m}


def router_ceiling(cases: Sequence[Case], scores: Sequence[float], policy: PolicyMetrics,
                   threshold_logit: float | None, calibrated: str | None,
                   points: Sequence[SweepPoint]) -> dict[str, Any]:
    """One router's ceiling row (flat, the keys ceiling_table reads, plus the thresholds and
    counts eval.json keeps). `points`: its threshold sweep."""
    raw = raw_only(cases)
    row: dict[str, Any] = {}
    for w in WITHIN_POINTS:
        best = fewest_tokens_within(points, raw["accuracy"], raw["mean_input_tokens"], w)
        row.update({f"{k}_within_{w}pt": v for k, v in best.items()})
    for k in TOP_SHARES:
        share = false_cache_hit_share(cases, scores, k)
        row.update({f"false_cache_hit_share_top{k}": share["share"],
                    f"false_cache_hits_top{k}": share["false_cache_hits"], f"n_top{k}": share["n_decisions"]})
    row.update({"calibrated_accuracy": policy.accuracy, "calibrated_mean_input_tokens": policy.mean_input_tokens,
                "calibrated_tokens_fewer_share": _fewer(policy.mean_input_tokens, raw["mean_input_tokens"]),
                "calibrated_accuracy_minus_raw_only": policy.accuracy - raw["accuracy"],
                "calibrated_threshold_logit": threshold_logit, "calibrated_by": calibrated})
    return row


def ceiling_report(cases: Sequence[Case], oracle: PolicyMetrics, rows: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """eval.json's `ceiling`: the note, raw-only and the oracle for reference, then one row per router."""
    raw = raw_only(cases)
    return {"note": CEILING_NOTE, "within_points": list(WITHIN_POINTS), "top_percent": list(TOP_SHARES),
            "raw_only": raw,
            "oracle": {"accuracy": oracle.accuracy, "mean_input_tokens": oracle.mean_input_tokens,
                       "tokens_fewer_share": _fewer(oracle.mean_input_tokens, raw["mean_input_tokens"])},
            "routers": dict(rows)}


def calibrated_by(router: Any, threshold_override: float | None) -> str:
    """What set the threshold of the router's row: a given threshold, calibrate (on what), or the default."""
    if threshold_override is not None:
        return "given threshold_logit"
    cal = getattr(getattr(router, "meta", None), "calibration", None) or {}
    if not cal:
        return "default threshold (not calibrated)"
    return f"calibrate {cal.get('criterion')} on {cal.get('scored_on') or cal.get('split') or 'its data'}"


def _tokens_cell(tokens: float | None, fewer: float | None, accuracy: float | None, extra: str = "") -> str:
    if tokens is None:
        return "n/a"
    less = "n/a" if fewer is None else (f"{100 * fewer:.1f}% fewer" if fewer >= 0 else f"{-100 * fewer:.1f}% more")
    return f"{tokens:,.0f} ({less}; accuracy {accuracy:.3f}{extra})"


def ceiling_table(rows: dict[str, Any], titles: dict[str, str] | None = None) -> list[str]:
    """The ceiling as markdown lines, from eval.json's ceiling.routers rows (eval.md's table)."""
    lines = ["| router | CEILING: fewest tokens within 1 pt of raw-only (vs raw-only) | CEILING: within 2 pts "
             "| false cache hits among the 10% most ANSWER-confident | among the 20% | calibrated point (its "
             "threshold) |", "|---|---|---|---|---|---|"]
    for name, r in rows.items():
        cells = [_tokens_cell(r.get(f"mean_input_tokens_within_{w}pt"), r.get(f"tokens_fewer_share_within_{w}pt"),
                              r.get(f"accuracy_within_{w}pt")) for w in (1, 2)]
        for k in (10, 20):
            share, hits, n = (r.get(f"false_cache_hit_share_top{k}"), r.get(f"false_cache_hits_top{k}"),
                              r.get(f"n_top{k}"))
            cells.append("n/a" if share is None else f"{share:.3f}" + (f" ({hits:.4g} of {n:g})" if n else ""))
        diff = r.get("calibrated_accuracy_minus_raw_only")
        cells.append(_tokens_cell(r.get("calibrated_mean_input_tokens"), r.get("calibrated_tokens_fewer_share"),
                                  r.get("calibrated_accuracy"), "" if diff is None else f", {diff:+.3f} vs raw-only"))
        lines.append("| " + " | ".join([(titles or {}).get(name, name), *cells]) + " |")
    return lines
