"""Credentials never reach a file or a log: URLs lose their `user:password@`, key-shaped strings are masked.
Imports nothing of the project (tiermem.settings.errors masks every error line with it)."""

from __future__ import annotations

import logging
import re
from typing import Any

__all__ = ["MASK", "RedactingFilter", "install_log_filter", "redact", "redact_text", "redact_url"]

_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")
# Common API-key shapes (OpenAI sk-..., Hugging Face hf_..., bearer-like long tokens).
_KEYLIKE = re.compile(r"\b(sk-[A-Za-z0-9_-]{8,}|hf_[A-Za-z0-9]{8,})")
MASK = "***"


def redact_text(text: str) -> str:
    """`http://user:pw@host/v1` -> `http://***@host/v1`; key-shaped tokens -> `***`."""
    return _KEYLIKE.sub(MASK, _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text))


def redact_url(url: str | None) -> str | None:
    return None if url is None else redact_text(url)


def redact(obj: Any) -> Any:
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, dict):
        return {k: redact(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(redact(v) for v in obj)
    return obj


class RedactingFilter(logging.Filter):
    """Rewrites a record's message with credentials removed (httpx logs every request URL at INFO)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, ()
        return True


def install_log_filter(*names: str) -> None:
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) for f in logger.filters):
            logger.addFilter(RedactingFilter())
