"""Routing metrics by counterfactual replay over label records (pure functions): decisions are escalation weights
in [0, 1], so the random baseline's metrics are exact expected values through the same code."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from labeling import dataset as records
from labeling.question import LATE_EVIDENCE

ANSWER, ESCALATE = "ANSWER", "ESCALATE"
CORRECTNESS_RULES = ("label_rule", "outcome", "evidence")


@dataclass(frozen=True)
class Case:
    """What replay needs from one label record."""

    qid: str
    category: str
    label: str | None  # ANSWER | ESCALATE | None (dropped by the label rule)
    s_ok: bool | None  # None: not known under the correctness rule (then the case is not replayable)
    r_ok: bool | None  # e.g. the evidence rule's research verdict for a question without gold evidence turns
    s_tokens: float
    r_tokens: float
    s_latency_s: float
    r_latency_s: float


def correctness_fields(rule: str) -> tuple[str, str]:
    """The (summary, research) correctness columns for `rule`; `label_rule`'s `s_ok`/`r_ok` are filled under the rule
    that made the labels, so accuracy is on the scale of the labels the router learned from."""
    if rule == "label_rule":
        return "s_ok", "r_ok"
    if rule in ("outcome", "evidence"):
        return f"s_ok_{rule}", f"r_ok_{rule}"
    raise ValueError(f"correctness rule must be one of {CORRECTNESS_RULES}, got {rule!r}")


def to_case(record: Mapping[str, Any], rule: str = "label_rule", index: int = 0) -> Case:
    where = f"record {index} (qid={record.get('qid')!r})"
    s_field, r_field = correctness_fields(rule)
    label = records.action_label(record, where)
    return Case(
        qid=str(records.field(record, "qid", where)),
        category=str(record.get("category", "all")),
        label=label,
        s_ok=records.flag(record, s_field, where, allow_none=True),
        r_ok=records.flag(record, r_field, where, allow_none=True),
        s_tokens=records.amount(record, "cost_summary_input_tokens", where),
        r_tokens=records.amount(record, "cost_research_input_tokens", where),
        s_latency_s=records.amount(record, "cost_summary_wall_s", where),
        r_latency_s=records.amount(record, "cost_research_wall_s", where),
    )


@dataclass
class CaseSet:
    cases: list[Case]  # the replayed records: both path verdicts known
    n_error: int  # records skipped because their labeling run failed (they have no verdicts)
    n_unlabeled: int  # records the label rule dropped (kept unless include_unlabeled=False)
    n_unreplayable: int = 0  # records replay skips because a path's correctness is unknown under the rule (null)
    # The labeled ones among them: not replayed, but their label still counts in the ranking metrics.
    unreplayable: list[Case] = field(default_factory=list)
    unreplayable_records: list[Mapping[str, Any]] = field(default_factory=list)
    records: list[Mapping[str, Any]] = field(default_factory=list)  # the records of `cases`, one to one


REPLAY, UNREPLAYABLE, SKIPPED = "replay", "unreplayable", "skipped"


def classify(record: Mapping[str, Any], rule: str = "label_rule", include_unlabeled: bool = True) -> str:
    """The one replay filter: REPLAY (both path verdicts known), UNREPLAYABLE (a verdict is null under `rule`: the
    labeler leaves the evidence rule's research verdict null for a question without gold evidence turns, and a
    generator-free dataset has no outcome verdicts) or SKIPPED. A verdict of the wrong type is not filtered here:
    to_case raises RecordError."""
    if record.get("error"):
        return SKIPPED
    if record.get("drop_reason") == LATE_EVIDENCE:  # asked before its evidence was said: no path was run for it
        return SKIPPED
    if record.get("label") is None and not include_unlabeled:
        return SKIPPED
    if any(record.get(f, False) is None for f in correctness_fields(rule)):
        return UNREPLAYABLE
    return REPLAY


def load_cases(
    records: Sequence[Mapping[str, Any]], rule: str = "label_rule", include_unlabeled: bool = True
) -> CaseSet:
    """Label records as cases, filtered by `classify`, with the counts of what it left out. Unlabeled records stay in
    by default (real questions every router gets wrong: dropping them would inflate accuracy); the labeled
    unreplayable ones are kept aside (`unreplayable`) for the label-only metrics (AUROC, AUPRC, ECE)."""
    cases: list[Case] = []
    kept: list[Mapping[str, Any]] = []
    held: list[Case] = []
    held_records: list[Mapping[str, Any]] = []
    n_error = n_unlabeled = n_unreplayable = 0
    for i, rec in enumerate(records):
        if rec.get("error"):
            n_error += 1
            continue
        if rec.get("label") is None:
            n_unlabeled += 1
        kind = classify(rec, rule, include_unlabeled)
        if kind == SKIPPED:
            continue
        case = to_case(rec, rule, i)  # validates every field, the null verdicts' neighbours included
        if kind == REPLAY:
            cases.append(case)
            kept.append(rec)
            continue
        n_unreplayable += 1
        if case.label is not None:
            held.append(case)
            held_records.append(rec)
    return CaseSet(cases, n_error, n_unlabeled, n_unreplayable, held, held_records, kept)


def replayable_records(
    records: Sequence[Mapping[str, Any]], rule: str = "label_rule", include_unlabeled: bool = True
) -> tuple[list[Mapping[str, Any]], CaseSet]:
    """The records replay scores and their cases, aligned one to one (what eval and calibration share)."""
    case_set = load_cases(records, rule, include_unlabeled)
    return case_set.records, case_set


def check_replayable(cases: Sequence[Case], name: str) -> None:
    unknown = [c.qid for c in cases if c.s_ok is None or c.r_ok is None]
    if unknown:
        raise ValueError(f"{name}: cases {unknown[:5]} have an unknown path verdict and cannot be replayed")


@dataclass
class PolicyMetrics:
    name: str
    n: int
    accuracy: float
    escalation_rate: float
    # per query, the answering model's input tokens on the path taken (never the router's: every router counts
    # alike, whether it runs a language model or not) and that path's wall time
    mean_input_tokens: float
    mean_latency_s: float
    mean_router_tokens: float  # per query, the tokens the router itself read (its prompt, or its reader's pairs)
    mean_router_latency_s: float  # per query, the router's own time
    hard_recall: float | None  # share of ESCALATE-labeled cases escalated
    false_cache_hits: float  # ANSWER where only research was right (count; expected count if random)
    false_cache_misses: float  # ESCALATE where the summary path was right
    repair_rate: float | None  # P(research right | summary wrong) on the escalated set
    regress_rate: float | None  # P(research wrong | summary right) on the escalated set
    n_escalated: float
    unparseable: int
    confusion: dict[str, dict[str, float]] = field(default_factory=dict)  # label -> routed action -> count
    per_category: dict[str, dict[str, float | None]] = field(default_factory=dict)
    expected_value: bool = False  # True when decisions were fractional (random baseline)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None


def _check_weights(cases: Sequence[Case], weights: Sequence[float], name: str) -> list[float]:
    if len(weights) != len(cases):
        raise ValueError(f"{name}: {len(weights)} decisions for {len(cases)} cases")
    out = [float(w) for w in weights]
    if any(not (0.0 <= w <= 1.0) for w in out):
        raise ValueError(f"{name}: escalation weights must lie in [0, 1]")
    return out


def replay_core(cases: Sequence[Case], w: Sequence[float]) -> dict[str, float]:
    """Accuracy, escalation rate and the answering model's mean input tokens and latency on the paths taken."""
    n = len(cases)
    if n == 0:
        raise ValueError("no cases to score")
    acc = sum((1 - wi) * c.s_ok + wi * c.r_ok for c, wi in zip(cases, w, strict=True)) / n
    tok = sum((1 - wi) * c.s_tokens + wi * c.r_tokens for c, wi in zip(cases, w, strict=True)) / n
    lat = sum((1 - wi) * c.s_latency_s + wi * c.r_latency_s for c, wi in zip(cases, w, strict=True)) / n
    return {"n": n, "accuracy": acc, "escalation_rate": sum(w) / n, "mean_input_tokens": tok, "mean_latency_s": lat}


