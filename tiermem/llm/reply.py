"""An OpenAI-compatible endpoint's reply body read as a chat completion, or MalformedReply saying why it is not one:
every field used is checked here (the openai client builds its objects without validation)."""

from __future__ import annotations

import json
from typing import Any


class MalformedReply(ValueError):
    """A 200 whose body is no chat completion; the caller retries it, then records it as an LLMError."""


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise MalformedReply(f"{name} is {type(value).__name__}, not a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # JSON's \ud800 escape: no UTF-8 writer (a record, the cache) takes it
        raise MalformedReply(f"{name} holds a lone surrogate at character {exc.start}") from None
    return value


def _count(usage: dict[str, Any], name: str) -> int:
    value = usage.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MalformedReply(f"usage.{name} is {value!r}, not a token count")
    return value


def _logprobs(choice: dict[str, Any]) -> list[dict[str, float]] | None:
    block = choice.get("logprobs")
    content = block.get("content") if isinstance(block, dict) else None
    if not content:
        return None
    if not isinstance(content, list):
        raise MalformedReply("choices[0].logprobs.content is not a list")
    out = []
    for i, pos in enumerate(content):
        alternatives = pos.get("top_logprobs") if isinstance(pos, dict) else None
        entries = [*(alternatives or []), pos]
        row: dict[str, float] = {}
        for entry in entries:
            if not (isinstance(entry, dict) and isinstance(entry.get("token"), str)
                    and isinstance(entry.get("logprob"), (int, float)) and not isinstance(entry.get("logprob"), bool)):
                raise MalformedReply(f"choices[0].logprobs.content[{i}] holds an entry without token and logprob")
            row[_text(entry["token"], f"choices[0].logprobs.content[{i}].token")] = float(entry["logprob"])
        out.append(row)
    return out


def chat_reply(body: bytes, content_type: str, logprobs: bool
               ) -> tuple[str, int | None, int | None, list[dict[str, float]] | None]:
    """(text, prompt tokens, completion tokens, top logprobs per position) of a chat completion; no usage: None."""
    try:
        data = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise MalformedReply(f"body is not UTF-8 (byte {exc.start})") from None
    except RecursionError:
        raise MalformedReply("body is JSON nested deeper than the parser reads") from None
    except ValueError as exc:
        raise MalformedReply(f"body is not JSON ({content_type or 'no content type'}; {exc})") from None
    if not isinstance(data, dict):
        raise MalformedReply(f"body is a JSON {type(data).__name__}, not a chat completion object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedReply("response without choices")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise MalformedReply("choices[0] has no message object")
    content = message.get("content")
    text = "" if content is None else _text(content, "choices[0].message.content")
    usage = data.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise MalformedReply(f"usage is {type(usage).__name__}, not an object")
    tokens = (None, None) if usage is None else (_count(usage, "prompt_tokens"), _count(usage, "completion_tokens"))
    return text.strip(), *tokens, _logprobs(choice) if logprobs else None
