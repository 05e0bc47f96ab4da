"""The extractive answerer (README, `ask`): the reader scores the sentences read; the best answers, and under its
calibrated floor ANSWER escalates once. The reader: a unit-reader router's own, else `memory.reader`'s."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tiermem.memory.grounding import Evidence, _Candidate, extractive_answer, summary_candidates
from tiermem.memory.policies import PathCost, ResearchResult, SummaryResult, first_round_pages, question_text
from tiermem.memory.raw_store import Page
from tiermem.memory.summaries import RetrievedUnit, absolutize, day_of
from tiermem.models.floors import load_floor
from tiermem.settings.errors import ConfigError, MissingFileError
from tiermem.text.sentences import sentence_spans

ANSWERERS = ("extractive", "llm", "auto")
__all__ = ["load_floor"]  # the one reader of floors is tiermem.models.floors


def answerer_mode(setting: str, backend: str | None, model: str | None) -> str:
    """"extractive" or "llm": `auto` reads on the packaged local model (its replies add seconds, not answers)."""
    if setting not in ANSWERERS:
        raise ConfigError(f"memory.answerer must be one of {list(ANSWERERS)}, got {setting!r}")
    if setting != "auto":
        return setting
    packaged = backend is None or (backend == "local" and str(model).startswith("packaged:"))
    return "extractive" if packaged else "llm"


@dataclass
class AnswerReader:
    """A cross-encoder (`logits(questions, texts)`) and the logit under which a sentence does not answer."""

    reader: Any
    floor: float
    source: str  # the directory both came from


def load_answer_reader(path: str | Path) -> AnswerReader:
    from tiermem.models.model_dir import load_reader

    path = Path(path)
    if not (path / "model.safetensors").is_file():
        raise MissingFileError(f"memory.reader={str(path)!r}: no reader there; the extractive answerer reads with the "
                               "answerability reader `make reader-pretrain` trains (or set memory.answerer=llm)")
    reader = load_reader(path, "memory.reader=")  # its files checked first: tokenizer, config, weights
    return AnswerReader(reader, load_floor(path), str(path))


def router_reader(router: Any) -> AnswerReader | None:
    """A unit-reader router's own reader and its floor (its run directory's), or None for any other router."""
    reader, run_dir = getattr(router, "reader", None), getattr(router, "run_dir", None)
    if reader is None or not hasattr(reader, "logits") or run_dir is None:
        return None
    return AnswerReader(reader, load_floor(run_dir), str(run_dir))


def _split(cand: _Candidate, timestamp: str | None = None) -> list[_Candidate]:
    """One candidate per sentence of the candidate's quote; a punctuation-only sentence ("...") is not read."""
    text = cand.evidence.quote
    return [_Candidate(replace(cand.evidence, quote=text[s:e]), absolutize(text[s:e], timestamp) if timestamp
                       else text[s:e], frozenset()) for s, e in sentence_spans(text)
            if any(ch.isalnum() for ch in text[s:e])]


def page_sentences(pages: Sequence[Page]) -> list[_Candidate]:
    """Every sentence of the pages' turns, verbatim, with its speaker, day, turn and page."""
    return [c for p in pages for t in p.turns for c in _split(_Candidate(
        Evidence(t.text, t.speaker, day_of(t.timestamp), t.turn_id, p.page_id, "page"), t.text, frozenset()),
        t.timestamp)]


def unit_sentences(units: Sequence[RetrievedUnit], speakers: dict[str, str]) -> list[_Candidate]:
    return [c for cand in summary_candidates(units, speakers) for c in _split(cand)]


@dataclass
class Reading:
    """What the reader made of what was read: the best sentence, its logit and the floor it is held to."""

    best: Evidence | None
    answer: str | None  # the best sentence as the answer (extractive_answer), None under the floor
    logit: float | None
    floor: float
    sentences: int
    seconds: float
    reader: str

    @property
    def stated(self) -> bool:
        return self.logit is not None and self.logit >= self.floor


