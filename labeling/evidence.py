"""Evidence signals that need no answer generator and the evidence rule built on them (docs/labeling.md)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from labeling.answer_judges import scoring_gold, stem_word, stemmed_tokens
from labeling.reply_evidence import ReplyRuleConfig, ReplySignals, reply_details, reply_signals
from tiermem.memory.summaries import day_of
from tiermem.memory.text import content_words
from tiermem.settings.config import check_declared
from tiermem.settings.errors import ConfigError
from tiermem.text.answer_match import canonical_numbers, find_dates, parse_absolute, states, without_spans
from tiermem.text.persons import Cast, PersonGuard, person_guard
from tiermem.text.words import TOPIC_TAG


@dataclass
class EvidenceConfig:
    recall_threshold: float = field(default=0.8, metadata={"ge": 0, "le": 1})
    linked_recall_threshold: float = field(default=0.5, metadata={"ge": 0, "le": 1})  # at most recall_threshold
    # how numeric dates like 01.02.2024 read: DMY (1 February) or MDY (2 January)
    date_order: Literal["DMY", "MDY"] = "DMY"
    # research is right when the text it read states the answer, or it read every gold turn; false: gold turns only
    # (a question without gold turn ids then never has a research verdict)
    research_by_text: bool = True
    # a question that names the memory facts it needs (RealMem's memory_used): the share of them a path must hold
    # for it to count as right (1.0: every one; point_counts says what "holds" means); 0 would call every path right
    points_share: float = field(default=1.0, metadata={"gt": 0, "le": 1})
    # a request whose reply the data gives (RealMem): what the reply draws from the memory decides (reply_evidence)
    reply: ReplyRuleConfig = field(default_factory=ReplyRuleConfig)

    def __post_init__(self) -> None:
        check_declared(self, "evidence.")
        if self.linked_recall_threshold > self.recall_threshold:
            raise ConfigError("evidence.linked_recall_threshold must not exceed evidence.recall_threshold")


@dataclass
class EvidenceSignals:
    answer_recall: float | None  # None when the gold answer has no scorable token
    n_gold: int
    gold_in_summary_pages: int
    gold_in_research_pages: int
    s_ok: bool | None  # None: the reply rule cannot decide (between its bounds)
    r_ok: bool | None  # None: neither signal says the research path was right, and no gold turns to check
    research_recall: float | None = None  # None: no research text known (turn ids only) or nothing scorable
    r_ok_by: str | None = None  # "text" | "gold_turns" | "both" | "points": which signal made r_ok true
    person_guard: str | None = None  # how the question's names were resolved (None: it names no person)
    points_in_summaries: int | None = None  # of the question's gold points (None: it names none)
    points_in_research: int | None = None
    reply: ReplySignals | None = None  # what the reply draws from the memory (None: the data gives no reply)


@dataclass
class Reading:
    """One conversation's pages as the evidence rule reads them; indexing by page id gives its turn ids."""

    turn_ids: Callable[[str], Iterable[str]]
    turns: Callable[[str], Sequence[Any]] | None = None
    cast: Cast | None = None
    # the Tier-1 units the memory may read as of the question: (text, source turn ids)
    memory_units: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    _units: dict[str, list[dict[str, Any]]] = field(default_factory=dict, repr=False)
    _recall: dict[tuple[Any, ...], float | None] = field(default_factory=dict, repr=False)

    @classmethod
    def of_pages(cls, pages: Iterable[Any], memory_units: Iterable[Any] | None = None) -> Reading:
        by_id = {p.page_id: p for p in pages}
        return cls(lambda pid: by_id[pid].turn_ids, lambda pid: by_id[pid].turns,
                   Cast.of_turns(t for p in by_id.values() for t in p.turns),
                   None if memory_units is None else tuple((u.text, tuple(u.turn_ids)) for u in memory_units))

    @classmethod
    def of(cls, pages: Reading | Mapping[str, Iterable[str]] | Callable[[str], Iterable[str]]) -> Reading:
        """A Reading from what callers hold: itself, a page -> turn ids mapping, or a lookup (turn ids only)."""
        if isinstance(pages, Reading):
            return pages
        return cls(pages.__getitem__ if isinstance(pages, Mapping) else pages)

    def __getitem__(self, page_id: str) -> list[str]:
        return list(self.turn_ids(page_id))

    def read_units(self, page_ids: Iterable[str]) -> list[dict[str, Any]] | None:
        """The research path's text read: each turn of the pages as a unit (speaker, text, day); None unknown."""
        if self.turns is None:
            return None
        out = []
        for pid in dict.fromkeys(page_ids):
            if pid not in self._units:
                self._units[pid] = [{"text": f"{t.speaker}: {t.text}", "speakers": [t.speaker],
                                     "date": day_of(t.timestamp)} for t in self.turns(pid)]
            out += self._units[pid]
        return out

    def reply_details(self, request: str, reply: str) -> dict:
        """The details of `reply` the units this memory may read state and `request` does not (once per request)."""
        key = ("reply", request, reply)
        if key not in self._recall:
            self._recall[key] = reply_details(reply, request, self.memory_units or ())  # type: ignore[assignment]
        return self._recall[key]  # type: ignore[return-value]

    def research_recall(self, key: tuple[Any, ...], page_ids: Sequence[str], score: Callable[[list[Any]], Any]
                        ) -> float | None:
        """The best `score` of one read page's text, page by page so a gold's words are not gathered from pages
        apart ('likely' in one, 'no' in another); cached per (question key, page) for the variants and unit targets."""
        if self.turns is None:
            return None
        scores = []
        for pid in dict.fromkeys(page_ids):
            if (*key, pid) not in self._recall:
                self._recall[(*key, pid)] = score(self.read_units([pid]) or [])
            scores.append(self._recall[(*key, pid)])
        known = [x for x in scores if x is not None]
        return max(known) if known else None


