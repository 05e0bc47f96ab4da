"""One small interface for every LLM role (summarizer, answerer, planner, judge, teacher)."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from tiermem.llm.cache import ResponseCache
from tiermem.settings.config import check_declared
from tiermem.settings.errors import EXIT_FAILED, ConfigError

Messages = list[dict[str, str]]
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class ChatResult:
    text: str
    input_tokens: int
    output_tokens: int
    latency_s: float
    cached: bool = False
    model: str = ""
    # Per generated position: {token: logprob} for the top alternatives, when the backend returns them.
    top_logprobs: list[dict[str, float]] | None = None


class LLMError(RuntimeError):
    """A call that still failed after retries. Callers record it; it is never a verdict or an answer."""

    exit_code = EXIT_FAILED


# what an LLM counts over its life, every key from the start (a report lists the zeros); usage_missing: responses
# without token usage (counted as 0 tokens, reported)
LLM_COUNTS = ("new_calls", "cache_hits", "errors", "input_tokens", "output_tokens", "usage_missing")


@dataclass
class LLMConfig:
    backend: Literal["local", "openai"] = "local"  # in-process transformers | any OpenAI-compatible endpoint
    model: str = "packaged:smollm2-135m-instruct"
    base_url: str | None = None  # e.g. http://127.0.0.1:8000/v1 for `vllm serve`; None = api.openai.com
    api_key_env: str = "OPENAI_API_KEY"  # name of the variable holding the key; the key is never stored
    # max_concurrency, max_tokens, batch_size >= 1: 0 would hang (a zero-size semaphore), loop forever or silently
    # fall back to a default
    max_concurrency: int = field(default=8, metadata={"ge": 1})
    timeout_s: float = field(default=60.0, metadata={"gt": 0})
    max_retries: int = field(default=4, metadata={"ge": 0})  # the openai client's own exponential backoff
    max_tokens: int = field(default=256, metadata={"ge": 1})
    temperature: float = field(default=0.0, metadata={"ge": 0, "le": 2})
    structured: Literal["vllm", "openai", "none"] = "vllm"  # how to send choice/json constraints
    cache_path: str | None = None  # SQLite response cache; None = no cache
    batch_size: int = field(default=8, metadata={"ge": 1})  # local backend generation batch
    seed: int = 0

    def __post_init__(self) -> None:
        check_declared(self, "llm.")
        if not _ENV_NAME.match(self.api_key_env):
            # never echo it: what does not look like a variable name is most likely the key itself
            raise ConfigError("llm.api_key_env must be the NAME of an environment variable (letters, digits, "
                              "underscores), not the key; the value given is not shown")


@dataclass
class CallParams:
    max_tokens: int
    temperature: float
    choices: list[str] | None = None
    json_schema: dict[str, Any] | None = None
    logprobs: bool = False

    def key(self) -> dict[str, Any]:
        return asdict(self)


class LLM(ABC):
    """Base class: caching and accounting here, generation in `_complete_many` of each backend."""

    backend = "base"

    def __init__(self, model: str, cache: ResponseCache | None = None, max_tokens: int = 256,
                 temperature: float = 0.0) -> None:
        self.model = model
        self.name = f"{self.backend}:{model}"
        # the server that answers (an endpoint's address, credentials masked): part of every cache key, so another
        # endpoint serving a model of the same name never answers from this one's responses; None: in process
        self.endpoint: str | None = None
        self.cache = cache
        self.default_max_tokens = max_tokens
        self.default_temperature = temperature
        self.stats: Counter[str] = Counter(dict.fromkeys(LLM_COUNTS, 0))
        self._stats_lock = threading.Lock()  # labeling runs questions concurrently on HTTP backends

    @abstractmethod
    def _complete_many(self, batch: list[Messages], params: CallParams) -> list[ChatResult | LLMError]:
        """Generate for the uncached calls; one ChatResult or LLMError per input, in order."""

    def _key(self, messages: Messages, params: CallParams) -> str:
        # keys without an endpoint stay as they were, so in-process and api.openai.com caches keep their hits
        where = [self.endpoint] if self.endpoint else []
        blob = json.dumps([self.backend, self.model, messages, params.key(), *where], sort_keys=True,
                          ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def chat_many(self, batch: list[Messages], *, max_tokens: int | None = None, temperature: float | None = None,
                  choices: list[str] | None = None, json_schema: dict[str, Any] | None = None,
                  logprobs: bool = False) -> list[ChatResult | LLMError]:
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                       or max_tokens < 1):
            raise ValueError(f"{self.name}: max_tokens must be an integer >= 1, got {max_tokens!r}")
        params = CallParams(self.default_max_tokens if max_tokens is None else max_tokens,
                            self.default_temperature if temperature is None else temperature,
                            list(choices) if choices else None, json_schema, logprobs)
        out: list[ChatResult | LLMError | None] = [None] * len(batch)
        todo: list[int] = []
        keys = [self._key(m, params) for m in batch]
        for i, key in enumerate(keys):
            hit = self.cache.get(key) if self.cache is not None else None
            if hit is not None:
                out[i] = ChatResult(**{**hit, "cached": True})
                with self._stats_lock:
                    self.stats["cache_hits"] += 1
            else:
                todo.append(i)
        if todo:
            fresh = self._complete_many([batch[i] for i in todo], params)
            for i, res in zip(todo, fresh, strict=True):
                out[i] = res
                with self._stats_lock:
                    if isinstance(res, LLMError):
                        self.stats["errors"] += 1  # errors are never cached: a rerun retries them
                        continue
                    self.stats["new_calls"] += 1
                    self.stats["input_tokens"] += res.input_tokens
                    self.stats["output_tokens"] += res.output_tokens
                if self.cache is not None:
                    self.cache.put(keys[i], asdict(res) | {"cached": False})
        return out  # type: ignore[return-value]

    def forget(self, messages: Messages, *, max_tokens: int | None = None, temperature: float | None = None,
               choices: list[str] | None = None, json_schema: dict[str, Any] | None = None,
               logprobs: bool = False) -> None:
        """Drop this call's cached reply: one its caller could not use is an error, and errors are never cached."""
        if self.cache is None:
            return
        params = CallParams(self.default_max_tokens if max_tokens is None else max_tokens,
                            self.default_temperature if temperature is None else temperature,
                            list(choices) if choices else None, json_schema, logprobs)
        self.cache.delete(self._key(messages, params))
        with self._stats_lock:
            self.stats["errors"] += 1

    def chat(self, messages: Messages, **kwargs: Any) -> ChatResult:
        res = self.chat_many([messages], **kwargs)[0]
        if isinstance(res, LLMError):
            raise res
        return res
