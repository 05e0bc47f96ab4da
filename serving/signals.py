"""Serve-time signals of one (question, summaries) pair, read by the features router and LM signal heads."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from tiermem.runs.run_meta import SIGNAL_HEAD_FILE  # noqa: F401  (the signal head's file name)
from tiermem.settings.errors import DataError
from tiermem.text.words import SIGNAL_STOPWORDS, strip_plural, tokens

NO_SUMMARY_SCORE = -1.0  # top-1 score when nothing was retrieved: the floor of a cosine similarity

YES_NO_STARTS = ("is", "are", "was", "were", "do", "does", "did", "has", "have", "had", "can", "could", "will",
                 "would", "should", "shall", "may", "might")
FEATURES = ("top1", "mean_score", "gap12", "overlap", "overlap_best", "n_summaries", "q_words", "when",
            "how_many", "list_like", "yes_no", "why", "has_date")
# What each feature measures, for reports of which inputs carry a decision (LogisticModel.contributions).
FEATURE_GROUPS = {"retrieval scores": ("top1", "mean_score", "gap12"), "lexical overlap": ("overlap", "overlap_best"),
                  "question form": ("q_words", "when", "how_many", "list_like", "yes_no", "why"),
                  "summary set": ("n_summaries", "has_date")}


def _text(unit: Any) -> str:
    return str(unit.get("text", "") if isinstance(unit, dict) else getattr(unit, "text", "") or "")


def _score_of(unit: Any) -> float | None:
    value = unit.get("score") if isinstance(unit, dict) else getattr(unit, "score", None)
    return None if value is None else float(value)


def _date(unit: Any) -> Any:
    return unit.get("date") if isinstance(unit, dict) else getattr(unit, "date", None)


def content_words(text: str) -> set[str]:
    """Lower-cased content words with a crude plural strip, so 'dogs' matches 'dog'."""
    return {strip_plural(w) for w in tokens(text) if w not in SIGNAL_STOPWORDS}


def retrieval_scores(summaries: Sequence[Any], where: str = "summaries") -> list[float]:
    scores = []
    for i, unit in enumerate(summaries):
        s = _score_of(unit)
        if s is None or not math.isfinite(s):
            raise DataError(f"{where}[{i}]: retrieval 'score' missing or not a number (needed by score routers)")
        scores.append(s)
    return scores


def top1(summaries: Sequence[Any], where: str = "summaries") -> float:
    """The top-1 retrieval score (the first unit is the best: retrieval returns them in rank order)."""
    scores = retrieval_scores(summaries, where)
    return max(scores) if scores else NO_SUMMARY_SCORE


def question_form(question: str) -> dict[str, float]:
    q = question.lower().strip()
    words = tokens(q)
    first = words[0] if words else ""
    return {
        "when": float("when" in words or "what year" in q or "what date" in q or "what month" in q
                      or "how long ago" in q),
        "how_many": float("how many" in q or "how much" in q or "how often" in q),
        "list_like": float(bool(re.search(r"\b(what|which) (are|were|kinds?|types?|things|activities|books|places"
                                          r"|hobbies|ways|events)\b", q)) or " list" in q or "what all" in q
                           or "what else" in q),
        "yes_no": float(first in YES_NO_STARTS),
        "why": float(first == "why" or "reason" in words),
    }


def features(question: str, summaries: Sequence[Any], where: str = "record") -> dict[str, float]:
    """The serve-time features of one (question, summaries) pair, by name (see FEATURES)."""
    scores = retrieval_scores(summaries, f"{where}: summaries")
    ranked = sorted(scores, reverse=True)
    q_words = content_words(question)
    unit_words = [content_words(_text(u)) for u in summaries]
    union = set().union(*unit_words) if unit_words else set()
    denom = max(len(q_words), 1)
    out = {
        "top1": ranked[0] if ranked else NO_SUMMARY_SCORE,
        "mean_score": sum(scores) / len(scores) if scores else NO_SUMMARY_SCORE,
        "gap12": ranked[0] - ranked[1] if len(ranked) > 1 else 0.0,
        "overlap": len(q_words & union) / denom,  # content-word recall of the question in all summaries
        "overlap_best": max((len(q_words & w) / denom for w in unit_words), default=0.0),
        "n_summaries": float(len(summaries)),
        "q_words": math.log1p(len(tokens(question))),
        "has_date": float(any(_date(u) for u in summaries)),
    }
    out.update(question_form(question))
    return {name: float(out[name]) for name in FEATURES}


def feature_matrix(questions: Sequence[str], summaries: Sequence[Sequence[Any]]) -> np.ndarray:
    if len(questions) != len(summaries):
        raise ValueError(f"{len(questions)} questions but {len(summaries)} summary lists")
    return np.array([[features(q, s, f"record {i}")[n] for n in FEATURES]
                     for i, (q, s) in enumerate(zip(questions, summaries, strict=True))], dtype=np.float64)