def _field(unit: Any, name: str) -> Any:
    return unit.get(name) if isinstance(unit, dict) else getattr(unit, name, None)


_SPEAKER = re.compile(r"^\s*[A-Z][\w'-]*(?: [A-Z][\w'-]*){0,2}:\s")  # an extractive unit's 'Melanie: '


def _body(unit: Any) -> str:
    """A unit's text without its speaker's 'Name: ' opening (the name every unit of that speaker shares)."""
    text = str(_field(unit, "text") or "")
    for speaker in _field(unit, "speakers") or ():
        if text.casefold().startswith(f"{speaker.casefold()}:"):
            return text[len(speaker) + 1:]
    return _SPEAKER.sub("", text, count=1)


def _topic_words(text: str) -> set[str]:
    return {stem_word(w) for w in content_words(text)}


def _speakers(unit: Any) -> list[str] | None:
    speakers = _field(unit, "speakers")
    return None if speakers is None else list(speakers)


def units_about(summaries: Sequence[Any], question: str | None, cast: Cast | None = None,
                guard: PersonGuard | None = None) -> list[Any]:
    """All units, or those about the person `question` names when the conversation knows them (tiermem.text.persons)."""
    guard = guard or person_guard(question, cast)
    if not guard.narrows:
        return list(summaries)
    return [u for u in summaries if guard.about(str(_field(u, "text") or ""), _speakers(u))]


def answer_recall(gold: str, summaries: Sequence[Any], category: str = "", source: str = "locomo",
                  question: str | None = None, date_order: str = "DMY", cast: Cast | None = None) -> float | None:
    """Share of the gold answer the summaries state. A unit's dates count only when it shares a content word with the
    question: any unit from the right day would otherwise "state" a date answer. `question=None`: every date counts."""
    gold_text = scoring_gold(gold, category, source)
    gold_dates = find_dates(gold_text, None, date_order)
    gold_tokens = set(stemmed_tokens(canonical_numbers(without_spans(gold_text, gold_dates))))
    weight = sum(m.when.weight for m in gold_dates) + len(gold_tokens)
    if not weight:
        return None
    about = _topic_words(question) if question is not None else None
    seen: set[str] = set()
    stated = []
    for unit in units_about(summaries, question, cast):
        text = str(_field(unit, "text") or "")
        own = parse_absolute(str(_field(unit, "date") or ""), "DMY") if _field(unit, "date") else None
        base = own.lo if own is not None and own.lo == own.hi else None
        seen |= set(stemmed_tokens(canonical_numbers(text)))
        if gold_dates and (about is None or about & _topic_words(_body(unit))):
            stated += [m.when for m in find_dates(text, base, date_order)] + ([own] if own is not None else [])
    credit = sum(m.when.weight for m in gold_dates if any(states(s, m.when) for s in stated))
    return (credit + len(gold_tokens & seen)) / weight


def turns_in_pages(page_ids: Iterable[str], page_turns: Callable[[str], Iterable[str]]) -> set[str]:
    turns: set[str] = set()
    for page_id in dict.fromkeys(page_ids):
        turns.update(page_turns(page_id))
    return turns


def research_verdict(recall: float | None, in_research: int, n_gold: int, cfg: EvidenceConfig
                     ) -> tuple[bool | None, str | None]:
    """(r_ok, which signal decided): the text read states the answer, or the pages hold every gold turn."""
    by_text = recall is not None and recall >= cfg.recall_threshold
    by_turns = n_gold > 0 and in_research == n_gold
    if by_text or by_turns:
        return True, "both" if by_text and by_turns else "text" if by_text else "gold_turns"
    return (False if n_gold else None), None


