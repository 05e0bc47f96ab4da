"""Tier 1: summary units linked to the raw pages and turns they came from, with dense retrieval. Units and their
embeddings live in one SQLite file (a write-back is one transaction); the matrix is searched in memory."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tiermem.data.dates import parse_timestamp
from tiermem.data.records import Turn
from tiermem.llm import LLM, LLMError
from tiermem.memory.raw_store import Page, StoreError, open_sqlite, root_hash
from tiermem.memory.text import best_overlap_turn, content_words, split_sentences
from tiermem.settings.errors import ConfigError, UsageError


class Embedder(Protocol):
    """What SentenceTransformer offers; anything with this `encode` works."""

    def encode(self, sentences: list[str], **kwargs: Any) -> Any: ...


class HashingEmbedder:
    """Model-free content-word vectors hashed into `dim` buckets (`memory.embedder=hashing`), no Python `hash`."""

    def __init__(self, dim: int = 512) -> None:
        self.dim = dim

    def encode(self, sentences: list[str], **kwargs: Any) -> np.ndarray:
        out = np.zeros((len(sentences), self.dim), dtype=np.float32)
        for row, text in enumerate(sentences):
            for word in content_words(text):
                bucket = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
                out[row, bucket % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


def load_embedder_spec(spec: str) -> Embedder:
    if spec == "hashing":
        return HashingEmbedder()
    from tiermem.models.specs import load_embedder

    return load_embedder(spec)


@dataclass
class SummaryUnit:
    unit_id: str
    text: str
    page_ids: list[str]
    turn_ids: list[str]
    date: str | None
    origin: str  # "extractive" | "llm" | "imported" | "writeback" | "writeback-update"
    # who speaks in the turns it came from (data, never parsed back out of the text): the person guard reads it
    speakers: list[str] = field(default_factory=list)


@dataclass
class RetrievedUnit:
    unit_id: str
    text: str
    score: float
    page_ids: list[str]
    turn_ids: list[str]
    date: str | None
    speakers: list[str] = field(default_factory=list)


_NOT_NAMES = {"i", "i'm", "i've", "i'll", "i'd"}


def _day(moment: datetime) -> str:
    return f"{moment.day} {moment.strftime('%B %Y')}"


def day_of(timestamp: str) -> str | None:
    """An absolute day ('8 May 2023') from a turn's timestamp; None when it names no day (guards direct callers)."""
    moment = parse_timestamp(timestamp)
    return _day(moment) if moment else None


_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_RELATIVE = re.compile(
    r"\b(yesterday|today|tonight|this morning|last night|last (?:week|weekend|month|year)|"
    r"next (?:week|weekend|month|year)|last (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday))\b",
    re.IGNORECASE,
)


def absolutize(text: str, timestamp: str) -> str:
    """'yesterday' -> 'yesterday (7 May 2023)', so an extracted sentence keeps its meaning out of its session."""
    now = parse_timestamp(timestamp)
    if now is None:
        return text

    def resolve(match: re.Match[str]) -> str:
        try:
            return f"{match.group(0)} ({absolute(match.group(0).lower())})"
        except OverflowError:  # a day before 0001-01-01 or after 9999-12-31: the phrase stays as it is
            return match.group(0)

    def absolute(key: str) -> str:
        if key == "yesterday" or key == "last night":
            when = _day(now - timedelta(days=1))
        elif key in ("today", "tonight", "this morning"):
            when = _day(now)
        elif key == "last year":
            when = str(now.year - 1)
        elif key == "next year":
            when = str(now.year + 1)
        elif key.startswith("last ") and key[5:] in _WEEKDAYS:
            back = (now.weekday() - _WEEKDAYS.index(key[5:])) % 7 or 7
            when = _day(now - timedelta(days=back))
        else:  # last/next week, weekend, month: the span named relative to the session day
            direction, unit = key.split()
            when = f"the {unit} {'before' if direction == 'last' else 'after'} {_day(now)}"
        return when

    return _RELATIVE.sub(resolve, text)


