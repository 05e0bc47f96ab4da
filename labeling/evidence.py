"""Evidence signals that need no answer generator, and the evidence rule built on them.

Signals per question:
- answer_recall: share of the gold answer stated by the retrieved summaries as the router sees them (each unit's
  text, plus its date when the unit shares a content word with the question), matched by labeling.answer_match:
  the gold's dates compared as dates (any written form, relative expressions resolved against the unit's date),
  its other words as LoCoMo-normalized, Porter-stemmed tokens with numbers as digits. When the question names a
  person, only units about that person count (they name them, as speaker or in the text): a fact said of someone
  else does not state the answer. It asks "do the summaries state the answer?" without any generator.
- gold_in_summary_pages / gold_in_research_pages / n_gold: how many gold evidence turns lie in the raw pages
  linked to the retrieved summaries, and in the pages the research policy read.

Evidence rule (defaults in EvidenceConfig):
- summary_ok when the summaries state the answer: recall >= `recall_threshold` (0.8), or provenance backs a
  partial match: every gold turn lies in a page linked to the retrieved summaries about the question's person
  AND recall >= `linked_recall_threshold` (0.5). Provenance alone is not enough (summaries are lossy by design;
  a linked page says retrieval found the right region, not that the summary kept the fact), and a high recall is
  enough even without gold turn ids (e.g. LongMemEval questions without `has_answer` turns).
- research_ok when the pages the research policy read contain every gold evidence turn. Unknown (None) when the
  question has no gold evidence ids, so such a question cannot be labeled ESCALATE by this rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from labeling.judges import scoring_gold, stem_word, stemmed_tokens
from tiermem.answer_match import (
    DATE_ORDERS,
    canonical_numbers,
    find_dates,
    names_person,
    parse_absolute,
    question_persons,
    states,
    without_spans,
)
from tiermem.errors import ConfigError
from tiermem.memory.text import content_words


@dataclass
class EvidenceConfig:
    recall_threshold: float = 0.8
    linked_recall_threshold: float = 0.5
    date_order: str = "DMY"  # how numeric dates like 01.02.2024 read: DMY (1 February) or MDY (2 January)

    def __post_init__(self) -> None:
        if self.date_order not in DATE_ORDERS:
            raise ConfigError(f"evidence.date_order must be one of {DATE_ORDERS}, got {self.date_order!r}")
        for name in ("recall_threshold", "linked_recall_threshold"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"evidence.{name} must be in [0, 1], got {value}")
        if self.linked_recall_threshold > self.recall_threshold:
            raise ConfigError("evidence.linked_recall_threshold must not exceed evidence.recall_threshold")


@dataclass
class EvidenceSignals:
    answer_recall: float | None  # None when the gold answer has no scorable token
    n_gold: int
    gold_in_summary_pages: int
    gold_in_research_pages: int
    s_ok: bool
    r_ok: bool | None  # None: no gold evidence turns to check


def _field(unit: Any, name: str) -> Any:
    return unit.get(name) if isinstance(unit, dict) else getattr(unit, name, None)


_SPEAKER = re.compile(r"^\s*[A-Z][\w'-]*(?: [A-Z][\w'-]*){0,2}:\s")  # an extractive unit's 'Melanie: '


def _topic_words(text: str) -> set[str]:
    """Stemmed content words: what a question or a unit is about (a unit without its speaker's name, which every
    unit of that speaker shares)."""
    return {stem_word(w) for w in content_words(text)}


def units_about(summaries: Sequence[Any], question: str | None) -> list[Any]:
    """The units that can state the answer to `question`: all of them, unless the question names a person; then
    those that name that person (speaker or text)."""
    persons = question_persons(question) if question else ()
    if not persons:
        return list(summaries)
    return [u for u in summaries if names_person(str(_field(u, "text") or ""), persons)]


def answer_recall(gold: str, summaries: Sequence[Any], category: str = "", source: str = "locomo",
                  question: str | None = None, date_order: str = "DMY") -> float | None:
    """Share of the gold answer stated by the summaries (module docstring). A unit's dates (its own and those its
    text states) count only when the unit is about the question (shares a content word with it): any unit from the
    right day would otherwise "state" a date answer while it talks about something else. `question=None` counts
    every date and unit."""
    gold_text = scoring_gold(gold, category, source)
    gold_dates = find_dates(gold_text, None, date_order)
    gold_tokens = set(stemmed_tokens(canonical_numbers(without_spans(gold_text, gold_dates))))
    weight = sum(m.when.weight for m in gold_dates) + len(gold_tokens)
    if not weight:
        return None
    about = _topic_words(question) if question is not None else None
    seen: set[str] = set()
    stated = []
    for unit in units_about(summaries, question):
        text = str(_field(unit, "text") or "")
        own = parse_absolute(str(_field(unit, "date") or ""), "DMY") if _field(unit, "date") else None
        base = own.lo if own is not None and own.lo == own.hi else None
        seen |= set(stemmed_tokens(canonical_numbers(text)))
        if gold_dates and (about is None or about & _topic_words(_SPEAKER.sub("", text, count=1))):
            stated += [m.when for m in find_dates(text, base, date_order)] + ([own] if own is not None else [])
    credit = sum(m.when.weight for m in gold_dates if any(states(s, m.when) for s in stated))
    return (credit + len(gold_tokens & seen)) / weight


def turns_in_pages(page_ids: Iterable[str], page_turns: Callable[[str], Iterable[str]]) -> set[str]:
    turns: set[str] = set()
    for page_id in dict.fromkeys(page_ids):
        turns.update(page_turns(page_id))
    return turns


def compute_signals(
    gold: str,
    category: str,
    evidence_ids: Sequence[str],
    summaries: Sequence[Any],
    research_page_ids: Sequence[str],
    page_turns: Callable[[str], Iterable[str]],
    cfg: EvidenceConfig,
    source: str = "locomo",
    question: str | None = None,
) -> EvidenceSignals:
    """`summaries` are the retrieved units (dicts or objects with text, date, page_ids) in rank order.
    `gold_in_summary_pages` counts the gold turns in pages linked to the units about the question's person."""
    gold_turns = set(evidence_ids)
    linked_pages = [p for unit in units_about(summaries, question) for p in (_field(unit, "page_ids") or [])]
    in_summary = len(gold_turns & turns_in_pages(linked_pages, page_turns))
    in_research = len(gold_turns & turns_in_pages(research_page_ids, page_turns))
    recall = answer_recall(gold, summaries, category, source, question, cfg.date_order)
    r = recall or 0.0
    all_linked = bool(gold_turns) and in_summary == len(gold_turns)
    s_ok = r >= cfg.recall_threshold or (all_linked and r >= cfg.linked_recall_threshold)
    if recall is None:
        s_ok = False
    r_ok = (in_research == len(gold_turns)) if gold_turns else None
    return EvidenceSignals(
        answer_recall=None if recall is None else round(recall, 4),
        n_gold=len(gold_turns),
        gold_in_summary_pages=in_summary,
        gold_in_research_pages=in_research,
        s_ok=s_ok,
        r_ok=r_ok,
    )