def compute_signals(
    gold: str,
    category: str,
    evidence_ids: Sequence[str],
    summaries: Sequence[Any],
    research_page_ids: Sequence[str],
    page_turns: Reading | Mapping[str, Iterable[str]] | Callable[[str], Iterable[str]],
    cfg: EvidenceConfig,
    source: str = "locomo",
    question: str | None = None,
    points: Sequence[Any] = (),
    reply: str | None = None,
) -> EvidenceSignals:
    """`summaries`: the retrieved units in rank order. `page_turns`: the conversation's `Reading`, or turn ids alone
    (then research is judged by gold turns only and question names are taken as written)."""
    reading = Reading.of(page_turns)
    guard = person_guard(question, reading.cast)
    gold_turns = set(evidence_ids)
    linked_pages = [p for unit in units_about(summaries, question, guard=guard)
                    for p in (_field(unit, "page_ids") or [])]
    in_summary = len(gold_turns & turns_in_pages(linked_pages, reading.turn_ids))
    in_research = len(gold_turns & turns_in_pages(research_page_ids, reading.turn_ids))
    recall = answer_recall(gold, summaries, category, source, question, cfg.date_order, reading.cast)
    r = recall or 0.0
    all_linked = bool(gold_turns) and in_summary == len(gold_turns)
    s_ok = r >= cfg.recall_threshold or (all_linked and r >= cfg.linked_recall_threshold)
    if recall is None:
        s_ok = False
    read_recall = None if not cfg.research_by_text else reading.research_recall(
        (gold, category, source, question, cfg.date_order), research_page_ids,
        lambda units: answer_recall(gold, units, category, source, question, cfg.date_order, reading.cast))
    r_ok, r_ok_by = research_verdict(read_recall, in_research, len(gold_turns), cfg)
    held: tuple[int, int] | None = None
    if points:  # the facts the question needs decide, each on its own (a long gold joined is not one fact)
        held = point_counts(points, summaries, research_page_ids, reading, cfg, question, guard)
        need = math.ceil(cfg.points_share * len(points) - 1e-9)
        s_ok, r_ok = held[0] >= need, held[1] >= need
        r_ok_by = "points" if r_ok else None
    by_reply = None
    if reply is not None and reading.memory_units is not None:  # the reply decides; the points stay a witness
        details = reading.reply_details(question or "", reply)
        research = [u["text"] for u in reading.read_units(research_page_ids) or []]
        by_reply = reply_signals(details, [str(_field(u, "text") or "") for u in summaries], research,
                                 turns_in_pages(research_page_ids, reading.turn_ids), cfg.reply)
        points_r_ok = bool(points) and r_ok  # the memory_used witness: research held the request's points
        s_ok, r_ok = by_reply.s_ok, by_reply.r_ok or points_r_ok
        r_ok_by = "reply" if by_reply.r_ok else "points" if points_r_ok else None
    return EvidenceSignals(
        answer_recall=None if recall is None else round(recall, 4),
        n_gold=len(gold_turns),
        gold_in_summary_pages=in_summary,
        gold_in_research_pages=in_research,
        s_ok=s_ok,
        r_ok=r_ok,
        research_recall=None if read_recall is None else round(read_recall, 4),
        r_ok_by=r_ok_by,
        person_guard=guard.reason,
        points_in_summaries=None if held is None else held[0],
        points_in_research=None if held is None else held[1],
        reply=by_reply,
    )




def point_counts(points: Sequence[Any], summaries: Sequence[Any], research_page_ids: Sequence[str], reading: Reading,
                 cfg: EvidenceConfig, question: str | None, guard: PersonGuard) -> tuple[int, int]:
    """(points the summaries hold, points the research pages hold): the evidence rule per fact. The research pages
    hold a point when they hold its source turns, or one page states it."""
    linked = turns_in_pages([p for u in units_about(summaries, question, guard=guard)
                             for p in (_field(u, "page_ids") or [])], reading.turn_ids)
    read = turns_in_pages(research_page_ids, reading.turn_ids)
    in_summaries = in_research = 0
    for point in points:
        text = TOPIC_TAG.sub(" ", point.text)
        recall = answer_recall(text, summaries, "", "points", question, cfg.date_order, reading.cast) or 0.0
        sources = set(point.turn_ids)
        if recall >= cfg.recall_threshold or (sources and sources <= linked and recall >= cfg.linked_recall_threshold):
            in_summaries += 1
        if sources and sources <= read:
            in_research += 1
            continue
        page_recall = reading.research_recall(
            (text, "points", question, cfg.date_order), research_page_ids,
            lambda units, text=text: answer_recall(text, units, "", "points", question, cfg.date_order, reading.cast))
        in_research += int(page_recall is not None and page_recall >= cfg.recall_threshold)
    return in_summaries, in_research
