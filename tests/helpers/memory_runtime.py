"""A memory runtime built fast (whitespace tokens, hashing embedder) and a scripted LLM that answers it."""

from tiermem.llm import ScriptedLLM
from tiermem.memory.policies import ANSWER_SYSTEM, INTEGRATE_SYSTEM
from tiermem.memory.raw_store import whitespace_tokens
from tiermem.memory.runtime import MemoryConfig, MemoryRuntime
from tiermem.memory.summaries import HashingEmbedder

CFG = MemoryConfig(page_tokens=60, tokenizer="whitespace", embedder="hashing", keep_ratio=0.5)


def answer_llm(answer="Eleven", integrate='{"facts": []}', plan="DONE"):
    def respond(messages):
        system = messages[0]["content"]
        return answer if system == ANSWER_SYSTEM else integrate if system == INTEGRATE_SYSTEM else plan

    return ScriptedLLM(respond)


def build(tmp_path, conv, cfg=CFG, **kw):
    return MemoryRuntime.open_or_build(tmp_path / "tiers", conv, cfg, embedder=HashingEmbedder(),
                                       count_tokens=whitespace_tokens, **kw)