def read(reader: AnswerReader, question: str, candidates: Sequence[_Candidate]) -> Reading:
    """All candidates against the question in one batch; ties go to the earlier sentence."""
    start = time.perf_counter()
    # the unit reader's view of an extractive summary unit ("<date>: <speaker>: <text>"): the speaker is who "I" is
    texts = [": ".join(x for x in (c.evidence.date, c.evidence.speaker, c.resolved) if x) for c in candidates]
    logits = reader.reader.logits([question] * len(texts), texts) if texts else []
    i = max(range(len(logits)), key=lambda j: (logits[j], -j)) if logits else None
    best = candidates[i] if i is not None else None
    logit = float(logits[i]) if i is not None else None
    stated = logit is not None and logit >= reader.floor
    answer = None
    if best is not None and i is not None and stated:
        prefix = len(texts[i]) - len(best.resolved)  # `date: speaker: `: no part of an answer
        answer = span_answer(reader.reader, question, texts[i], prefix) or extractive_answer(best)
    return Reading(best.evidence if best else None, answer, logit, reader.floor, len(texts),
                   time.perf_counter() - start, reader.source)


def span_answer(model: Any, question: str, text: str, prefix: int = 0) -> str | None:
    """The reader's span of `text` (`date: speaker: sentence`) if it predicts spans (`best_spans(questions, texts) ->
    [(start_char, end_char, margin)]`), else None (the sentence answers): kept past `prefix`, widened to whole words;
    a non-finite margin (NaN weights) gives None. The quote stays the whole sentence either way."""
    best_spans = getattr(model, "best_spans", None)
    if not callable(best_spans) or not getattr(model, "has_spans", True):  # a classifier-only checkpoint
        return None
    start, end, margin = best_spans([question], [text])[0]
    start, end = max(int(start), prefix), int(end)
    if not math.isfinite(float(margin)) or not 0 <= start < end <= len(text):
        return None
    while start > prefix and text[start - 1].isalnum():
        start -= 1
    while end < len(text) and text[end].isalnum():
        end += 1
    return text[start:end].strip() or None


@dataclass
class ExtractiveOutcome:
    """The runtime's answer fields, filled by `answer_extractively`."""

    answer: str | None
    evidence: Evidence | None
    cost: PathCost
    summary: SummaryResult | None
    research: ResearchResult | None
    reading: Reading
    escalated_once: bool


def _speakers(memory: Any, units: Sequence[RetrievedUnit]) -> dict[str, str]:
    turns = {tid for u in units for tid in u.turn_ids}
    pages = memory.raw.get_many(list(dict.fromkeys(p for u in units for p in u.page_ids)))
    return {t.turn_id: t.speaker for p in pages for t in p.turns if t.turn_id in turns}


def research_pages(memory: Any, question: str, date: str | None, retrieved: Sequence[RetrievedUnit],
                   cfg: Any, reader: Any = None) -> list[str]:
    """The raw index's pages for the question (no LM plans searches), those of the turns `reader` scores best first:
    at most max_rounds x pages_per_round. A conversation no longer than that is read whole, not ordered."""
    budget = cfg.max_rounds * cfg.pages_per_round
    if reader is not None and memory.turns is not None and memory.page_count() <= budget:
        reader = None
    return first_round_pages(memory, question, retrieved, pages_per_round=cfg.pages_per_round,
                             keyword_k=cfg.keyword_k, question_date=date, reader=reader,
                             turn_k=cfg.turn_k)[:budget]


def answer_extractively(memory: Any, question: Any, action: str, retrieved: list[RetrievedUnit],
                        reader: AnswerReader, cfg: Any) -> ExtractiveOutcome:
    """The route's path with the reader as the answerer; ANSWER under the floor escalates once."""
    q, date = question_text(question)
    summary = research = None
    cost = PathCost()
    escalated = False
    if action == "ANSWER":
        start = time.perf_counter()
        reading = read(reader, q, unit_sentences(retrieved, _speakers(memory, retrieved)))
        summary = SummaryResult(reading.answer, retrieved, PathCost(wall_s=round(time.perf_counter() - start, 6)))
        cost = summary.cost
        escalated = not reading.stated
    if action != "ANSWER" or escalated:
        start = time.perf_counter()
        pages = research_pages(memory, q, date, retrieved, cfg, reader.reader)
        reading = read(reader, q, page_sentences(memory.raw.get_many(pages)))
        path_cost = PathCost(wall_s=round(time.perf_counter() - start, 6), pages_read=len(pages), rounds=1)
        research = ResearchResult(reading.answer, pages, 1, [], path_cost, 0, stop_reason="extractive")
        cost = cost + path_cost
    return ExtractiveOutcome(reading.answer, reading.best if reading.stated else None, cost, summary, research,
                             reading, escalated)
