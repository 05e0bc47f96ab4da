"""`EvalSummary`: what a router run keeps of its latest eval report (`RunMeta.eval` in tiermem_router.json).

`make eval` builds it from eval.json (evaluation.report.eval_summary) and stores it with the router; the model card
renders it. The numbers are eval.json's own: per policy the point metrics of `policies[name]` and the bootstrap
intervals of `intervals[name]`, per router the ranking intervals of `ranking[name]`, each interval exactly as
tiermem.stats.interval wrote it ({estimate, lo, hi, n_boot}). Bulky breakdowns (confusion, per category, sweep
points, reliability curves) stay in eval.json, named by `path`.

`EvalSummary.from_dict` is the one reader: it checks every field's type and refuses unknown keys, raising
ValueError naming the field (tiermem.runs.run_meta adds the file).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

# The point metrics kept per policy: PolicyMetrics' scalars the card shows (eval.json policies[name]).
POLICY_METRICS = ("accuracy", "escalation_rate", "mean_input_tokens", "mean_latency_s", "mean_router_tokens",
                  "mean_router_latency_s", "hard_recall", "false_cache_hits", "false_cache_misses", "repair_rate",
                  "regress_rate")
RANKING_METRICS = ("auroc", "auprc", "apgr", "ece")
# The ranking's ceiling kept per router (eval.json ceiling.routers[name], evaluation.ceiling): the fewest tokens
# within 1 and 2 accuracy points of raw-only at a threshold chosen on the evaluated data, the false-cache-hit share
# among the 10% / 20% most ANSWER-confident decisions, and the router's own (calibrated) point beside them.
CEILING_METRICS = tuple(f"{m}_within_{w}pt" for w in (1, 2) for m in ("mean_input_tokens", "tokens_fewer_share",
                                                                      "accuracy")) + tuple(
    f"{m}_top{k}" for k in (10, 20) for m in ("false_cache_hit_share", "false_cache_hits", "n")) + (
    "calibrated_accuracy", "calibrated_mean_input_tokens", "calibrated_tokens_fewer_share",
    "calibrated_accuracy_minus_raw_only")


@dataclass
class Interval:
    """One bootstrap interval as eval.json writes it; lo/hi None when no replicate was defined (or n_boot=0)."""

    estimate: float
    lo: float | None = None
    hi: float | None = None
    n_boot: int = 0


@dataclass
class PolicyEval:
    metrics: dict[str, float | None] = field(default_factory=dict)  # eval.json policies[name], POLICY_METRICS
    intervals: dict[str, Interval | None] = field(default_factory=dict)  # eval.json intervals[name]


@dataclass
class RankingEval:
    """eval.json ranking[name]: score vs label on the labeled records (ESCALATE positive)."""

    n_labeled: int
    escalate_share: float | None = None
    auroc: Interval | None = None
    auprc: Interval | None = None
    apgr: Interval | None = None
    ece: Interval | None = None
    note: str | None = None


@dataclass
class EvalSummary:
    path: str | None  # the eval.json it summarizes
    date: str  # when it was recorded (UTC, ISO 8601)
    dataset: str
    split: str
    router: str  # eval's display name of the routed router
    correctness_rule: str
    n: int  # questions replayed
    n_conversations: int
    threshold_logit: float | None = None
    level: float | None = None  # interval level (0.95); None when eval ran without a bootstrap
    n_boot: int = 0
    policies: dict[str, PolicyEval] = field(default_factory=dict)  # eval.json's policy order
    ranking: dict[str, RankingEval] = field(default_factory=dict)
    gap: float | None = None  # the routed sweep: raw-only - summary-only accuracy
    auc_accuracy_tokens: float | None = None
    # a unit reader's "what reading adds" (eval.json reading[routed].rows): reader variant -> {text_alone,
    # without_text, full} AUROC intervals
    reading: dict[str, dict[str, Interval | None]] = field(default_factory=dict)
    # the ranking's ceiling per router (CEILING_METRICS; a threshold chosen on the evaluated data: not an operating
    # point)
    ceiling: dict[str, dict[str, float | None]] = field(default_factory=dict)
    # data of several domains (eval.json by_domain): domain -> {router: AUROC interval on that domain alone, and
    # `main - <router>`: the paired difference}
    by_domain: dict[str, dict[str, Interval | None]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: Any) -> EvalSummary:
        return _build(cls, raw, "eval")


# ---------------------------------------------------------------------------------------------- checked reading


def _number(value: Any, where: str, optional: bool = True) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"field {where!r} must be a finite number{' or null' if optional else ''}, got {value!r}")
    return float(value)


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"field {where!r} must be a non-negative integer, got {value!r}")
    return value


def _string(value: Any, where: str, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or (not optional and not value):
        raise ValueError(f"field {where!r} must be a {'string or null' if optional else 'non-empty string'}, "
                         f"got {value!r}")
    return value


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ValueError(f"field {where!r} must be an object, got {type(value).__name__}")
    return value


def _interval(value: Any, where: str) -> Interval | None:
    if value is None:
        return None
    iv = _build(Interval, value, where)
    if (iv.lo is None) != (iv.hi is None) or (iv.lo is not None and iv.lo > iv.hi):  # type: ignore[operator]
        raise ValueError(f"field {where!r}: lo and hi must both be null or lo <= hi, got {value!r}")
    return iv


_READERS: dict[str, Any] = {
    "estimate": lambda v, w: _number(v, w, optional=False),
    "lo": _number, "hi": _number, "escalate_share": _number, "threshold_logit": _number, "level": _number,
    "gap": _number, "auc_accuracy_tokens": _number,
    "n_boot": _count, "n_labeled": _count, "n": _count, "n_conversations": _count,
    "path": lambda v, w: _string(v, w, optional=True), "note": lambda v, w: _string(v, w, optional=True),
    **{k: _string for k in ("date", "dataset", "split", "router", "correctness_rule")},
    **{k: _interval for k in RANKING_METRICS},
    "metrics": lambda v, w: {k: _number(x, f"{w}.{k}") for k, x in _mapping(v, w).items()},
    "intervals": lambda v, w: {k: _interval(x, f"{w}.{k}") for k, x in _mapping(v, w).items()},
    "policies": lambda v, w: {k: _build(PolicyEval, x, f"{w}.{k}") for k, x in _mapping(v, w).items()},
    "ranking": lambda v, w: {k: _build(RankingEval, x, f"{w}.{k}") for k, x in _mapping(v, w).items()},
    **{key: lambda v, w: {k: {p: _interval(iv, f"{w}.{k}.{p}") for p, iv in _mapping(row, f"{w}.{k}").items()}
                          for k, row in _mapping(v, w).items()} for key in ("reading", "by_domain")},
    "ceiling": lambda v, w: {k: {m: _number(x, f"{w}.{k}.{m}") for m, x in _mapping(row, f"{w}.{k}").items()}
                             for k, row in _mapping(v, w).items()},
}


def _build(cls: type, raw: Any, where: str) -> Any:
    """`cls` from a JSON object: every key known, every value of its field's type, required ones present."""
    raw = _mapping(raw, where)
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - names)
    if unknown:
        raise ValueError(f"field {where!r} has unknown key(s) {unknown}; known: {sorted(names)}")
    try:
        return cls(**{k: _READERS[k](v, f"{where}.{k}") for k, v in raw.items()})
    except TypeError as exc:  # a required key missing
        raise ValueError(f"field {where!r}: {exc}") from None


# ---------------------------------------------------------------------------------------------- the ceiling table


def _tokens_cell(tokens: float | None, fewer: float | None, accuracy: float | None, extra: str = "") -> str:
    if tokens is None:
        return "n/a"
    less = "n/a" if fewer is None else (f"{100 * fewer:.1f}% fewer" if fewer >= 0 else f"{-100 * fewer:.1f}% more")
    return f"{tokens:,.0f} ({less}; accuracy {accuracy:.3f}{extra})"


def ceiling_table(rows: dict[str, Any], titles: dict[str, str] | None = None) -> list[str]:
    """The ceiling as markdown lines, from rows of CEILING_METRICS (eval.json ceiling.routers, or EvalSummary's
    ceiling): the same table in eval.md and on the model card."""
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
