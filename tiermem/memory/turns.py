"""Research that finds the turn: turns ranked by BM25 and embeddings fused, the best scored by the reader if given,
their pages read first (BM25 over whole pages lets a long page of small talk outrank the one line that answers)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tiermem.data.conversations import Turn
from tiermem.memory.raw_store import Page
from tiermem.memory.summaries import absolutize, day_of
from tiermem.memory.text import content_words

TURN_CANDIDATES = 36  # the turns research ranks (and a reader scores) per question: "the best few dozen"
RRF_K = 60  # reciprocal-rank fusion's constant (Cormack et al., 2009): a rank's weight is 1 / (RRF_K + rank)
TURN_VECTORS = "turns.npy"


def turn_text(turn: Turn) -> str:
    """What BM25 and the embedder see of a turn: who speaks and what they say."""
    return f"{turn.speaker}: {turn.text}"


def page_turns(pages: Sequence[Page]) -> list[tuple[str, Turn]]:
    """(page id, turn) for every turn piece of the pages, in order: the rows of the turn index and of `turns.npy`."""
    return [(p.page_id, t) for p in pages for t in p.turns]


@dataclass(frozen=True)
class TurnHit:
    page_id: str
    turn: Turn
    fused: float  # reciprocal-rank fusion of the BM25 and the embedding rank
    logit: float | None = None  # the reader's, when a reader scored it


class TurnIndex:
    """BM25 over turns and cosine over their vectors: ingested, or embedded on demand by `embed` (read turns, once)."""

    def __init__(self, pages: Sequence[Page], vectors: np.ndarray | None = None,
                 embed: Callable[[list[str]], np.ndarray] | None = None) -> None:
        import bm25s

        self.rows = page_turns(pages)
        if vectors is not None and vectors.shape[0] != len(self.rows):
            raise ValueError(f"turn index: {vectors.shape[0]} turn vectors for {len(self.rows)} turns")
        self.vectors = vectors
        self.embed = embed if vectors is None else None
        self._embedded = np.zeros(len(self.rows), dtype=bool)
        self._bm25: Any = None
        if self.rows:
            self._bm25 = bm25s.BM25()
            self._bm25.index([content_words(turn_text(t)) or [""] for _, t in self.rows], show_progress=False)

    @property
    def has_vectors(self) -> bool:
        return self.vectors is not None or self.embed is not None

    def _vectors(self, allowed: np.ndarray | None) -> np.ndarray | None:
        """The turn vectors, the rows `allowed` (default all) embedded first when they are made on demand."""
        if self.embed is None:
            return self.vectors
        todo = np.flatnonzero(~self._embedded & (True if allowed is None else allowed))
        if len(todo):
            fresh = np.asarray(self.embed([turn_text(self.rows[i][1]) for i in todo]), dtype=np.float32)
            if self.vectors is None:
                self.vectors = np.zeros((len(self.rows), fresh.shape[1]), dtype=np.float32)
            self.vectors[todo], self._embedded[todo] = fresh, True
        return self.vectors

    def _bm25_order(self, query: str, allowed: np.ndarray | None = None) -> list[int]:
        words = content_words(query)
        if self._bm25 is None or not words:
            return []
        scores = self._bm25.get_scores(words)
        order = np.argsort(-scores, kind="stable")
        if allowed is not None:
            order = order[allowed[order]]
        return [int(i) for i in order if scores[i] > 0]

    def rank(self, query: str, query_vector: np.ndarray | None = None, k: int = TURN_CANDIDATES,
             allowed: np.ndarray | None = None) -> list[TurnHit]:
        """The `k` best turns by reciprocal-rank fusion of BM25 and the embedding (either alone when the other has
        nothing); ties go to the earlier turn. `allowed` (one bool per row) leaves the other turns out."""
        fused: dict[int, float] = {}
        for rank, i in enumerate(self._bm25_order(query, allowed)):
            fused[i] = fused.get(i, 0.0) + 1.0 / (RRF_K + rank + 1)
        vectors = self._vectors(allowed) if query_vector is not None and len(self.rows) else None
        if vectors is not None:
            sims = vectors @ np.asarray(query_vector, dtype=np.float32).reshape(-1)
            order = np.argsort(-sims, kind="stable")
            if allowed is not None:
                order = order[allowed[order]]
            for rank, i in enumerate(order[: max(k * 4, 100)]):
                fused[int(i)] = fused.get(int(i), 0.0) + 1.0 / (RRF_K + rank + 1)
        best = sorted(fused, key=lambda i: (-fused[i], i))[:k]
        return [TurnHit(self.rows[i][0], self.rows[i][1], fused[i]) for i in best]


def reader_view(turn: Turn) -> str:
    """The reader's view of a turn, as the extractive answerer shows it a sentence: `date: speaker: text`."""
    return ": ".join(x for x in (day_of(turn.timestamp), turn.speaker, absolutize(turn.text, turn.timestamp)) if x)


def rescore(hits: Sequence[TurnHit], question: str, reader: Any) -> list[TurnHit]:
    """The hits scored by the reader (`logits(questions, texts)`) in one batch, best first; ties keep fused order."""
    if not hits:
        return []
    logits = reader.logits([question] * len(hits), [reader_view(h.turn) for h in hits])
    scored = [TurnHit(h.page_id, h.turn, h.fused, float(v)) for h, v in zip(hits, logits, strict=True)]
    return [scored[i] for i in sorted(range(len(scored)), key=lambda i: (-scored[i].logit, i))]  # type: ignore[operator]


def pages_by_turns(hits: Sequence[TurnHit]) -> list[str]:
    """The pages holding the hits, best first by the sum of their turns' fused scores."""
    score: dict[str, float] = {}
    for h in hits:
        score[h.page_id] = score.get(h.page_id, 0.0) + h.fused
    return sorted(score, key=lambda p: -score[p])
