"""Evidence signals that need no answer generator, and the evidence rule built on them.

Signals per question:
- answer_recall: share of the gold answer's (LoCoMo-normalized, Porter-stemmed, unique) tokens that appear in
  the retrieved summaries as the router sees them (each unit's text, plus its date when the unit shares a
  content word with the question). It asks "do the summaries state the answer?" without any generator.
- gold_in_summary_pages / gold_in_research_pages / n_gold: how many gold evidence turns lie in the raw pages
  linked to the retrieved summaries, and in the pages the research policy read.

Evidence rule (defaults in EvidenceConfig):
- summary_ok when the summaries state the answer: recall >= `recall_threshold` (0.8), or provenance backs a
  partial match: every gold turn lies in a page linked to the retrieved summaries AND recall >=
  `linked_recall_threshold` (0.5). Provenance alone is not enough (summaries are lossy by design; a linked page
  says retrieval found the right region, not that the summary kept the fact), and a high recall is enough even
  without gold turn ids (e.g. LongMemEval questions without `has_answer` turns).
- research_ok when the pages the research policy read contain every gold evidence turn. Unknown (None) when the
  question has no gold evidence ids, so such a question cannot be labeled ESCALATE by this rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from labeling.judges import scoring_gold, stemmed_tokens
from tiermem.errors import ConfigError
from tiermem.memory.text import content_words


@dataclass
class EvidenceConfig:
    recall_threshold: float = 0.8
    linked_recall_threshold: float = 0.5

    def __post_init__(self) -> None:
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


def answer_recall(gold: str, summaries: Sequence[Any], category: str = "", source: str = "locomo",
                  question: str | None = None) -> float | None:
    """Share of the gold answer's tokens stated by the summaries. A unit's date counts only when the unit is
    about the question (shares a content word with it): any unit from the right day would otherwise "state" a
    date answer while it talks about something else. `question=None` counts every date (older behaviour)."""
    gold_tokens = set(stemmed_tokens(scoring_gold(gold, category, source)))
    if not gold_tokens:
        return None
    about = set(stemmed_tokens(" ".join(content_words(question)))) if question is not None else None
    seen: set[str] = set()
    for unit in summaries:
        text_tokens = set(stemmed_tokens(str(_field(unit, "text") or "")))
        seen |= text_tokens
        if about is None or about & text_tokens:
            seen.update(stemmed_tokens(str(_field(unit, "date") or "")))
    return len(gold_tokens & seen) / len(gold_tokens)


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
    """`summaries` are the retrieved units (dicts or objects with text, date, page_ids) in rank order."""
    gold_turns = set(evidence_ids)
    linked_pages = [p for unit in summaries for p in (_field(unit, "page_ids") or [])]
    in_summary = len(gold_turns & turns_in_pages(linked_pages, page_turns))
    in_research = len(gold_turns & turns_in_pages(research_page_ids, page_turns))
    recall = answer_recall(gold, summaries, category, source, question)
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