def unit_hash(unit: SummaryUnit, embedding: bytes) -> str:
    blob = json.dumps([unit.unit_id, unit.text, unit.page_ids, unit.turn_ids, unit.date, unit.origin,
                       unit.speakers], ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8") + embedding).hexdigest()


class SummaryIndex:
    """Summary units + normalized embeddings in `<directory>/summaries.db`; cosine top-k search."""

    def __init__(self, directory: str | Path, embedder: Embedder) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.embedder = embedder
        self.path = self.directory / "summaries.db"
        self._conn = open_sqlite(self.path, "the tier-1 summary index")
        try:
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS units (unit_id TEXT PRIMARY KEY, text TEXT NOT NULL, page_ids TEXT NOT "
                "NULL, turn_ids TEXT NOT NULL, date TEXT, origin TEXT NOT NULL, speakers TEXT NOT NULL, "
                "embedding BLOB NOT NULL, sha256 TEXT NOT NULL)"
            )
            # id counters kept with the tier (write-back ids): never derived from a count of units
            self._conn.execute("CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)")
            rows = self._conn.execute("SELECT unit_id, text, page_ids, turn_ids, date, origin, speakers, embedding, "
                                      "sha256 FROM units ORDER BY rowid").fetchall()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: not a tier-1 summary index of this version ({exc}); "
                             "delete the memory directory and ingest again") from None
        self.units: list[SummaryUnit] = []
        vectors, bad = [], []
        for uid, text, pids, tids, date, origin, speakers, blob, sha in rows:
            unit = SummaryUnit(uid, text, json.loads(pids), json.loads(tids), date, origin, json.loads(speakers))
            if unit_hash(unit, blob) != sha:
                bad.append(uid)
            self.units.append(unit)
            vectors.append(np.frombuffer(blob, dtype=np.float32))
        if bad:  # tier 1 is what the router reads: edited or injected text must never reach it
            raise StoreError(f"{self.path}: tier-1 integrity check failed (units changed outside the index: {bad})")
        self._position = {u.unit_id: i for i, u in enumerate(self.units)}
        self.matrix = np.stack(vectors) if vectors else np.zeros((0, 0), dtype=np.float32)

    def embed(self, texts: Sequence[str], max_tokens: int | None = None, progress: bool = False) -> np.ndarray:
        """Unit vectors; `max_tokens` caps what a transformer embedder reads of each; `progress`: its bar."""
        limit = getattr(self.embedder, "max_seq_length", None)
        if max_tokens is not None and limit is not None:
            self.embedder.max_seq_length = min(limit, max_tokens)
        try:
            vectors = self.embedder.encode(
                list(texts), batch_size=64, normalize_embeddings=True, convert_to_numpy=True,
                show_progress_bar=progress,
            )
        finally:
            if max_tokens is not None and limit is not None:
                self.embedder.max_seq_length = limit
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-12)

    def _check_dim(self, vectors: np.ndarray) -> None:
        if self.matrix.size and vectors.shape[1] != self.matrix.shape[1]:
            raise UsageError(
                f"{self.directory}: embedder gives {vectors.shape[1]}-dim vectors but the index holds "
                f"{self.matrix.shape[1]}-dim ones; rebuild the index with one embedder"
            )

    def add(self, units: Sequence[SummaryUnit], progress: bool = False) -> None:
        if not units:
            return
        dup = [u.unit_id for u in units if u.unit_id in self._position]
        if dup or len({u.unit_id for u in units}) != len(units):
            raise ValueError(f"{self.directory}: duplicate summary unit id(s) {dup or [u.unit_id for u in units]}")
        vectors = self.embed([u.text for u in units], progress=progress)
        self._check_dim(vectors)
        with self._conn:
            self._conn.executemany(
                "INSERT INTO units (unit_id, text, page_ids, turn_ids, date, origin, speakers, embedding, sha256) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(u.unit_id, u.text, json.dumps(u.page_ids), json.dumps(u.turn_ids), u.date, u.origin,
                  json.dumps(u.speakers), v.tobytes(), unit_hash(u, v.tobytes()))
                 for u, v in zip(units, vectors, strict=True)],
            )
        for u in units:
            self._position[u.unit_id] = len(self.units)
            self.units.append(u)
        self.matrix = vectors if not self.matrix.size else np.vstack([self.matrix, vectors])

    def replace(self, unit: SummaryUnit) -> None:
        """Overwrite a unit in place (write-back `update`); Tier 1 is mutable, Tier 2 never is."""
        i = self._position[unit.unit_id]
        vector = self.embed([unit.text])
        self._check_dim(vector)
        with self._conn:
            self._conn.execute(
                "UPDATE units SET text=?, page_ids=?, turn_ids=?, date=?, origin=?, speakers=?, embedding=?, "
                "sha256=? WHERE unit_id=?",
                (unit.text, json.dumps(unit.page_ids), json.dumps(unit.turn_ids), unit.date, unit.origin,
                 json.dumps(unit.speakers), vector[0].tobytes(), unit_hash(unit, vector[0].tobytes()), unit.unit_id),
            )
        self.units[i] = unit
        self.matrix[i] = vector[0]

    def new_unit_id(self, prefix: str) -> str:
        """`prefix` + the next number of a counter in this index: never reused, whatever was updated or replaced (a
        unit count would be). An index from before the counter continues above its highest such id."""
        row = self._conn.execute("SELECT value FROM counters WHERE name=?", (prefix,)).fetchone()
        pattern = re.compile(re.escape(prefix) + r"(\d+)")
        n = row[0] if row else max((int(m.group(1)) + 1 for u in self.units if (m := pattern.fullmatch(u.unit_id))),
                                   default=0)
        while f"{prefix}{n:04d}" in self._position:  # an id made by hand or by an older version
            n += 1
        with self._conn:
            self._conn.execute("INSERT OR REPLACE INTO counters (name, value) VALUES (?, ?)", (prefix, n + 1))
        return f"{prefix}{n:04d}"

    def get(self, unit_id: str) -> SummaryUnit:
        return self.units[self._position[unit_id]]

    def root_hash(self) -> str:
        return root_hash(self._conn, "SELECT sha256 FROM units ORDER BY rowid")

    def __len__(self) -> int:
        return len(self.units)

    def search_vector(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[RetrievedUnit]:
        """The k best units by cosine; `allowed` (one bool per unit) leaves the others out (memory as of a turn)."""
        if not self.units or k <= 0:
            return []
        query = query.reshape(-1)
        if query.shape[0] != self.matrix.shape[1]:
            raise UsageError(f"{self.directory}: query vector has {query.shape[0]} dims, the index "
                             f"{self.matrix.shape[1]}; use the embedder the index was built with")
        scores = self.matrix @ query
        # stable sort on -score: ties keep insertion order, so results are deterministic
        order = np.argsort(-scores, kind="stable")
        if allowed is not None:
            order = order[allowed[order]]
        return [self.retrieved(self.units[int(i)].unit_id, float(scores[i])) for i in order[:k]]

    def retrieved(self, unit_id: str, score: float) -> RetrievedUnit:
        u = self.get(unit_id)
        return RetrievedUnit(u.unit_id, u.text, score, list(u.page_ids), list(u.turn_ids), u.date, list(u.speakers))

    def search(self, query: str, k: int = 5) -> list[RetrievedUnit]:
        return self.search_vector(self.embed([query])[0], k)

    def close(self) -> None:
        self._conn.close()


# ---------------------------------------------------------------------------------------------- summarizers


@dataclass
class ExtractiveSummarizer:
    """Keeps each page's most informative sentences (a budget per page): scored by distinct content words, names and
    numbers weighted up, questions and small talk low; kept in order, one unit each, prefixed by the speaker and with
    relative dates made absolute so they read standalone."""

    keep_ratio: float = 0.3
    max_units_per_page: int = 16
    min_content_words: int = 3
    name: str = field(default="extractive", init=False)

    def __post_init__(self) -> None:
        if not 0 < self.keep_ratio <= 1:
            raise ValueError(f"keep_ratio must be in (0, 1], got {self.keep_ratio}")

    @staticmethod
    def score(sentence: str) -> float:
        words = content_words(sentence)
        tokens = re.findall(r"[A-Za-z][\w'-]*", sentence)[1:]  # the first word is capitalized anyway
        names = sum(1 for w in tokens if w[0].isupper() and w.lower() not in _NOT_NAMES)
        numbers = len(re.findall(r"\b\d[\d,.:/]*\b", sentence))
        score = len(set(words)) + 1.5 * names + 2.0 * numbers
        return score * 0.5 if sentence.rstrip().endswith("?") else score

    def summarize_pages(self, pages: Sequence[Page]) -> list[SummaryUnit]:
        units: list[SummaryUnit] = []
        for page in pages:
            candidates = []  # (position, turn, sentence)
            for turn in page.turns:
                for sentence in split_sentences(turn.text):
                    if len(content_words(sentence)) >= self.min_content_words:
                        candidates.append((len(candidates), turn, sentence))
            budget = min(self.max_units_per_page, max(1, round(self.keep_ratio * len(candidates))))
            ranked = sorted(candidates, key=lambda c: (-self.score(c[2]), c[0]))[:budget]
            for j, (_, turn, sentence) in enumerate(sorted(ranked, key=lambda c: c[0])):
                text = f"{turn.speaker}: {absolutize(sentence, turn.timestamp)}"
                units.append(SummaryUnit(f"{page.page_id}:u{j:03d}", text, [page.page_id],
                                         [turn.turn_id], day_of(turn.timestamp), "extractive", [turn.speaker]))
        return units


def speakers_of(turns: Iterable[Turn]) -> list[str]:
    return list(dict.fromkeys(t.speaker for t in turns if t.speaker))


FACT_SYSTEM = (
    "You extract memory facts from a conversation excerpt. Write one fact per line, starting with '- '. "
    "Each fact must stand alone: use full names instead of pronouns and absolute dates instead of relative ones "
    "(convert 'yesterday' or 'last week' using the date shown on the turn). End each fact with the ids of the turns "
    "it comes from in square brackets, e.g. [D1:3]. Write nothing else."
)


@dataclass
class FactParse:
    units: list[SummaryUnit]
    unlinked_ids: int  # turn ids the model wrote that are not on the page (ignored, counted)
    parse_failures: int  # pages whose output held no fact line


@dataclass
class LLMFactSummarizer:
    """LLM facts per page; a fact with no valid model-written turn id links by keyword overlap, else to the page."""

    llm: LLM
    max_tokens: int = 512
    name: str = field(default="llm", init=False)
    stats: dict[str, int] = field(default_factory=lambda: {"input_tokens": 0, "output_tokens": 0, "llm_calls": 0,
                                                            "unlinked_ids": 0, "parse_failures": 0})

    @staticmethod
    def messages(page: Page) -> list[dict[str, str]]:
        return [{"role": "system", "content": FACT_SYSTEM},
                {"role": "user", "content": f"Conversation excerpt:\n{page.text}\n\nFacts:"}]

    def summarize_pages(self, pages: Sequence[Page]) -> list[SummaryUnit]:
        results = self.llm.chat_many([self.messages(p) for p in pages], max_tokens=self.max_tokens, temperature=0.0)
        units: list[SummaryUnit] = []
        for page, res in zip(pages, results, strict=True):
            if isinstance(res, LLMError):
                raise LLMError(f"summarizing page {page.page_id}: {res}")
            self.stats["llm_calls"] += 1
            self.stats["input_tokens"] += res.input_tokens
            self.stats["output_tokens"] += res.output_tokens
            parsed = parse_facts(res.text, page)
            self.stats["unlinked_ids"] += parsed.unlinked_ids
            self.stats["parse_failures"] += parsed.parse_failures
            units.extend(parsed.units)
        return units


_FACT_LINE = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s*(.+?)\s*$")
_ID_GROUP = re.compile(r"\[([^\[\]]*)\]\s*\.?\s*$")


def parse_facts(text: str, page: Page) -> FactParse:
    on_page = {t.turn_id: t for t in page.turns}
    units: list[SummaryUnit] = []
    unlinked = 0
    for line in text.splitlines():  # an LLM reply (text, not records): any line break ends a fact
        match = _FACT_LINE.match(line)
        if not match:
            continue
        fact = match.group(1)
        ids: list[str] = []
        group = _ID_GROUP.search(fact)
        if group:
            fact = fact[: group.start()].rstrip()
            for tid in re.split(r"[,;\s]+", group.group(1)):
                if tid in on_page:
                    ids.append(tid)
                elif tid:
                    unlinked += 1
        if len(content_words(fact)) == 0:
            continue
        if not ids:
            turn = best_overlap_turn(fact, page.turns)
            ids = [turn.turn_id] if turn else [t.turn_id for t in page.turns]
        ids = list(dict.fromkeys(ids))
        units.append(SummaryUnit(f"{page.page_id}:u{len(units):03d}", fact, [page.page_id], ids,
                                 day_of(on_page[ids[0]].timestamp), "llm", speakers_of(on_page[i] for i in ids)))
    return FactParse(units, unlinked, 0 if units else 1)


def build_summarizer(kind: str, llm: LLM | None = None, keep_ratio: float = 0.3, max_units_per_page: int = 16,
                     max_tokens: int = 512) -> ExtractiveSummarizer | LLMFactSummarizer:
    if kind == "extractive":
        return ExtractiveSummarizer(keep_ratio, max_units_per_page)
    if kind == "llm":
        if llm is None:
            raise ConfigError("the llm summarizer needs an LLM (memory.summarizer=llm with an llm config)")
        return LLMFactSummarizer(llm, max_tokens)
    raise ValueError(f"unknown summarizer {kind!r}; expected 'extractive' or 'llm'")
