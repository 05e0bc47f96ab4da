"""Credentials never reach a file or a log: URLs lose their `user:password@`, key-shaped strings are masked.

Used wherever a config or an endpoint is recorded: config.yaml and resume_fingerprint.json (via
tiermem.config.to_dict), LLM names in stats.json/report.md and the response cache, and httpx's request log.
The string rule itself (`redact_text`) lives in tiermem.errors, which masks every error line with it and imports
nothing of the project; it is re-exported here.
"""

from __future__ import annotations

import logging
from typing import Any

from tiermem.errors import MASK, redact_text

__all__ = ["MASK", "RedactingFilter", "install_log_filter", "redact", "redact_text", "redact_url"]


def redact_url(url: str | None) -> str | None:
    return None if url is None else redact_text(url)


def redact(obj: Any) -> Any:
    """A copy of nested dicts/lists with every string redacted."""
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
