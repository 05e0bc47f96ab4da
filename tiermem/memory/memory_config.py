"""The memory runtime's settings (tiermem.memory.runtime.MemoryConfig): how tiers are built and questions answered."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tiermem.memory.extractive import answerer_mode
from tiermem.settings.errors import ConfigError


@dataclass
class MemoryConfig:
    # tier building (these fields, with the conversation, key the tier cache)
    page_tokens: int = 1000
    tokenizer: str = "packaged:smollm2-135m-instruct"  # model spec whose tokenizer sizes pages, or "whitespace"
    # Tier 1: "imported" (the conversation's own summary units when it brings them, e.g. RealMem's memory points;
    # else built by `summarizer`) | "extractive" (always built from the raw turns by `summarizer`)
    summaries: str = "imported"
    summarizer: str = "extractive"  # "extractive" (fast, deterministic) | "llm" (fact extraction)
    keep_ratio: float = 0.3  # extractive: share of a page's sentences kept
    max_units_per_page: int = 16  # extractive
    summarizer_max_tokens: int = 512  # llm
    embedder: str = "packaged:all-minilm-l6-v2"  # a model spec, or "hashing" (lexical, model-free)
    # answering
    top_k: int = 5
    fixed_policy: str = "summary"  # without a router: "summary" (always ANSWER) | "research" (always ESCALATE)
    max_rounds: int = 3
    pages_per_round: int = 2
    keyword_k: int = 3
    # turns research ranks by BM25 and the turn embeddings fused (and the reader scores, on the extractive path):
    # their pages join the first round, the reader's best first (tiermem.memory.turns); 0 = rank pages only
    turn_k: int = 36
    search_k: int = 3
    max_snippets: int = 8
    step_max_tokens: int = 384
    answer_max_tokens: int = 48
    # An LM answer that is empty, a fragment or foreign to what was read is replaced by the best-matching quote
    # (tiermem.memory.grounding); "none" keeps the LM's reply whatever it is (the quote is still attached).
    answer_fallback: str = "extractive"
    # who answers (tiermem.memory.extractive): "extractive" (the reader picks the sentence, no LM), "llm", or "auto"
    # (extractive on the packaged local model, generation on any other); `reader` is the reader's directory when
    # the router is not a unit reader with its own
    answerer: str = "auto"
    reader: str = "runs/reader_pretrain"

    def __post_init__(self) -> None:
        if self.summaries not in ("imported", "extractive"):
            raise ConfigError(f"memory.summaries must be 'imported' or 'extractive', got {self.summaries!r}")
        if self.summarizer not in ("extractive", "llm"):
            raise ConfigError(f"summarizer must be 'extractive' or 'llm', got {self.summarizer!r}")
        if self.answer_fallback not in ("extractive", "none"):
            raise ConfigError(f"answer_fallback must be 'extractive' or 'none', got {self.answer_fallback!r}")
        answerer_mode(self.answerer, None, None)  # a bad setting fails at load, whatever the model
        if self.fixed_policy not in ("summary", "research"):
            raise ConfigError(f"fixed_policy must be 'summary' or 'research', got {self.fixed_policy!r}")
        if not 1 <= self.max_rounds <= 3:
            raise ConfigError(f"max_rounds must be 1..3 (bounded research), got {self.max_rounds}")
        positive = ("page_tokens", "top_k", "pages_per_round", "max_units_per_page", "summarizer_max_tokens",
                    "step_max_tokens", "answer_max_tokens")
        for name in positive:  # 0 would silently become a default further down; negatives slice from the end
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"memory.{name} must be an integer >= 1, got {value!r}")
        for name in ("keyword_k", "search_k", "max_snippets", "turn_k"):
            if getattr(self, name) < 0:
                raise ConfigError(f"memory.{name} must be >= 0, got {getattr(self, name)!r}")
        if not 0 < self.keep_ratio <= 1:
            raise ConfigError(f"memory.keep_ratio must be in (0, 1], got {self.keep_ratio!r}")

    def tier_fields(self) -> dict[str, Any]:
        keys = ["page_tokens", "tokenizer", "summaries", "summarizer", "embedder"]
        keys += ["keep_ratio", "max_units_per_page"] if self.summarizer == "extractive" else ["summarizer_max_tokens"]
        return {k: getattr(self, k) for k in keys}
