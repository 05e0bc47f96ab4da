"""Verified write-back after an escalation: a fact whose quote linked to a raw turn becomes a tier-1 unit linked to
it, or is skipped (near duplicate) or updates (close) the most similar unit; unlinked facts never enter tier 1."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tiermem.memory.policies import LinkedQuote
from tiermem.memory.summaries import SummaryUnit, day_of
from tiermem.memory.tiers import TwoTierMemory


@dataclass
class WriteBack:
    action: str  # "skip" | "update" | "add"
    unit_id: str | None  # the unit added or updated, or the near-duplicate that made us skip
    fact: str
    similarity: float


def write_back(memory: TwoTierMemory, quotes: Sequence[LinkedQuote], cfg: Any) -> list[WriteBack]:
    """`cfg`: the MemoryConfig (writeback_skip_similarity, writeback_update_similarity)."""
    index = memory.summaries
    actions: list[WriteBack] = []
    for quote in quotes:
        if quote.page_id is None or quote.turn_id is None:
            continue  # unverified facts never enter tier 1
        page = memory.page(quote.page_id)
        turn = next(t for t in page.turns if t.turn_id == quote.turn_id)
        hits = index.search(quote.fact, 1)
        similarity = hits[0].score if hits else -1.0
        if similarity >= cfg.writeback_skip_similarity:
            actions.append(WriteBack("skip", hits[0].unit_id, quote.fact, similarity))
            continue
        if similarity >= cfg.writeback_update_similarity:
            unit_id, origin = hits[0].unit_id, "writeback-update"
            index.replace(SummaryUnit(unit_id, quote.fact, [page.page_id], [turn.turn_id],
                                      day_of(turn.timestamp), origin, [turn.speaker]))
            actions.append(WriteBack("update", unit_id, quote.fact, similarity))
            continue
        unit_id = index.new_unit_id(f"{memory.conv_id}:w")  # a stored counter: never a reused id
        index.add([SummaryUnit(unit_id, quote.fact, [page.page_id], [turn.turn_id], day_of(turn.timestamp),
                               "writeback", [turn.speaker])])
        actions.append(WriteBack("add", unit_id, quote.fact, similarity))
    return actions
