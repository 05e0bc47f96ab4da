"""One conversation's two tiers opened together: raw pages, summary units, the BM25 page index and the turn index.
`as_of(turn_id)`: a view of only what came before that turn (docs/formats.md), BM25's term statistics excepted."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date

import numpy as np

from tiermem.data.dates import parse_timestamp
from tiermem.memory.keyword import KeywordIndex
from tiermem.memory.raw_store import Page, RawPageStore, StoreError
from tiermem.memory.summaries import RetrievedUnit, SummaryIndex, SummaryUnit
from tiermem.memory.text import content_words
from tiermem.memory.turns import RRF_K, TurnHit, TurnIndex
from tiermem.settings.errors import DataError


class History:
    """Where each turn stands in the conversation (its position among the pages' turns, in order)."""

    def __init__(self, pages: list[Page]) -> None:
        self.pages = pages
        self.position: dict[str, int] = {}
        for page in pages:
            for turn in page.turns:
                self.position.setdefault(turn.turn_id, len(self.position))
        self.page_first = np.array([self.position[p.turns[0].turn_id] for p in pages], dtype=np.int64)
        self.page_last = np.array([self.position[p.turns[-1].turn_id] for p in pages], dtype=np.int64)
        self.row_position = np.array([self.position[t.turn_id] for p in pages for t in p.turns], dtype=np.int64)
        self._unit_last: np.ndarray = np.zeros(0, dtype=np.int64)
        self.unit_terms: UnitTerms | None = None  # BM25 over the units, built on research's first use

    def cutoff(self, turn_id: str) -> int:
        if turn_id not in self.position:  # a question's turn the loader dropped or never had: bad data, named
            raise DataError(f"memory as of turn {turn_id!r}: the conversation's pages hold no such turn")
        return self.position[turn_id]

    def unit_last(self, summaries: SummaryIndex) -> np.ndarray:
        """Each unit's last source turn position (units added by write-back included; unknown turns: never)."""
        if len(self._unit_last) != len(summaries.units):
            never = np.iinfo(np.int64).max
            self._unit_last = np.array([max((self.position.get(t, never) for t in u.turn_ids), default=never)
                                        for u in summaries.units], dtype=np.int64)
        return self._unit_last


class UnitTerms(KeywordIndex):
    """BM25 over the summary units' text (ids in the `page_ids` slot of the page index it reuses)."""

    def __init__(self, units: list[SummaryUnit]) -> None:
        self.page_ids = [u.unit_id for u in units]
        self._bm25 = None
        if units:
            import bm25s

            self._bm25 = bm25s.BM25()
            self._bm25.index([content_words(u.text) or [""] for u in units], show_progress=False)


class PagesAsOf:
    """The raw page store as a question sees it: pages before its turn whole, the page it falls in cut there."""

    def __init__(self, store: RawPageStore, history: History, before: int) -> None:
        self.store, self.history, self.before = store, history, before
        self.db_path = store.db_path
        self._visible: list[Page] | None = None

    def get(self, page_id: str) -> Page:
        page = self.store.get(page_id)
        turns = tuple(t for t in page.turns if self.history.position[t.turn_id] < self.before)
        if not turns:
            raise StoreError(f"{self.db_path}: page {page_id!r} lies after the question's turn; memory as of the "
                             "question cannot read it")
        if len(turns) == len(page.turns):
            return page
        kept = sum(len(t.text) for t in turns) / max(1, sum(len(t.text) for t in page.turns))
        return Page(page.page_id, page.conv_id, page.index, turns, max(1, round(page.token_count * kept)))

    def get_many(self, page_ids: list[str]) -> list[Page]:
        return [self.get(pid) for pid in page_ids]

    def pages(self, conv_id: str | None = None) -> list[Page]:
        if self._visible is None:
            self._visible = [self.get(p.page_id) for p, first in zip(self.history.pages, self.history.page_first,
                                                                     strict=True) if first < self.before]
        return list(self._visible)


@dataclass
class TwoTierMemory:
    conv_id: str
    raw: RawPageStore | PagesAsOf
    summaries: SummaryIndex
    keyword: KeywordIndex
    turns: TurnIndex
    history: History
    _query: tuple[str, np.ndarray] | None = None  # the last query's vector: summaries and turns embed it once
    before: int | None = None  # as of: the turns at positions below this one; None: the whole history
    # "imported": the conversation's own units (research follows their provenance first); "built": by a summarizer
    tier1: str = "built"
    owner: bool = True  # False: a view (as_of), whose close() leaves the tiers open for the memory it came from

    def embed_query(self, query: str) -> np.ndarray:
        if self._query is None or self._query[0] != query:
            self._query = (query, self.summaries.embed([query])[0])
        return self._query[1]

    @classmethod
    def open(cls, conv_id: str, raw: RawPageStore, summaries: SummaryIndex, turn_vectors: np.ndarray | None = None,
             embed_turns: Callable[[list[str]], np.ndarray] | None = None) -> TwoTierMemory:
        """`embed_turns` (texts -> vectors): the turns' vectors made on demand, when none were ingested."""
        pages = raw.pages(conv_id)
        return cls(conv_id, raw, summaries, KeywordIndex(pages), TurnIndex(pages, turn_vectors, embed_turns),
                   History(pages))

    def as_of(self, turn_id: str | None) -> TwoTierMemory:
        """The memory a question asked at `turn_id` reads (that turn and every later one left out); None: all."""
        if turn_id is None:
            return dataclasses.replace(self, _query=None, owner=False)
        store = self.raw.store if isinstance(self.raw, PagesAsOf) else self.raw
        before = self.history.cutoff(turn_id)
        return dataclasses.replace(self, raw=PagesAsOf(store, self.history, before), _query=None, before=before,
                                   owner=False)

    def _units_allowed(self) -> np.ndarray | None:
        if self.before is None:
            return None
        return self.history.unit_last(self.summaries) < self.before

    def search_summaries(self, query: str, k: int) -> list[RetrievedUnit]:
        return self.summaries.search_vector(self.embed_query(query), k, self._units_allowed())

    def search_summaries_fused(self, query: str, k: int) -> list[RetrievedUnit]:
        """The k best units by RRF of dense and BM25 rankings (provenance search: a vague question's words count)."""
        dense = self.search_summaries(query, max(4 * k, 100))
        if self.history.unit_terms is None or len(self.history.unit_terms.page_ids) != len(self.summaries.units):
            self.history.unit_terms = UnitTerms(self.summaries.units)
        allowed = self._units_allowed()
        fused: dict[str, float] = {}
        for rank, unit in enumerate(dense):
            fused[unit.unit_id] = 1.0 / (RRF_K + rank + 1)
        for rank, (unit_id, _) in enumerate(self.history.unit_terms.search(query, max(4 * k, 100), allowed)):
            fused[unit_id] = fused.get(unit_id, 0.0) + 1.0 / (RRF_K + rank + 1)
        by_id = {u.unit_id: u for u in dense}
        best = sorted(fused, key=lambda uid: -fused[uid])[:k]
        return [by_id.get(uid) or self.summaries.retrieved(uid, fused[uid]) for uid in best]

    def search_pages(self, query: str, k: int) -> list[str]:
        allowed = None if self.before is None else self.history.page_last < self.before
        return [page_id for page_id, _ in self.keyword.search(query, k, allowed)]

    def search_turns(self, query: str, k: int) -> list[TurnHit]:
        """The k best turns by BM25 and the turn embeddings fused (tiermem.memory.turns)."""
        if k <= 0:
            return []
        vector = self.embed_query(query) if self.turns.has_vectors else None
        allowed = None if self.before is None else self.history.row_position < self.before
        return self.turns.rank(query, vector, k, allowed)

    def all_pages(self) -> list[Page]:
        """Every page this memory may read, in order (cut at the question in a view); read once, not per call."""
        if isinstance(self.raw, PagesAsOf):
            return self.raw.pages(self.conv_id)
        return list(self.history.pages)

    def visible_units(self) -> list[SummaryUnit]:
        """The summary units this memory may read (as of its question), in index order."""
        allowed = self._units_allowed()
        units = self.summaries.units
        return list(units) if allowed is None else [u for u, ok in zip(units, allowed, strict=True) if ok]

    def unit_count(self) -> int:
        allowed = self._units_allowed()
        return len(self.summaries) if allowed is None else int(allowed.sum())

    def page_count(self) -> int:
        return len(self.all_pages())

    def pages_between(self, lo: date, hi: date) -> list[str]:
        """The pages holding a turn dated in [lo, hi] (days, inclusive), in conversation order."""
        out = []
        for page in self.all_pages():
            days = {m.date() for m in map(parse_timestamp, {t.timestamp for t in page.turns}) if m is not None}
            if any(lo <= d <= hi for d in days):
                out.append(page.page_id)
        return out

    def page(self, page_id: str) -> Page:
        return self.raw.get(page_id)

    def close(self) -> None:
        if not self.owner:  # a view: the tiers belong to the memory it was made from
            return
        self.raw.close()
        self.summaries.close()
