"""Tier 2: raw pages of turns in an append-only SQLite store (triggers abort an update or delete; row sha256s let
`verify()` catch edits). A turn too long for a page is cut at word boundaries, each piece keeping the turn's fields."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tiermem.data.conversations import Turn
from tiermem.settings.errors import StoreError, UsageError

__all__ = ["Page", "RawPageStore", "StoreError", "content_hash", "open_sqlite", "paginate"]

TokenCounter = Callable[[str], int]


def open_sqlite(path: Path, what: str) -> sqlite3.Connection:
    """Connect and touch the schema, so a file that is not SQLite fails here, named, not on first use."""
    try:
        conn = sqlite3.connect(path, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path}: {what} is not a readable SQLite database ({exc}); delete it to rebuild") from None
    return conn


def root_hash(conn: sqlite3.Connection, query: str) -> str:
    """One hash over the rows' sha256 in the query's order: a manifest keeps it to catch rehashed edits and injected
    rows."""
    digest = hashlib.sha256()
    for (sha,) in conn.execute(query):
        digest.update(sha.encode())
    return digest.hexdigest()


def whitespace_tokens(text: str) -> int:
    return len(text.split())


def make_token_counter(spec: str) -> TokenCounter:
    """`whitespace` or a model spec whose tokenizer counts the tokens (tiermem.models.specs.token_counter)."""
    if spec == "whitespace":
        return whitespace_tokens
    from tiermem.models.specs import token_counter

    return token_counter(spec)


def render_turn(turn: Turn) -> str:
    return f"[{turn.turn_id}] ({turn.timestamp}) {turn.speaker}: {turn.text}"


@dataclass(frozen=True)
class Page:
    page_id: str
    conv_id: str
    index: int
    turns: tuple[Turn, ...]
    token_count: int

    @property
    def text(self) -> str:
        return "\n".join(render_turn(t) for t in self.turns)

    @property
    def turn_ids(self) -> list[str]:
        return [t.turn_id for t in self.turns]

    def turns_json(self) -> str:
        return json.dumps([asdict(t) for t in self.turns], ensure_ascii=False, sort_keys=True)

    @property
    def sha256(self) -> str:
        return content_hash(self.page_id, self.conv_id, self.index, self.turns_json(), self.token_count)


def content_hash(page_id: str, conv_id: str, index: int, turns_json: str, token_count: int) -> str:
    blob = json.dumps([page_id, conv_id, index, turns_json, token_count], ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _longest_fit(n: int, fits: Callable[[int], bool]) -> int:
    """The largest k in 1..n with fits(k) (0 if none), by doubling then bisection: O(log page) counts per piece."""
    if not fits(1):
        return 0
    good, step = 1, 2
    while step <= n and fits(step):
        good, step = step, step * 2
    bad = min(step, n + 1)
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if fits(mid) else (good, mid)
    return good


def split_turn(turn: Turn, count_tokens: TokenCounter, max_tokens: int) -> list[Turn]:
    """`turn` itself when its rendered text fits in `max_tokens`, else in-order pieces that do and join to its text."""
    if count_tokens(render_turn(turn)) <= max_tokens:
        return [turn]

    def piece(text: str) -> Turn:
        return Turn(turn.turn_id, turn.speaker, text, turn.timestamp, turn.session_id)

    def fits(text: str) -> bool:
        return count_tokens(render_turn(piece(text))) <= max_tokens

    words = re.findall(r"\s*\S+\s*", turn.text) or [turn.text]
    pieces: list[Turn] = []
    i = 0
    while i < len(words):
        k = _longest_fit(len(words) - i, lambda k, i=i: fits("".join(words[i:i + k])))
        if k:
            pieces.append(piece("".join(words[i:i + k])))
            i += k
            continue
        word = words[i]  # one word longer than a page: cut it by characters
        c = _longest_fit(len(word), lambda c, word=word: fits(word[:c]))
        if c == 0:
            raise UsageError(f"turn {turn.turn_id!r}: page_tokens={max_tokens} cannot hold even one character of "
                             "its text after the turn's id, date and speaker; raise memory.page_tokens")
        pieces.append(piece(word[:c]))
        words[i] = word[c:]
    return pieces


def paginate(conv_id: str, turns: Sequence[Turn], count_tokens: TokenCounter, max_tokens: int = 1000) -> list[Page]:
    """Pack turns in order into pages of at most `max_tokens` tokens, a longer turn split across pages (split_turn)."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    pages: list[Page] = []
    current: list[Turn] = []
    current_tokens = 0

    def close() -> None:
        pages.append(Page(f"{conv_id}:p{len(pages):04d}", conv_id, len(pages), tuple(current), current_tokens))

    for turn in (p for t in turns for p in split_turn(t, count_tokens, max_tokens)):
        # count the whole candidate page: tokenizers do not add up exactly across line joins
        candidate = "\n".join(render_turn(t) for t in [*current, turn])
        tokens = count_tokens(candidate)
        if current and tokens > max_tokens:
            close()
            current, tokens = [], count_tokens(render_turn(turn))
        current.append(turn)
        current_tokens = tokens
    if current:
        close()
    return pages


