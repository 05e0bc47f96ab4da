"""Text normalization, content words, sentence splitting, and deterministic quote -> turn linking."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tiermem.data.conversations import Turn

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is it its itself just let me more most my myself no nor not now
    of off on once only or other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up very was we were what
    when where which while who whom why will with would you your yours yourself yourselves im ive ill id youre
    youve its thats dont didnt doesnt isnt wasnt cant wont also really yeah yes oh hey hi wow thanks thank lot
    much many got get gets getting go going went gone like know think something things thing one ones way well
    s t d ll m re ve""".split()
)

_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-"})


def normalize(text: str) -> str:
    """Casefolded, punctuation-free, single-spaced: the form quotes and raw text are compared in."""
    text = unicodedata.normalize("NFKC", text).translate(_QUOTES).casefold()
    text = re.sub(r"'", "", text)  # "don't" == "dont"
    return " ".join(re.sub(r"[^\w\s]", " ", text).split())


def content_words(text: str) -> list[str]:
    return [w for w in normalize(text).split() if w not in STOPWORDS and (len(w) > 1 or w.isdigit())]


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
    """Find the raw turn a model-written quote came from, never trusting ids the model wrote.

    1. normalized exact match of the quote inside one turn (with or without its speaker prefix);
    2. else the turn sharing the most content words with the quote (or the fact when the quote is
       empty), if it shares at least half of them.
    `pages` are raw-store Page objects (anything with `.page_id` and `.turns`).
    """
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
