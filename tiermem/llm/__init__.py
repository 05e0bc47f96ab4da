"""The LLM layer: one interface, two real backends (local transformers, OpenAI-compatible HTTP)."""

from tiermem.llm.base import LLM, LLMConfig, LLMError
from tiermem.llm.cache import ResponseCache
from tiermem.llm.scripted import ScriptedLLM

__all__ = ["LLM", "LLMConfig", "LLMError", "ResponseCache", "ScriptedLLM", "build_llm"]


def build_llm(cfg: LLMConfig) -> LLM:
    cache = ResponseCache(cfg.cache_path) if cfg.cache_path else None
    if cfg.backend == "local":
        from tiermem.llm.local import LocalLLM

        return LocalLLM(cfg.model, cache=cache, max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                        batch_size=cfg.batch_size)
    from tiermem.llm.remote import OpenAIChatLLM

    return OpenAIChatLLM(cfg.model, base_url=cfg.base_url, api_key_env=cfg.api_key_env, cache=cache,
                         max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                         max_concurrency=cfg.max_concurrency, timeout_s=cfg.timeout_s,
                         max_retries=cfg.max_retries, structured=cfg.structured, seed=cfg.seed)
