"""Persistent SQLite response cache: a rerun of the same calls makes no new calls."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

from tiermem.settings.errors import StoreError


class ResponseCache:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        if self.path.is_dir():
            raise StoreError(f"{self.path}: LLM cache path is a directory, not a SQLite file")
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: the LLM response cache is not a readable SQLite database ({exc}); "
                             "delete it (responses are only a cache)") from None

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)",
                             (key, json.dumps(value, ensure_ascii=False)))

    def delete(self, key: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM responses WHERE key = ?", (key,))

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