_SCHEMA = """
CREATE TABLE IF NOT EXISTS pages (
    page_id TEXT PRIMARY KEY,
    conv_id TEXT NOT NULL,
    page_index INTEGER NOT NULL,
    turns_json TEXT NOT NULL,
    token_count INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    UNIQUE (conv_id, page_index)
);
CREATE TRIGGER IF NOT EXISTS pages_no_update BEFORE UPDATE ON pages
BEGIN SELECT RAISE(ABORT, 'raw pages are immutable'); END;
CREATE TRIGGER IF NOT EXISTS pages_no_delete BEFORE DELETE ON pages
BEGIN SELECT RAISE(ABORT, 'raw pages are append-only'); END;
"""


class RawPageStore:
    """Append-only page store; one SQLite file (WAL)."""

    def __init__(self, db_path: str | Path) -> None:
        self.db_path = Path(db_path)
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = open_sqlite(self.db_path, "the tier-2 page store")
        try:
            self._conn.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.db_path}: not a tier-2 page store ({exc})") from None
        self._cache: dict[str, Page] = {}
        self._lock = threading.Lock()  # one connection shared by threads (concurrent answering)
        # page id -> sha256 seen by verify(): later reads are checked against it, even if the stored hash is rewritten
        self._trusted: dict[str, str] | None = None

    def append(self, pages: Iterable[Page]) -> None:
        """Insert pages in one transaction: all of them or none."""
        rows = [(p.page_id, p.conv_id, p.index, p.turns_json(), p.token_count, p.sha256) for p in pages]
        try:
            with self._lock, self._conn:
                self._conn.executemany("INSERT INTO pages VALUES (?, ?, ?, ?, ?, ?)", rows)
        except sqlite3.IntegrityError as exc:
            raise ValueError(f"{self.db_path}: cannot append pages ({exc}); pages are never overwritten") from None

    def _row_to_page(self, row: tuple) -> Page:
        page_id, conv_id, index, turns_json, token_count, sha = row
        actual = content_hash(page_id, conv_id, index, turns_json, token_count)
        trusted = self._trusted.get(page_id) if self._trusted is not None else sha
        if actual != sha or actual != trusted:
            raise StoreError(f"{self.db_path}: page {page_id!r} changed since it was written or verified "
                             "(tier-2 integrity); rebuild this memory")
        turns = tuple(Turn(**t) for t in json.loads(turns_json))
        return Page(page_id, conv_id, index, turns, token_count)

    def get(self, page_id: str) -> Page:
        page = self._cache.get(page_id)
        if page is None:
            with self._lock:
                row = self._conn.execute("SELECT * FROM pages WHERE page_id = ?", (page_id,)).fetchone()
            if row is None:
                raise KeyError(f"{self.db_path}: no page {page_id!r}")
            page = self._cache[page_id] = self._row_to_page(row)
        return page

    def get_many(self, page_ids: Iterable[str]) -> list[Page]:
        return [self.get(pid) for pid in page_ids]

    def pages(self, conv_id: str | None = None) -> list[Page]:
        sql, args = "SELECT * FROM pages ORDER BY conv_id, page_index", ()
        if conv_id is not None:
            sql, args = "SELECT * FROM pages WHERE conv_id = ? ORDER BY page_index", (conv_id,)
        with self._lock:
            rows = self._conn.execute(sql, args).fetchall()
        return [self._row_to_page(r) for r in rows]

    def __len__(self) -> int:
        return self._conn.execute("SELECT COUNT(*) FROM pages").fetchone()[0]

    def verify(self, expected_pages: dict[str, int] | None = None) -> list[str]:
        """Problems found (empty: intact): ids of pages not matching their sha256, `<page id> (missing)` for pages gone
        (index gaps, fewer than `expected_pages[conv_id]`). Later reads are checked against the hashes seen here."""
        bad: list[str] = []
        trusted: dict[str, str] = {}
        indices: dict[str, list[int]] = {}
        with self._lock:
            rows = self._conn.execute("SELECT * FROM pages ORDER BY conv_id, page_index").fetchall()
        for page_id, conv_id, index, turns_json, token_count, sha in rows:
            indices.setdefault(conv_id, []).append(index)
            if content_hash(page_id, conv_id, index, turns_json, token_count) != sha:
                bad.append(page_id)
            else:
                trusted[page_id] = sha
        for conv_id in sorted(set(indices) | set(expected_pages or {})):
            have = set(indices.get(conv_id, []))
            n = max((expected_pages or {}).get(conv_id, 0), max(have, default=-1) + 1)
            bad += [f"{conv_id}:p{i:04d} (missing)" for i in range(n) if i not in have]
        self._trusted = trusted
        self._cache.clear()
        return bad

    def root_hash(self) -> str:
        return root_hash(self._conn, "SELECT sha256 FROM pages ORDER BY conv_id, page_index")

    def close(self) -> None:
        self._conn.close()
