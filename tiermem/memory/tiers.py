"""One conversation's two tiers opened together: raw pages, summary units, the BM25 page index and the turn index."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import numpy as np

from tiermem.data.dates import parse_timestamp
from tiermem.memory.keyword import KeywordIndex
from tiermem.memory.raw_store import Page, RawPageStore
from tiermem.memory.summaries import RetrievedUnit, SummaryIndex
from tiermem.memory.turns import TurnHit, TurnIndex


@dataclass
class TwoTierMemory:
    conv_id: str
    raw: RawPageStore
    summaries: SummaryIndex
    keyword: KeywordIndex
    turns: TurnIndex | None = None  # None: a memory opened without its turn index (research ranks pages only)
    _query: tuple[str, np.ndarray] | None = None  # the last query's vector: summaries and turns embed it once

    def embed_query(self, query: str) -> np.ndarray:
        if self._query is None or self._query[0] != query:
            self._query = (query, self.summaries.embed([query])[0])
        return self._query[1]

    @classmethod
    def open(cls, conv_id: str, raw: RawPageStore, summaries: SummaryIndex,
             turn_vectors: np.ndarray | None = None) -> TwoTierMemory:
        pages = raw.pages(conv_id)
        return cls(conv_id, raw, summaries, KeywordIndex(pages), TurnIndex(pages, turn_vectors))

    def search_summaries(self, query: str, k: int) -> list[RetrievedUnit]:
        return self.summaries.search_vector(self.embed_query(query), k)

    def search_summaries_many(self, queries: list[str], k: int) -> list[list[RetrievedUnit]]:
        return self.summaries.search_many(queries, k)

    def search_pages(self, query: str, k: int) -> list[str]:
        return [page_id for page_id, _ in self.keyword.search(query, k)]

    def search_turns(self, query: str, k: int) -> list[TurnHit]:
        """The k best turns by BM25 and the turn embeddings fused (tiermem.memory.turns); [] without a turn index."""
        if self.turns is None or k <= 0:
            return []
        vector = self.embed_query(query) if self.turns.vectors is not None else None
        return self.turns.rank(query, vector, k)

    def pages_between(self, lo: date, hi: date) -> list[str]:
        """The pages holding a turn dated in [lo, hi] (days, inclusive), in conversation order."""
        out = []
        for page in self.raw.pages(self.conv_id):
            days = {m.date() for m in map(parse_timestamp, {t.timestamp for t in page.turns}) if m is not None}
            if any(lo <= d <= hi for d in days):
                out.append(page.page_id)
        return out

    def page(self, page_id: str) -> Page:
        return self.raw.get(page_id)

    def turn_page(self) -> dict[str, str]:
        """turn id -> page id, for evidence accounting."""
        return {t.turn_id: p.page_id for p in self.raw.pages(self.conv_id) for t in p.turns}

    def close(self) -> None:
        self.raw.close()
        self.summaries.close()
