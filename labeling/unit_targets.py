"""Per-unit targets: the evidence rule over a one-unit summary set, per retrieved unit (docs/formats.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from labeling.dataset import RecordError, flag, summary_units
from labeling.evidence import Reading, compute_signals
from labeling.judgments.format import VERDICTS
from tiermem.settings.config import check_declared


@dataclass
class UnitTargetsConfig:
    """Which retrieved units get a per-unit target (the `unit_targets` list of each natural record)."""

    enabled: bool = True  # the router units' targets cost a few token sets per question
    # Retrieval depth for targets of units the router does not see (ranks top_k+1..deep_k; train split only):
    # the near-miss negatives and deeper positives a unit reader learns from. null = the router's top_k units only.
    deep_k: int | None = field(default=None, metadata={"ge": 1})

    def __post_init__(self) -> None:
        check_declared(self, "unit_targets.")


def _field(unit: Any, name: str) -> Any:
    return unit.get(name) if isinstance(unit, dict) else getattr(unit, name, None)


def unit_target(unit: Any, rank: int, q: Any, research_pages: Sequence[str], page_turns: Reading | dict[str, list[str]],
                evidence: Any, fmt: str) -> dict[str, Any]:
    """One unit's row: what the router would see of it, and the evidence rule's signals over `[unit]` alone."""
    signals = compute_signals(q.answer, q.category, q.evidence, [unit], research_pages, page_turns, evidence, fmt,
                              question=q.question, points=q.points)
    score = _field(unit, "score")
    return {"unit_id": str(_field(unit, "unit_id")), "rank": rank, "text": str(_field(unit, "text") or ""),
            "score": None if score is None else round(float(score), 6), "date": _field(unit, "date"),
            "page_ids": list(_field(unit, "page_ids") or []), "speakers": list(_field(unit, "speakers") or []),
            "answer_recall": signals.answer_recall,
            "gold_in_pages": signals.gold_in_summary_pages, "s_ok": bool(signals.s_ok), "verdict": None, "span": None}


def with_judged_units(rec: dict[str, Any], judgments: Any) -> None:
    """Each router unit's careful-reading verdict and span, where the judgment read that very unit (rank, digest)."""
    if judgments is None or rec.get("s_ok_by") != "judgment":
        return
    judged, _ = judgments.match(rec["conv_id"], rec["qid"], rec["question"],
                                [u["text"] for u in rec["router_summaries"]])
    k = len(rec["router_summaries"])
    for u in rec["unit_targets"]:
        got = judged.unit(u["rank"], u["text"]) if judged is not None and u["rank"] <= k else None
        if got is not None:
            u["verdict"], u["span"] = got.verdict, got.span


def unit_targets(rec: dict[str, Any], q: Any, ranked: Sequence[Any] | None, page_turns: Reading | dict[str, list[str]],
                 evidence: Any, fmt: str, deep_k: int | None) -> list[dict[str, Any]]:
    """Targets for the router units, then `ranked`'s units below them up to deep_k (None: router units only)."""
    shown = list(rec["router_summaries"])
    out = [unit_target(u, i + 1, q, rec["research_pages"], page_turns, evidence, fmt) for i, u in enumerate(shown)]
    if ranked is None or deep_k is None or deep_k <= len(shown):
        return out
    seen = {u["unit_id"] for u in shown}
    deeper = [u for u in ranked if _field(u, "unit_id") not in seen][: deep_k - len(shown)]
    out += [unit_target(u, len(shown) + i + 1, q, rec["research_pages"], page_turns, evidence, fmt)
            for i, u in enumerate(deeper)]
    return out


def for_split(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Deeper units' targets kept for the train split only; returns the records (changed in place)."""
    for rec in records:
        if rec["split"] != "train" and rec.get("unit_targets"):
            k = len(rec["router_summaries"])
            rec["unit_targets"] = [u for u in rec["unit_targets"] if u["rank"] <= k]
    return records


def unit_stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts for the report and stats.json: units per split, router vs deeper, share positive (s_ok)."""
    out: dict[str, Any] = {}
    for split in ("train", "validation", "test"):
        rows = [r for r in records if r["split"] == split and not r.get("augmentation") and not r["error"]]
        cell: dict[str, Any] = {"questions": sum(1 for r in rows if r.get("unit_targets"))}
        for part in ("router", "deeper"):
            units = [u for r in rows for u in (r.get("unit_targets") or [])
                     if (u["rank"] <= len(r["router_summaries"])) == (part == "router")]
            positive = sum(1 for u in units if u["s_ok"])
            cell[part] = {"units": len(units), "positive": positive,
                          "positive_share": round(positive / len(units), 4) if units else None,
                          "mean_answer_recall": round(sum(u["answer_recall"] or 0.0 for u in units) / len(units), 4)
                          if units else None}
        out[split] = cell
    return out


def report_lines(stats: dict[str, Any] | None) -> list[str]:
    if not stats:
        return ["", "Per-unit targets: off."]
    lines = ["", "## Per-unit targets", "",
             "Each unit's own answer recall, gold turns in its pages and the evidence rule's verdict for the unit "
             "alone (`unit_targets`); deeper units (below the router's top-k) for the train split only.", "",
             "| split | questions | router units | positive | deeper units | positive |", "|---|---|---|---|---|---|"]
    for split, c in stats.items():
        r, d = c["router"], c["deeper"]
        lines.append(f"| {split} | {c['questions']} | {r['units']} | {r['positive']} ({r['positive_share']}) | "
                     f"{d['units']} | {d['positive']} ({d['positive_share']}) |")
    return lines


def check_unit_targets(targets: Any, where: str) -> None:
    """Unit targets as training reads them (docs/formats.md), each failure a RecordError naming record and field."""
    summary_units({"unit_targets": targets}, where, "unit_targets")
    for j, u in enumerate(targets):
        at = f"{where}: field 'unit_targets[{j}]'"
        rank = u.get("rank")
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
            raise RecordError(f"{at}.rank must be an integer >= 1, got {rank!r}")
        flag(u, "s_ok", at)
        recall = u.get("answer_recall")
        if recall is not None and (isinstance(recall, bool) or not isinstance(recall, int | float)
                                   or not 0.0 <= recall <= 1.0):
            raise RecordError(f"{at}.answer_recall must be a number in [0, 1] or null, got {recall!r}")
        verdict, span = u.get("verdict"), u.get("span")
        if verdict is not None and verdict not in VERDICTS:
            raise RecordError(f"{at}.verdict must be one of {list(VERDICTS)} or null, got {verdict!r}")
        if span is not None and not isinstance(span, str):
            raise RecordError(f"{at}.span must be a string or null, got {span!r}")
