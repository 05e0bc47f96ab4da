"""Reading data checks for reader-pretrain: each problem a DataError (exit 3) naming file, article and question."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from tiermem.settings.errors import DataError, RunError
from tiermem.text.sentences import sentence_spans


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ('\ud800'): the tokenizer raises TypeError on it
        return False
    return True


def check_reading_questions(questions: Sequence[Any], source: str) -> None:
    """Every context holds a sentence and every text is valid Unicode; some question at all."""
    if not questions:
        raise DataError(f"reading data {source}: no questions")
    seen: set[int] = set()
    for q in questions:
        where = f"reading data {source}: article {q.article!r} question {q.qid!r}"
        if not _encodable(q.question):
            raise DataError(f"{where}: field 'question' holds a lone surrogate (not valid Unicode)")
        if id(q.context) in seen:
            continue
        seen.add(id(q.context))
        if not _encodable(q.context):
            raise DataError(f"{where}: field 'context' holds a lone surrogate (not valid Unicode)")
        if not sentence_spans(q.context):
            raise DataError(f"{where}: field 'context' is empty or white space: no sentence to read")


def check_heldout(held: Sequence[Any], titles: Sequence[str], source: str) -> None:
    """The held-out articles hold answerable and unanswerable questions (AUROC and the floor need both)."""
    answerable = sum(bool(q.answerable) for q in held)
    if not held or answerable in (0, len(held)):
        raise DataError(f"reading data {source}: the held-out article(s) {list(titles)} have {answerable} answerable "
                        f"and {len(held) - answerable} unanswerable question(s); both are needed to measure the "
                        "reader: change seed or heldout_articles, or add such questions")


def hub_answers(row: Any, where: str) -> list[dict[str, Any]]:
    """A hub row's `answers` ({text: [...], answer_start: [...]}, lists of one length) as SQuAD file answers."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: a row must be a mapping, got {type(row).__name__}")
    answers = row.get("answers") or {}
    if not isinstance(answers, dict):
        raise DataError(f"{where}: field 'answers' must be a mapping of 'text' and 'answer_start' lists, got "
                        f"{type(answers).__name__}")
    texts, starts = answers.get("text") or [], answers.get("answer_start") or []
    if not isinstance(texts, list) or not isinstance(starts, list) or len(texts) != len(starts):
        raise DataError(f"{where}: field 'answers' must hold 'text' and 'answer_start' lists of one length, got "
                        f"{texts!r:.60} and {starts!r:.60}")
    return [{"text": t, "answer_start": s} for t, s in zip(texts, starts, strict=True)]


def check_loss(loss: float, label: str, epoch: int, step: int, learning_rate: float) -> None:
    """A loss that is no longer finite: the run diverged, named as it happens (not later as "scores contain NaN")."""
    if not math.isfinite(loss):
        raise RunError(f"{label}: the training diverged at epoch {epoch} step {step} (loss {loss}); lower "
                       f"learning_rate (was {learning_rate:g}) and rerun")


def check_scores(scores: Iterable[float], label: str) -> None:
    """Held-out scores that are not all finite: the weights diverged without the loss showing it."""
    if not all(math.isfinite(v) for v in scores):
        raise RunError(f"{label}: the trained reader scores held-out pairs as NaN or infinite: the training "
                       "diverged; lower learning_rate and rerun")

