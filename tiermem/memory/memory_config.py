"""The memory runtime's settings (tiermem.memory.runtime.MemoryConfig): how tiers are built and questions answered."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tiermem.settings.config import AT_LEAST_ONE, check_declared
from tiermem.settings.errors import ConfigError

# the counts' declared ranges: a 0 would silently become a default further down, a negative count slices from the end
ZERO_OR_MORE = {"ge": 0}


@dataclass
class MemoryConfig:
    # tier building (these fields, with the conversation, key the tier cache)
    page_tokens: int = field(default=1000, metadata=AT_LEAST_ONE)
    tokenizer: str = "packaged:smollm2-135m-instruct"  # model spec whose tokenizer sizes pages, or "whitespace"
    # Tier 1: "imported" (the conversation's own summary units when it brings them, e.g. RealMem's memory points;
    # else built by `summarizer`) | "extractive" (always built from the raw turns by `summarizer`)
    summaries: Literal["imported", "extractive"] = "imported"
    summarizer: Literal["extractive", "llm"] = "extractive"  # "extractive" (fast, deterministic) | "llm" (facts)
    keep_ratio: float = field(default=0.3, metadata={"gt": 0, "le": 1})  # extractive: share of sentences kept
    max_units_per_page: int = field(default=16, metadata=AT_LEAST_ONE)  # extractive
    summarizer_max_tokens: int = field(default=512, metadata=AT_LEAST_ONE)  # llm
    embedder: str = "packaged:all-minilm-l6-v2"  # a model spec, or "hashing" (lexical, model-free)
    # answering
    top_k: int = field(default=5, metadata=AT_LEAST_ONE)
    # without a router: "summary" (always ANSWER) | "research" (always ESCALATE)
    fixed_policy: Literal["summary", "research"] = "summary"
    max_rounds: int = field(default=3, metadata={"ge": 1, "le": 3})  # bounded research
    pages_per_round: int = field(default=2, metadata=AT_LEAST_ONE)
    keyword_k: int = field(default=3, metadata=ZERO_OR_MORE)
    # turns research ranks by BM25 and the turn embeddings fused (and the reader scores, on the extractive path):
    # their pages join the first round, the reader's best first (tiermem.memory.turns); 0 = rank pages only
    turn_k: int = field(default=36, metadata=ZERO_OR_MORE)
    search_k: int = field(default=3, metadata=ZERO_OR_MORE)
    max_snippets: int = field(default=8, metadata=ZERO_OR_MORE)
    step_max_tokens: int = field(default=384, metadata=AT_LEAST_ONE)
    answer_max_tokens: int = field(default=48, metadata=AT_LEAST_ONE)
    # An LM answer that is empty, a fragment or foreign to what was read is replaced by the best-matching quote
    # (tiermem.memory.grounding); "none" keeps the LM's reply whatever it is (the quote is still attached).
    answer_fallback: Literal["extractive", "none"] = "extractive"
    # who answers (tiermem.memory.extractive): "extractive" (the reader picks the sentence, no LM), "llm", or "auto"
    # (extractive on the packaged local model, generation on any other); `reader` is the reader's directory when
    # the router is not a unit reader with its own
    answerer: Literal["extractive", "llm", "auto"] = "auto"
    reader: str = "runs/reader_pretrain"
    # verified write-back after an escalation (benchmark runs keep tier 1 fixed: off by default)
    write_back: bool = False
    writeback_skip_similarity: float = field(default=0.92, metadata={"ge": -1, "le": 1})
    writeback_update_similarity: float = field(default=0.8, metadata={"ge": -1, "le": 1})

    def __post_init__(self) -> None:
        check_declared(self, "memory.")
        if not self.writeback_update_similarity <= self.writeback_skip_similarity:
            raise ConfigError("memory.writeback_update_similarity must be <= memory.writeback_skip_similarity")

    def tier_fields(self) -> dict[str, Any]:
        keys = ["page_tokens", "tokenizer", "summaries", "summarizer", "embedder"]
        keys += ["keep_ratio", "max_units_per_page"] if self.summarizer == "extractive" else ["summarizer_max_tokens"]
        return {k: getattr(self, k) for k in keys}
