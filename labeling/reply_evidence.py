"""What a reply draws from the memory: its details (adjacent content-word pairs; docs/labeling.md)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from tiermem.settings.config import check_declared
from tiermem.settings.errors import ConfigError
from tiermem.text.words import TOPIC_TAG, fact_words

Detail = tuple[str, str]
_CLAUSE = re.compile(r"[.!?;:()\n]+")


@lru_cache(maxsize=200_000)
def details_of(text: str) -> frozenset[Detail]:
    """The adjacent content-word pairs of each clause of `text` (stemmed)."""
    out: set[Detail] = set()
    for clause in _CLAUSE.split(TOPIC_TAG.sub(" ", text)):
        words = fact_words(clause)
        out.update(zip(words, words[1:], strict=False))
    return frozenset(out)


@lru_cache(maxsize=200_000)
def words_of(text: str) -> frozenset[str]:
    return frozenset(fact_words(text))


def reply_details(reply: str, request: str, memory: Iterable[tuple[str, Sequence[str]]]
                  ) -> dict[Detail, frozenset[str]]:
    """The details of `reply` the memory's units state and `request` does not, each with its units' source turns."""
    said = details_of(reply)
    sources: dict[Detail, set[str]] = {}
    for text, turn_ids in memory:
        for detail in said & details_of(text):
            sources.setdefault(detail, set()).update(turn_ids)
    asked, asked_words = details_of(request), words_of(request)
    return {d: frozenset(turns) for d, turns in sources.items()
            if d not in asked and not (d[0] in asked_words and d[1] in asked_words)}


def held(details: Iterable[Detail], texts: Iterable[str]) -> set[Detail]:
    """The details some one of `texts` holds (both words in one text)."""
    bags = [words_of(t) for t in texts]
    return {d for d in details if any(d[0] in bag and d[1] in bag for bag in bags)}


@dataclass
class ReplyRuleConfig:
    # the summaries suffice when at most this many of the reply's details are missing from them (and research is
    # right when at most this many are missing from the summaries and the pages it read together, or it reads back
    # at least one the summaries missed)
    answer_max_missing: int = field(default=1, metadata={"ge": 0})
    # the summaries do not suffice when at least this many are missing; between the two bounds: no label
    escalate_min_missing: int = field(default=4, metadata={"ge": 0})

    def __post_init__(self) -> None:
        for name, value in vars(self).items():  # both counts; 1.5 or True would pass the declared range
            if type(value) is not int:
                raise ConfigError(f"evidence.reply.{name} must be a whole number of details, got {value!r}")
        check_declared(self, "evidence.reply.")
        if self.escalate_min_missing <= self.answer_max_missing:
            raise ConfigError("evidence.reply.escalate_min_missing must exceed evidence.reply.answer_max_missing, "
                              f"got {self.escalate_min_missing} <= {self.answer_max_missing}")


@dataclass(frozen=True)
class ReplySignals:
    n_details: int
    missing_from_summaries: int
    missing_after_research: int
    s_ok: bool | None  # None: between the bounds, too thin to decide
    r_ok: bool


UNDECIDED = "reply details between the bounds"  # the drop reason of a request the reply rule cannot decide


def reply_signals(details: Mapping[Detail, frozenset[str]], summary_texts: list[str], research_texts: list[str],
                  research_turns: set[str], cfg: ReplyRuleConfig) -> ReplySignals:
    """The summaries hold a detail when one of them holds it; the research path when one page it read holds it or it
    read a source turn of a unit that states it (provenance: the memory's phrasing is not the raw turns')."""
    in_summaries = held(details, summary_texts)
    missing = len(details) - len(in_summaries)
    rest = [d for d in details if d not in in_summaries]
    found = held(rest, research_texts) | {d for d in rest if details[d] & research_turns}
    after_research = missing - len(found)
    s_ok = True if missing <= cfg.answer_max_missing else False if missing >= cfg.escalate_min_missing else None
    # research is right when it reads back what the summaries missed, or at least some of it: a reply drawing on
    # facts of many sessions is never whole in one bounded research round, and escalating still brings it closer
    r_ok = after_research <= cfg.answer_max_missing or after_research < missing
    return ReplySignals(len(details), missing, after_research, s_ok, r_ok)
