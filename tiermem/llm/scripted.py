"""A scripted LLM for tests: deterministic replies, real caching and accounting."""

from __future__ import annotations

from collections.abc import Callable

from tiermem.llm.base import LLM, CallParams, ChatResult, LLMError, Messages
from tiermem.llm.cache import ResponseCache

Responder = Callable[[Messages], str | Exception]


class ScriptedLLM(LLM):
    """`responder(messages) -> str` (or an Exception to simulate a failure), or a list consumed in order."""

    backend = "scripted"

    def __init__(self, responder: Responder | list[str], model: str = "scripted",
                 cache: ResponseCache | None = None) -> None:
        super().__init__(model, cache)
        self._queue = list(responder) if isinstance(responder, list) else None
        self._responder = responder if callable(responder) else None
        self.calls: list[Messages] = []

    def _reply(self, messages: Messages) -> str | Exception:
        if self._responder is not None:
            return self._responder(messages)
        if not self._queue:
            return LLMError("scripted LLM ran out of replies")
        return self._queue.pop(0)

    def _complete_many(self, batch: list[Messages], params: CallParams) -> list[ChatResult | LLMError]:
        out: list[ChatResult | LLMError] = []
        for messages in batch:
            self.calls.append(messages)
            reply = self._reply(messages)
            if isinstance(reply, Exception):
                out.append(reply if isinstance(reply, LLMError) else LLMError(f"{self.name}: {reply}"))
                continue
            n_in = sum(len(m["content"].split()) for m in messages)
            out.append(ChatResult(reply, n_in, len(reply.split()), 0.0, model=self.name))
        return out
