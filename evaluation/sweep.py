"""The threshold sweep of one router: every distinct threshold from never to always escalating, replayed, and the
curve summaries (accuracy-vs-tokens area, APGR, the escalation rate needed to recover a share of the gap)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from evaluation.metrics import Case, check_replayable, replay_core
from serving.routers.base import decide


@dataclass
class SweepPoint:
    threshold_logit: float  # escalate when the router's log-odds score >= this (inf: never)
    escalation_rate: float
    accuracy: float
    mean_input_tokens: float
    mean_latency_s: float


@dataclass
class SweepResult:
    points: list[SweepPoint]
    auc_accuracy_tokens: float | None  # mean accuracy over the curve's token range (area / range)
    apgr: float | None  # average share of the summary-only -> raw-only gap recovered, over rates 0..1
    gap: float  # raw-only accuracy - summary-only accuracy
    rate_to_recover: dict[str, float | None]  # "80": escalation rate needed to recover 80% of the gap

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for p in d["points"]:  # JSON has no infinity
            if math.isinf(p["threshold_logit"]):
                p["threshold_logit"] = None
        return d


def sweep_points(cases: Sequence[Case], p_escalate: Sequence[float]) -> list[SweepPoint]:
    """One point per distinct threshold, never to always escalating (the answering model's tokens and latency).
    Tied scores escalate together; linear interpolation between points is what breaking ties at random would get."""
    if len(p_escalate) != len(cases):
        raise ValueError(f"{len(p_escalate)} probabilities for {len(cases)} cases")
    check_replayable(cases, "sweep")
    thresholds = [math.inf] + sorted(set(float(p) for p in p_escalate), reverse=True)
    points = []
    for t in thresholds:
        w = [1.0 if decide(p, t) == "ESCALATE" else 0.0 for p in p_escalate]
        core = replay_core(cases, w)
        points.append(
            SweepPoint(t, core["escalation_rate"], core["accuracy"], core["mean_input_tokens"], core["mean_latency_s"])
        )
    return points


def _trapezoid(xs: Sequence[float], ys: Sequence[float]) -> float:
    return sum((xs[i + 1] - xs[i]) * (ys[i + 1] + ys[i]) / 2 for i in range(len(xs) - 1))


def auc_normalized(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Area under y(x) divided by the x range: the curve's mean y. None for a single x."""
    pairs = sorted(zip(xs, ys, strict=True))
    lo, hi = pairs[0][0], pairs[-1][0]
    if hi <= lo:
        return None
    return _trapezoid([p[0] for p in pairs], [p[1] for p in pairs]) / (hi - lo)


def pgr_curve(rates: Sequence[float], accuracies: Sequence[float], weak: float, strong: float) -> list[float] | None:
    """Performance gap recovered at each point; None when raw-only is not better than summary-only."""
    gap = strong - weak
    if gap <= 0:
        return None
    return [(a - weak) / gap for a in accuracies]


def apgr(rates: Sequence[float], accuracies: Sequence[float], weak: float, strong: float) -> float | None:
    """RouteLLM's average performance gap recovered: the area under PGR(escalation rate) on [0, 1].

    The curve must span rates 0 and 1 (a full threshold sweep does). A random router scores 0.5.
    """
    pgr = pgr_curve(rates, accuracies, weak, strong)
    if pgr is None:
        return None
    pairs = sorted(zip(rates, pgr, strict=True))
    if pairs[0][0] > 1e-12 or pairs[-1][0] < 1 - 1e-12:
        raise ValueError("APGR needs a curve from escalation rate 0 to 1")
    return _trapezoid([p[0] for p in pairs], [p[1] for p in pairs])


def rate_to_recover(
    rates: Sequence[float], accuracies: Sequence[float], weak: float, strong: float, share: float
) -> float | None:
    """Smallest escalation rate at which the (linearly interpolated) curve recovers `share` of the gap."""
    pgr = pgr_curve(rates, accuracies, weak, strong)
    if pgr is None:
        return None
    pairs = sorted(zip(rates, pgr, strict=True))
    if pairs[0][1] >= share:
        return pairs[0][0]
    for (x0, y0), (x1, y1) in itertools.pairwise(pairs):
        if y1 >= share > y0:
            return x0 + (share - y0) * (x1 - x0) / (y1 - y0)
    return None


def sweep(
    cases: Sequence[Case],
    p_escalate: Sequence[float],
    recover_shares: Sequence[float] = (0.8, 0.95),
) -> SweepResult:
    points = sweep_points(cases, p_escalate)
    weak = sum(c.s_ok for c in cases) / len(cases)
    strong = sum(c.r_ok for c in cases) / len(cases)
    rates = [p.escalation_rate for p in points]
    accs = [p.accuracy for p in points]
    return SweepResult(
        points=points,
        auc_accuracy_tokens=auc_normalized([p.mean_input_tokens for p in points], accs),
        apgr=apgr(rates, accs, weak, strong),
        gap=strong - weak,
        rate_to_recover={f"{round(s * 100)}": rate_to_recover(rates, accs, weak, strong, s) for s in recover_shares},
    )


