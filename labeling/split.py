"""Train / validation / test split by conversation, before any balancing: no conversation in two splits."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from tiermem.settings.errors import ConfigError

SPLITS = ("train", "validation", "test")


@dataclass
class SplitSpec:
    """Explicit conversation lists (when any is given) or seeded ratios over the conversations present."""

    train: list[str] = field(default_factory=list)
    validation: list[str] = field(default_factory=list)
    test: list[str] = field(default_factory=list)
    ratios: list[float] = field(default_factory=lambda: [0.6, 0.2, 0.2])
    seed: int = 0

    def __post_init__(self) -> None:
        if len(self.ratios) != 3 or any(r < 0 for r in self.ratios) or sum(self.ratios) <= 0:
            raise ConfigError(f"split.ratios must be 3 non-negative numbers (train, validation, test): {self.ratios}")

    @property
    def explicit(self) -> bool:
        return bool(self.train or self.validation or self.test)


def _ratio_counts(n: int, ratios: Sequence[float]) -> list[int]:
    """Largest-remainder counts; every split with a positive ratio gets >= 1 conversation when n allows."""
    total = sum(ratios)
    exact = [n * r / total for r in ratios]
    counts = [int(x) for x in exact]
    for i in sorted(range(3), key=lambda i: exact[i] - counts[i], reverse=True)[: n - sum(counts)]:
        counts[i] += 1
    wanted = [i for i in range(3) if ratios[i] > 0]
    if n >= len(wanted):
        for i in wanted:
            while counts[i] == 0:
                donor = max(range(3), key=lambda j: counts[j])
                counts[donor] -= 1
                counts[i] += 1
    return counts


def assign_splits(conv_ids: Sequence[str], spec: SplitSpec) -> dict[str, str]:
    """conv_id -> split name. Explicit lists must be disjoint and cover every conversation present."""
    ids = list(dict.fromkeys(conv_ids))
    if spec.explicit:
        lists = {name: getattr(spec, name) for name in SPLITS}
        seen: dict[str, str] = {}
        for name, members in lists.items():
            for conv in members:
                if conv in seen:
                    raise ConfigError(f"split: conversation {conv!r} is listed in both {seen[conv]} and {name}")
                seen[conv] = name
        missing = [c for c in ids if c not in seen]
        if missing:
            raise ConfigError(f"split: conversations {missing} are in the data but in no split list")
        assignment = {c: seen[c] for c in ids}
    else:
        shuffled = sorted(ids)
        random.Random(spec.seed).shuffle(shuffled)
        counts = _ratio_counts(len(shuffled), spec.ratios)
        assignment, start = {}, 0
        for name, count in zip(SPLITS, counts, strict=True):
            for conv in shuffled[start : start + count]:
                assignment[conv] = name
            start += count
    check_disjoint(assignment)
    return assignment


def check_disjoint(assignment: dict[str, str]) -> None:
    """Each conversation maps to exactly one known split (a dict cannot hold a key twice; names are checked)."""
    bad = {c: s for c, s in assignment.items() if s not in SPLITS}
    assert not bad, f"unknown split names: {bad}"


def check_records_disjoint(records: Sequence[dict]) -> None:
    """No conversation's records may sit in two splits (guards the saved dataset itself)."""
    where: dict[str, str] = {}
    for rec in records:
        conv, split = rec["conv_id"], rec["split"]
        if where.setdefault(conv, split) != split:
            raise AssertionError(f"conversation {conv!r} appears in splits {where[conv]!r} and {split!r}")
