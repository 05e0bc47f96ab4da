"""Reading data files: UTF-8 text whose bad bytes are named by file and byte offset, and the one JSONL reader.

JSONL records are separated by "\\n" only. `str.splitlines()` also splits on U+2028, U+2029, \\x85, \\x0c, \\x1c-\\x1e
and a lone \\r, all of which `json.dumps(..., ensure_ascii=False)` writes raw inside a string: splitting on them
cuts a valid record in two. Every reader of line records (the label record store, the label dataset loader, the
tiermem conversation format) goes through `jsonl_records`.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tiermem.settings.errors import DataError

__all__ = ["check_text", "decode_utf8", "jsonl_lines", "jsonl_records", "read_utf8"]


def decode_utf8(data: bytes, path: str | Path, error: type[Exception] = DataError, bom_ok: bool = True) -> str:
    """`data` decoded as UTF-8 (a leading byte-order mark dropped when `bom_ok`); a byte that is not UTF-8 raises
    `error` naming the file, the byte offset in the file and the line."""
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
    """`value` (parsed JSON) when every string in it is text that UTF-8 can write; a lone surrogate (a JSON escape
    such as "\\ud800" with no partner) raises `error` naming `where` and the field's path, before anything is built
    from it (a record or page holding one could never be written)."""
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
    """(line number, parsed value) for each non-blank line; a line that is not JSON raises `error` naming the file
    and the line."""
    for number, line in jsonl_lines(text):
        try:
            yield number, check_text(json.loads(line), f"{path}: line {number}", error)
        except json.JSONDecodeError as exc:
            raise error(f"{path}: line {number}: not valid JSON: {exc}") from None
        except RecursionError:
            raise error(f"{path}: line {number}: JSON nested too deeply") from None