def replay(
    cases: Sequence[Case],
    escalate: Sequence[float],
    name: str = "routed",
    router_tokens: Sequence[float] | None = None,
    router_latency_s: Sequence[float] | None = None,
    parsed_ok: Sequence[bool] | None = None,
) -> PolicyMetrics:
    """Score one routing policy. `escalate[i]` is 1 (ESCALATE), 0 (ANSWER) or a probability. The router's own cost
    (`router_tokens`, `router_latency_s` per case) is its own columns, never added to the paths'."""
    check_replayable(cases, name)
    w = _check_weights(cases, escalate, name)
    zeros = [0.0] * len(cases)
    rtok = [float(t) for t in router_tokens] if router_tokens is not None else zeros
    rlat = [float(t) for t in router_latency_s] if router_latency_s is not None else zeros
    if len(rtok) != len(cases) or len(rlat) != len(cases):
        raise ValueError(f"{name}: router cost lists must have one entry per case")
    core = replay_core(cases, w)

    labeled_esc = [wi for c, wi in zip(cases, w, strict=True) if c.label == ESCALATE]
    esc_s_wrong = sum(wi for c, wi in zip(cases, w, strict=True) if not c.s_ok)
    esc_s_right = sum(wi for c, wi in zip(cases, w, strict=True) if c.s_ok)
    confusion: dict[str, dict[str, float]] = {}
    for c, wi in zip(cases, w, strict=True):
        row = confusion.setdefault(c.label or "unlabeled", {ANSWER: 0.0, ESCALATE: 0.0})
        row[ANSWER] += 1 - wi
        row[ESCALATE] += wi

    per_category: dict[str, dict[str, float | None]] = {}
    for cat in sorted({c.category for c in cases}):
        idx = [i for i, c in enumerate(cases) if c.category == cat]
        sub = [cases[i] for i in idx]
        cc = replay_core(sub, [w[i] for i in idx])
        cc["mean_router_tokens"] = sum(rtok[i] for i in idx) / len(idx)
        cc["summary_only_accuracy"] = sum(c.s_ok for c in sub) / len(sub)
        cc["raw_only_accuracy"] = sum(c.r_ok for c in sub) / len(sub)
        per_category[cat] = cc

    return PolicyMetrics(
        name=name,
        n=core["n"],
        accuracy=core["accuracy"],
        escalation_rate=core["escalation_rate"],
        mean_input_tokens=core["mean_input_tokens"],
        mean_latency_s=core["mean_latency_s"],
        mean_router_tokens=sum(rtok) / len(cases),
        mean_router_latency_s=sum(rlat) / len(cases),
        hard_recall=_ratio(sum(labeled_esc), len(labeled_esc)),
        false_cache_hits=sum((1 - wi) for c, wi in zip(cases, w, strict=True) if c.r_ok and not c.s_ok),
        false_cache_misses=sum(wi for c, wi in zip(cases, w, strict=True) if c.s_ok),
        repair_rate=_ratio(sum(wi for c, wi in zip(cases, w, strict=True) if not c.s_ok and c.r_ok), esc_s_wrong),
        regress_rate=_ratio(sum(wi for c, wi in zip(cases, w, strict=True) if c.s_ok and not c.r_ok), esc_s_right),
        n_escalated=sum(w),
        unparseable=sum(1 for ok in parsed_ok if not ok) if parsed_ok is not None else 0,
        confusion=confusion,
        per_category=per_category,
        expected_value=any(0.0 < wi < 1.0 for wi in w),
    )


