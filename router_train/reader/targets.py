"""The unit reader's training pairs: each unit with its lexical target (its answer recall, a soft BCE target)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from serving.routers.unit_reader import unit_text
from tiermem.settings.errors import DataError

LEXICAL = "lexical"  # the target setting's name in the CV table and the run's metadata

# (question, unit text as the reader reads it, target in [0, 1])
Pair = tuple[str, str, float]


def unit_target(u: dict[str, Any]) -> float | None:
    """The unit's target; None when its gold answer has no scorable token."""
    return None if u["answer_recall"] is None else float(u["answer_recall"])


def pairs(records: Sequence[dict[str, Any]], deep_negatives: int, deep_positives: int | None = None) -> list[Pair]:
    """Router units, the `deep_positives` deeper positives with the highest targets (None: all) and the
    `deep_negatives` highest-ranked deeper negatives of each record."""
    out: list[Pair] = []
    for r in records:
        k, negatives, positives = len(r["router_summaries"]), [], []
        for u in r["unit_targets"]:
            y = unit_target(u)
            if y is None:  # the gold answer has no scorable token: no target
                continue
            if not 0.0 <= y <= 1.0:
                raise DataError(f"record {r['qid']!r}: unit {u['unit_id']!r} target {y} outside [0, 1]")
            if u["rank"] <= k:
                out.append((r["question"], unit_text(u), y))
            else:
                (negatives if not u["s_ok"] and y == 0.0 else positives).append((u["rank"], y, u))
        # a long history restates a fact many times: its deeper partial matches can outnumber the rest of the pairs
        kept = sorted(positives, key=lambda p: (-p[1], p[0]))[:deep_positives]
        for _, y, u in sorted(kept + sorted(negatives, key=lambda p: p[0])[:deep_negatives], key=lambda p: p[0]):
            out.append((r["question"], unit_text(u), y))
    if records and not out:  # nothing to fine-tune on (the loss would divide by zero pairs)
        raise DataError(f"none of {len(records)} record(s) has a unit with a target: every answer_recall is null "
                        "or unit_targets is empty (relabel with unit_targets.enabled)")
    return out
