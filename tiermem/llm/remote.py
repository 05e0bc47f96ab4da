"""Any OpenAI-compatible endpoint: OpenAI, `vllm serve`, `transformers serve`, llama.cpp's server."""

from __future__ import annotations

import asyncio
import os
import re
import time
from typing import Any

from tiermem.llm.base import LLM, CallParams, ChatResult, LLMError, Messages
from tiermem.llm.cache import ResponseCache
from tiermem.llm.reply import MalformedReply, chat_reply
from tiermem.settings.errors import EXIT_NETWORK
from tiermem.text.redact import install_log_filter, redact_text, redact_url

install_log_filter("httpx", "openai", "openai._base_client")


class OpenAIChatLLM(LLM):
    backend = "openai"

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 cache: ResponseCache | None = None, max_tokens: int = 256, temperature: float = 0.0,
                 max_concurrency: int = 8, timeout_s: float = 60.0, max_retries: int = 4,
                 structured: str = "vllm", seed: int = 0) -> None:
        super().__init__(model, cache, max_tokens, temperature)
        # the name is recorded (stats.json, report.md, cached responses, errors): never with credentials
        self.name = f"openai:{redact_url(base_url) or 'api.openai.com'}:{model}"
        # the cache key's endpoint: the address without credentials (a rotated password is the same server)
        self.endpoint = re.sub(r"//[^/@\s]*@", "//", base_url).rstrip("/") if base_url else None
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.structured = structured
        self.seed = seed
        # Local servers need no key; the official endpoint does, and says so before any call.
        self._api_key = os.environ.get(api_key_env) or ("EMPTY" if base_url else None)
        if self._api_key is None:
            raise LLMError(f"{self.name}: no API key: set the environment variable {api_key_env}")

    def _request(self, messages: Messages, params: CallParams) -> dict[str, Any]:
        req: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": params.max_tokens,
                               "temperature": params.temperature, "seed": self.seed}
        if params.logprobs:
            req |= {"logprobs": True, "top_logprobs": 5}
        if params.choices and self.structured == "vllm":
            req["extra_body"] = {"structured_outputs": {"choice": params.choices}}
        elif params.json_schema and self.structured == "vllm":
            req["extra_body"] = {"structured_outputs": {"json": params.json_schema}}
        elif params.json_schema and self.structured == "openai":
            req["response_format"] = {"type": "json_schema",
                                      "json_schema": {"name": "output", "schema": params.json_schema}}
        return req

    async def _one(self, client: Any, sem: asyncio.Semaphore, messages: Messages,
                   params: CallParams) -> ChatResult | LLMError:
        """One call. The openai client retries refusals (429, 5xx, a dropped connection); a reply that is no chat
        completion (HTML, `choices: [{}]`, invalid UTF-8) is retried here as often, then this call's LLMError."""
        import openai

        request = self._request(messages, params)
        async with sem:
            for attempt in range(self.max_retries + 1):
                started = time.perf_counter()
                try:
                    raw = await client.chat.completions.with_raw_response.create(**request)
                    body = await raw.http_response.aread()
                except openai.OpenAIError as exc:  # raised after the client's own retries with backoff
                    error = LLMError(redact_text(f"{self.name}: {type(exc).__name__}: {exc}"))
                    if isinstance(exc, openai.APIConnectionError):  # unreachable or timed out: exit 7 if all are
                        error.exit_code = EXIT_NETWORK
                    return error
                latency = time.perf_counter() - started
                try:
                    reply = chat_reply(body, raw.http_response.headers.get("content-type", ""), params.logprobs)
                except MalformedReply as exc:
                    if attempt == self.max_retries:
                        return LLMError(f"{self.name}: malformed reply after {attempt + 1} attempt(s): {exc}")
                    await asyncio.sleep(min(0.25 * 2 ** attempt, 4.0))
                    continue
                break
        text, input_tokens, output_tokens, top = reply
        if input_tokens is None:
            with self._stats_lock:
                self.stats["usage_missing"] += 1
        return ChatResult(text=text, input_tokens=input_tokens or 0, output_tokens=output_tokens or 0,
                          latency_s=latency, model=self.name, top_logprobs=top)

    async def _run(self, batch: list[Messages], params: CallParams) -> list[ChatResult | LLMError]:
        import openai

        client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self._api_key, timeout=self.timeout_s,
                                    max_retries=self.max_retries)
        sem = asyncio.Semaphore(self.max_concurrency)
        try:
            return await asyncio.gather(*(self._one(client, sem, m, params) for m in batch))
        finally:
            await client.close()

    def _complete_many(self, batch: list[Messages], params: CallParams) -> list[ChatResult | LLMError]:
        return asyncio.run(self._run(batch, params))
