"""One conversation's two tiers opened together: raw pages, summary units, and the BM25 page index."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from tiermem.data.dates import parse_timestamp
from tiermem.memory.keyword import KeywordIndex
from tiermem.memory.raw_store import Page, RawPageStore
from tiermem.memory.summaries import RetrievedUnit, SummaryIndex


@dataclass
class TwoTierMemory:
    conv_id: str
    raw: RawPageStore
    summaries: SummaryIndex
    keyword: KeywordIndex

    @classmethod
    def open(cls, conv_id: str, raw: RawPageStore, summaries: SummaryIndex) -> TwoTierMemory:
        return cls(conv_id, raw, summaries, KeywordIndex(raw.pages(conv_id)))

    def search_summaries(self, query: str, k: int) -> list[RetrievedUnit]:
        return self.summaries.search(query, k)

    def search_summaries_many(self, queries: list[str], k: int) -> list[list[RetrievedUnit]]:
        return self.summaries.search_many(queries, k)

    def search_pages(self, query: str, k: int) -> list[str]:
        return [page_id for page_id, _ in self.keyword.search(query, k)]

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
