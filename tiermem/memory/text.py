"""Text normalization, content words, sentence splitting, and deterministic quote -> turn linking."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tiermem.data.conversations import Turn
from tiermem.text.words import MEMORY_STOPWORDS, normalize


def content_words(text: str) -> list[str]:
    return [w for w in normalize(text).split() if w not in MEMORY_STOPWORDS and (len(w) > 1 or w.isdigit())]


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_PHOTO = re.compile(r"\s*(\[shares a photo: [^\]]*\])\s*$")


def split_sentences(text: str) -> list[str]:
    """Sentences of one turn; a trailing `[shares a photo: ...]` is its own sentence."""
    photo = _PHOTO.search(text)
    body = text[: photo.start()] if photo else text
    sentences = [s.strip() for s in _SENTENCE_END.split(body) if s.strip()]
    return sentences + ([photo.group(1)] if photo else [])


def _turn_words(turn: Turn) -> set[str]:
    return set(content_words(f"{turn.speaker} {turn.text}"))


def best_overlap_turn(text: str, turns: Iterable[Turn], min_share: float = 0.5) -> Turn | None:
    """The turn sharing the most content words with `text`, if it shares at least `min_share` of them."""
    words = set(content_words(text))
    if not words:
        return None
    best, best_hits = None, 0
    for turn in turns:
        hits = len(words & _turn_words(turn))
        if hits > best_hits:  # strict: ties go to the earliest turn
            best, best_hits = turn, hits
    return best if best is not None and best_hits >= min_share * len(words) else None


@dataclass(frozen=True)
class QuoteLink:
    page_id: str
    turn_id: str
    method: str  # "exact" (normalized substring of a turn) | "overlap" (>= half the content words)


def link_quote(quote: str, pages: Sequence[object], fact: str = "") -> QuoteLink | None:
    """The raw turn a model-written quote came from (never trusting ids the model wrote): the one holding it exactly,
    else the one sharing at least half of its content words (of `fact`'s when the quote is empty)."""
    needle = normalize(quote)
    if len(needle) >= 3 and content_words(quote):
        for page in pages:
            for turn in page.turns:  # type: ignore[attr-defined]
                if needle in normalize(f"{turn.speaker}: {turn.text}"):
                    return QuoteLink(page.page_id, turn.turn_id, "exact")  # type: ignore[attr-defined]
    owner = {t.turn_id: p.page_id for p in pages for t in p.turns}  # type: ignore[attr-defined]
    turns = [t for p in pages for t in p.turns]  # type: ignore[attr-defined]
    turn = best_overlap_turn(quote if content_words(quote) else fact, turns)
    return QuoteLink(owner[turn.turn_id], turn.turn_id, "overlap") if turn else None
