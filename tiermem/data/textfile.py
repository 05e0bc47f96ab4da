"""Reading data files: UTF-8 text whose bad bytes are named by file and byte offset, the checked JSON file reader,
and the one JSONL reader (`jsonl_records`: records split on "\\n" only, never on U+2028 and its kin)."""

from __future__ import annotations

import codecs
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tiermem.settings.errors import DataError

__all__ = ["check_text", "decode_utf8", "jsonl_lines", "jsonl_records", "read_json_file", "read_utf8"]

MAX_JSON_BYTES = 2 << 30  # a data file larger than this is not one a loader reads into memory whole
MAX_JSON_DEPTH = 64  # the benchmark formats nest a few levels; deeper is no data file (and would recurse)


def decode_utf8(data: bytes, path: str | Path, error: type[Exception] = DataError, bom_ok: bool = True) -> str:
    """`data` as UTF-8 (a BOM dropped when `bom_ok`); a bad byte raises `error` naming file, byte offset and line."""
    skip = len(codecs.BOM_UTF8) if bom_ok and data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = skip + exc.start
        line = data.count(b"\n", 0, offset) + 1
        raise error(f"{path}: not UTF-8 text: byte 0x{data[offset]:02x} at byte offset {offset} (line {line}) "
                    f"is {exc.reason}; save the file as UTF-8") from None


def read_utf8(path: str | Path, error: type[Exception] = DataError, bom_ok: bool = True) -> str:
    return decode_utf8(Path(path).read_bytes(), path, error, bom_ok)


def check_text(value: Any, where: str, error: type[Exception] = DataError, at: str = "") -> Any:
    """`value` (parsed JSON) when UTF-8 can write every string in it; a lone surrogate ("\\ud800") raises `error`
    naming `where` and the field, before anything is built from it (a record holding one could never be written)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            code = f"U+{ord(value[exc.start]):04X}"
            raise error(f"{where}: field {at or '(top level)'!r} holds a lone surrogate ({code}) at character "
                        f"{exc.start}; not text") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key, where, error, at)
            check_text(item, where, error, f"{at}.{key}" if at else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_text(item, where, error, f"{at}[{i}]")
    return value


def jsonl_lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) for each non-blank line, split on "\\n" only (a trailing "\\r" is dropped)."""
    for number, line in enumerate(text.split("\n"), 1):
        if line.endswith("\r"):
            line = line[:-1]
        if line.strip():
            yield number, line


def jsonl_records(text: str, path: str | Path, error: type[Exception] = DataError) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for each non-blank line; a line not JSON raises `error` naming file and line."""
    for number, line in jsonl_lines(text):
        try:
            yield number, check_text(json.loads(line), f"{path}: line {number}", error)
        except json.JSONDecodeError as exc:
            raise error(f"{path}: line {number}: not valid JSON: {exc}") from None
        except RecursionError:
            raise error(f"{path}: line {number}: JSON nested too deeply") from None


def _depth(value: Any) -> int:
    """How deeply `value` (parsed JSON) nests, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth <= MAX_JSON_DEPTH and isinstance(item, (dict, list)):
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def read_json_file(path: str | Path, error: type[Exception] = DataError, what: str = "data file") -> Any:
    """The checked JSON of a file a loader picked: a regular file (a FIFO would block forever), at most MAX_JSON_BYTES,
    UTF-8, nested at most MAX_JSON_DEPTH deep, every string text; anything else raises `error` naming the file."""
    path = Path(path)
    try:  # opened without blocking, then checked on the open file: what is read is what was checked
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        gone = " (a link to a missing file)" if path.is_symlink() else ""
        raise error(f"{path}: no such {what}{gone}") from None
    except OSError as exc:
        raise error(f"{path}: cannot be read as a {what} ({exc.strerror})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_JSON_BYTES:
        os.close(fd)
        if stat.S_ISDIR(info.st_mode):
            raise error(f"{path}: is a directory, not a {what}")
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path}: not a regular file (a FIFO, socket or device), not a {what}")
        raise error(f"{path}: {info.st_size} bytes, more than a {what} may hold ({MAX_JSON_BYTES})")
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_JSON_BYTES + 1)
    deep = error(f"{path}: JSON nested too deeply (more than {MAX_JSON_DEPTH} levels); not a {what}")
    try:
        value = json.loads(decode_utf8(data, path, error))
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON: {exc}") from None
    except RecursionError:
        raise deep from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise deep
    return check_text(value, str(path), error)
