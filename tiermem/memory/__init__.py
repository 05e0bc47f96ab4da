"""The two-tier memory: immutable raw pages (tier 2), linked summary units (tier 1), policies, runtime."""

from tiermem.memory.keyword import KeywordIndex
from tiermem.memory.policies import (
    LinkedQuote,
    PathCost,
    ResearchResult,
    Search,
    SummaryResult,
    research_policy,
    summary_policy,
)
from tiermem.memory.raw_store import Page, RawPageStore, make_token_counter, paginate, whitespace_tokens
from tiermem.memory.runtime import IngestStats, MemoryConfig, MemoryRuntime, RuntimeAnswer, WriteBack, tier_key
from tiermem.memory.summaries import (
    ExtractiveSummarizer,
    LLMFactSummarizer,
    RetrievedUnit,
    SummaryIndex,
    SummaryUnit,
    build_summarizer,
)
from tiermem.memory.text import QuoteLink, link_quote
from tiermem.memory.tiers import TwoTierMemory

__all__ = [
    "ExtractiveSummarizer", "IngestStats", "KeywordIndex", "LLMFactSummarizer", "LinkedQuote", "MemoryConfig",
    "MemoryRuntime", "Page", "PathCost", "QuoteLink", "RawPageStore", "ResearchResult", "RetrievedUnit",
    "RuntimeAnswer", "Search", "SummaryIndex", "SummaryResult", "SummaryUnit", "TwoTierMemory", "WriteBack",
    "build_summarizer", "link_quote", "make_token_counter", "paginate", "research_policy", "summary_policy",
    "tier_key", "whitespace_tokens",
]
