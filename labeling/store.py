"""Resumable record store: one fsynced JSON line per record; a torn line is cut off on reopening."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tiermem.data.textfile import decode_utf8, jsonl_records
from tiermem.runs.safe_io import open_nofollow
from tiermem.settings.errors import StoreError

Key = tuple[str, str]


def record_key(record: dict[str, Any]) -> Key:
    return (str(record["conv_id"]), str(record["qid"]))


def _decode(data: bytes, path: Path) -> dict[Key, dict[str, Any]]:
    """key -> record (the newest one per key) from whole record lines."""
    records: dict[Key, dict[str, Any]] = {}
    text = decode_utf8(data, path, StoreError, bom_ok=False)
    for lineno, record in jsonl_records(text, path, StoreError):
        if not isinstance(record, dict) or "conv_id" not in record or "qid" not in record:
            raise StoreError(f"{path}: line {lineno}: corrupt record line (not a record with conv_id "
                             "and qid); delete the file to relabel")
        records[record_key(record)] = record
    return records


def read_records(path: str | Path) -> dict[Key, dict[str, Any]]:
    """The committed records of another run's store (label-merge), read without touching the file: a torn last
    line is skipped, not cut off."""
    path = Path(path)
    if not path.is_file():
        return {}
    data = path.read_bytes()
    return _decode(data[: data.rfind(b"\n") + 1], path)


class RecordStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        if self.path.exists() and not self.path.is_file():
            raise StoreError(f"{self.path}: the record store must be a file (it is a directory or device)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.torn_lines = 0
        self._records: dict[Key, dict[str, Any]] = {}
        self._load()
        # held open for appends; never through a link planted at the records file
        self._fh = os.fdopen(open_nofollow(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a", encoding="utf-8")

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        good_end = data.rfind(b"\n") + 1
        if good_end < len(data):
            # A torn final line from a killed writer: drop it so the next append starts on a fresh line.
            self.torn_lines = 1
            fd = open_nofollow(self.path, os.O_WRONLY)
            try:
                os.ftruncate(fd, good_end)
                os.fsync(fd)
            finally:
                os.close(fd)
        self._records = _decode(data[:good_end], self.path)

    def __contains__(self, key: Key) -> bool:
        return key in self._records

    def __len__(self) -> int:
        return len(self._records)

    def get(self, key: Key) -> dict[str, Any] | None:
        return self._records.get(key)

    def done(self, key: Key, retry_errors: bool = True) -> bool:
        """True when the key needs no more work (committed, and not an error to retry)."""
        record = self._records.get(key)
        return record is not None and not (retry_errors and record.get("error"))

    def put(self, record: dict[str, Any]) -> None:
        key = record_key(record)
        old = self._records.get(key)
        if old is not None and not old.get("error"):
            raise ValueError(f"record {key} is already committed; refusing a duplicate")
        self._fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._records[key] = record

    def records(self) -> Iterator[dict[str, Any]]:
        return iter(list(self._records.values()))

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> RecordStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