# ---- baselines -------------------------------------------------------------------------------


def oracle_escalations(cases: Sequence[Case]) -> list[float]:
    """The cheapest correct path per case (by input tokens); the cheaper path when neither is right."""
    out = []
    for c in cases:
        options = [(c.s_tokens, 0.0, c.s_ok), (c.r_tokens, 1.0, c.r_ok)]
        correct = [o for o in options if o[2]] or options
        out.append(min(correct)[1])
    return out


def baselines(cases: Sequence[Case], random_rate: float | None = None) -> dict[str, PolicyMetrics]:
    """summary-only, raw-only (always escalate), oracle and, given a rate, the random router (its exact expected
    value at `random_rate`); baselines carry no router cost."""
    n = len(cases)
    out = {
        "summary_only": replay(cases, [0.0] * n, "summary_only"),
        "raw_only": replay(cases, [1.0] * n, "raw_only"),
        "oracle": replay(cases, oracle_escalations(cases), "oracle"),
    }
    if random_rate is not None:
        out["random"] = replay(cases, [random_rate] * n, "random")
    return out


def dumps(obj: Any) -> str:
    """JSON with NaN/inf refused, so a broken metric cannot slip into a report unnoticed."""
    return json.dumps(obj, indent=2, allow_nan=False, sort_keys=False)
