"""Scan RealMem histories for memory a request sees before it is said: `python -m benchmarks.realmem_future_scan DIR`.

A unit is visible to a request when its last source turn comes before the request's turn (the memory as of it). It
states what is first said after the request when no turn of its session before the request states it and one at or
after it does (a turn states a unit when it holds at least half of the unit's content words, its topic tag left out).
Prints, per history, the loader's notes and the visible-before-said units and (request, unit) pairs: 0 is the goal.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict

from tiermem.data.realmem import load_realmem
from tiermem.text.words import fact_words


def words(text: str) -> set[str]:
    return set(fact_words(text, letters=True))


def scan(path: str) -> Counter:
    total: Counter = Counter()
    for conv in load_realmem(path):
        position = {t.turn_id: i for i, t in enumerate(conv.turns)}
        bags = {t.turn_id: words(t.text) for t in conv.turns}
        sessions: dict[str, list[str]] = defaultdict(list)
        for t in conv.turns:
            sessions[t.turn_id.split(":")[0]].append(t.turn_id)
        asked = [position[q.asked_before] for q in conv.questions if q.asked_before in position]
        units, pairs = set(), 0
        for unit in conv.summaries:
            need = words(unit.text)
            stating = [position[t] for t in sessions[unit.unit_id.split(":")[0]]
                       if need and len(need & bags[t]) >= 0.5 * len(need)]
            if not stating:
                continue
            last = max(position[t] for t in unit.turn_ids)
            seen = [p for p in asked if last < p <= min(stating)]
            units |= {unit.unit_id} if seen else set()
            pairs += len(seen)
        print(f"{conv.conv_id}: {dict(conv.load_notes)}; units seen before they are said: {len(units)}, "
              f"(request, unit) pairs: {pairs}")
        total.update({"units": len(units), "pairs": pairs, "requests": len(asked), "points": len(conv.summaries)})
    print(f"all: {dict(total)}")
    return total


if __name__ == "__main__":
    scan(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/realmem")
