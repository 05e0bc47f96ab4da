"""Eval per domain: with records from several domains, every router's decisions scored again on each domain's records
alone (replayed), with the paired differences main - each other router."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from labeling.dataset import domain_of
from labeling.judgments.report import _auroc as _iv
from labeling.judgments.report import _f, subset_summary

MAIN = "routed"


def split_by_domain(records: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """domain -> its records, in the records' order; one key when the data are of one domain."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        out.setdefault(domain_of(r), []).append(r)
    return dict(sorted(out.items()))


def per_domain(records: Sequence[dict[str, Any]], score: Callable[[list[dict[str, Any]]], dict[str, Any]],
               notes: list[str]) -> dict[str, Any] | None:
    """domain -> subset_summary of `score(that domain's records)` (a report), None for data of one domain. A
    domain eval cannot score (no replayable record) is kept with its reason, and noted."""
    from tiermem.settings.errors import ConfigError

    groups = split_by_domain(records)
    if len(groups) < 2:
        return None
    out: dict[str, Any] = {}
    for domain, rows in groups.items():
        try:
            out[domain] = {"records": len(rows), **subset_summary(score(rows))}
        except ConfigError as exc:  # e.g. every record of the domain unreplayable under the rule
            out[domain] = {"records": len(rows), "skipped": str(exc)}
            notes.append(f"domain {domain}: not scored on its own ({exc})")
    return out


def main_minus(summary: dict[str, Any], other: str, metric: str = "AUROC") -> dict[str, Any] | None:
    """The paired difference main - `other` of one scoring (analysis writes other - main; flipped here)."""
    for c in summary.get("comparisons") or []:
        if c["a"] == other and c["b"] == MAIN and c["metric"] == metric and c.get("estimate") is not None:
            lo, hi = c.get("lo"), c.get("hi")
            return {"estimate": -c["estimate"], "lo": None if hi is None else -hi, "hi": None if lo is None else -lo}
    return None


def domain_section(by_domain: dict[str, Any] | None) -> list[str]:
    """eval.md's section: each router on each domain's records alone, with main - router per domain."""
    if not by_domain:
        return []
    out = ["### Per domain (each domain's records alone; the same decisions)", "",
           "The ceiling columns are CEILINGS (threshold chosen on these data); `main - router` is the paired AUROC "
           "difference on that domain (bootstrap over its conversations).", "",
           "| domain | router | questions (conversations) | AUROC | main - router, AUROC | fewest tokens within 1 pt "
           "| false cache hits, 10% most confident | calibrated: accuracy | calibrated: tokens fewer |",
           "|---|---|---|---|---|---|---|---|---|"]
    for domain, entry in by_domain.items():
        if "skipped" in entry:
            out.append(f"| {domain} | - | {entry['records']} | not scored: {entry['skipped']} | | | | | |")
            continue
        for key, row in entry["routers"].items():
            diff = "" if key == MAIN else _iv(main_minus(entry, key))
            out.append(f"| {domain} | {key} | {entry['n']} ({entry.get('n_conversations')}) | {_iv(row['auroc'])} "
                       f"| {diff} | {_f(row['tokens_fewer_share_within_1pt'])} "
                       f"| {_f(row['false_cache_hit_share_top10'])} | {_f(row['calibrated_accuracy'])} "
                       f"| {_f(row['calibrated_tokens_fewer_share'])} |")
    return [*out, ""]
