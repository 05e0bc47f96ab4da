"""Keyword retrieval over raw pages: BM25 from the `bm25s` library, built in memory when a memory opens."""

from __future__ import annotations

from collections.abc import Sequence

import bm25s
import numpy as np

from tiermem.memory.raw_store import Page
from tiermem.memory.text import content_words


class KeywordIndex:
    """BM25 over whole pages, tokenized with the same content-word rule the quote linker uses."""

    def __init__(self, pages: Sequence[Page]) -> None:
        self.page_ids = [p.page_id for p in pages]
        self._bm25: bm25s.BM25 | None = None
        docs = [content_words(_page_terms(p)) or [""] for p in pages]
        if docs:
            self._bm25 = bm25s.BM25()
            self._bm25.index(docs, show_progress=False)

    def search(self, query: str, k: int = 3, allowed: np.ndarray | None = None) -> list[tuple[str, float]]:
        """(page_id, score) best first; pages sharing no query term, or not `allowed` (a bool per page), left out."""
        words = content_words(query)
        if self._bm25 is None or not words or k <= 0:
            return []
        scores = self._bm25.get_scores(words)
        order = np.argsort(-scores, kind="stable")  # ties: earlier page first, deterministic
        if allowed is not None:
            order = order[allowed[order]]
        order = order[:k]
        return [(self.page_ids[int(i)], float(scores[i])) for i in order if scores[i] > 0]


def _page_terms(page: Page) -> str:
    # speakers and text per turn, each session date once (a date repeated per turn would swamp the term counts)
    stamps = dict.fromkeys(t.timestamp for t in page.turns)
    return "\n".join([*stamps, *(f"{t.speaker}: {t.text}" for t in page.turns)])
