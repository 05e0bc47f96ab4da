"""Time order of an own-format conversation: sort (sessions by their first turn, turns by timestamp, stably) and
count the turns that moved; time-zone-aware timestamps mixed with naive ones are refused (docs/formats.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tiermem.data.dates import parse_timestamp, zone_mix
from tiermem.data.records import Conversation, Turn


def order_turns(turns: Sequence[Turn], fail: Callable[[str], Exception]) -> tuple[list[Turn], list[str]]:
    """(turns in time order, ids of moved turns); `fail(message)` for unorderable timestamps (all parse, checked)."""
    mix = zone_mix([(f"turn {t.turn_id!r}", t.timestamp) for t in turns])
    if mix:
        raise fail(f"field 'timestamp': {mix}")
    sessions: dict[str, list[Turn]] = {}
    for turn in turns:
        sessions.setdefault(turn.session_id, []).append(turn)
    for members in sessions.values():
        members.sort(key=lambda t: parse_timestamp(t.timestamp))  # stable: equal times keep file order
    ordered_sessions = sorted(sessions.values(), key=lambda ms: parse_timestamp(ms[0].timestamp))
    ordered = [t for members in ordered_sessions for t in members]
    moved = [new.turn_id for old, new in zip(turns, ordered, strict=True) if old is not new]
    return ordered, moved


def time_order_stats(conversations: Sequence[Conversation]) -> dict[str, object]:
    """What the label stats record of the sort: turns moved in all, and per conversation that had any."""
    moved = {c.conv_id: len(c.reordered_turns) for c in conversations if c.reordered_turns}
    return {"policy": "sorted (sessions by first turn, turns by timestamp; stable)",
            "turns_reordered": sum(moved.values()), "by_conversation": moved}
