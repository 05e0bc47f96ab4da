"""JSON values inside an LLM reply: the one reader of them, a scan linear in the reply's length (read up to
MAX_REPLY_CHARS, at most MAX_FAILED_STARTS failed starts, each value decoded once)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

MAX_REPLY_CHARS = 100_000
MAX_FAILED_STARTS = 32
_STARTS = {"{": r"\{(?=\s*[\"}])", "[": r"\[(?=\s*[-\"\[\]{0-9tfn])"}
_START = {opens: re.compile("|".join(_STARTS[c] for c in opens)) for opens in ("{", "[", "{[")}
_DECODER = json.JSONDecoder()


def bounded_reply(text: str | None) -> str:
    """The part of a reply that is read: the first MAX_REPLY_CHARS characters (a warning says when it is cut)."""
    text = text or ""
    if len(text) > MAX_REPLY_CHARS:
        log.warning("an LLM reply of %d characters: only its first %d are read for JSON", len(text), MAX_REPLY_CHARS)
        return text[:MAX_REPLY_CHARS]
    return text


def json_values(text: str | None, opens: str = "{[", start: int = 0) -> Iterator[tuple[Any, int, int]]:
    """(value, start, end) of each non-overlapping JSON value in `text` from `start`, opening with one of `opens`."""
    text, starts = bounded_reply(text), _START[opens]
    failures, pos = 0, start
    while failures < MAX_FAILED_STARTS:
        match = starts.search(text, pos)
        if match is None:
            return
        at = match.start()
        try:
            value, end = _DECODER.raw_decode(text, at)
        except (json.JSONDecodeError, RecursionError):
            failures += 1
            pos = at + 1
            continue
        yield value, at, end
        pos = end


def first_json_object(text: str | None) -> dict[str, Any] | None:
    return next((value for value, _, _ in json_values(text, "{") if isinstance(value, dict)), None)
