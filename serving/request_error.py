"""The HTTP API's one error (a status and a message naming what is wrong) and the checks every body shares."""

from __future__ import annotations

from typing import Any


class RequestError(ValueError):
    def __init__(self, status: int, message: str, error_id: str | None = None) -> None:
        super().__init__(message)
        self.status, self.error_id = status, error_id


def check_text(text: str, name: str) -> None:
    """Text every tokenizer can take: valid Unicode. JSON's `\\ud800` escape decodes to a lone surrogate, which no
    UTF-8 encoder (a tokenizer, the server log) accepts."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RequestError(422, f"{name} holds a lone surrogate (U+{ord(text[exc.start]):04X}) at character "
                                f"{exc.start}: not a Unicode character; send valid text") from None


def checked_question(body: Any, fields: tuple[str, ...], needs: str, max_chars: int) -> str:
    """A JSON object of `fields` only (`needs`: what it must hold), and its `question`: non-empty valid text."""
    if not isinstance(body, dict):
        raise RequestError(400, f"body must be a JSON object with {needs}")
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise RequestError(422, f"unknown field(s) {unknown}; allowed: {', '.join(fields)}")
    question = body.get("question")
    if not isinstance(question, str) or not question.strip():
        raise RequestError(422, "'question' must be a non-empty string")
    check_text(question, "'question'")
    if len(question) > max_chars:
        raise RequestError(413, f"'question' has {len(question)} characters; the limit is {max_chars}")
    return question
