"""`tiermem-router ingest`: build one conversation's two tiers and answer one question through the router.

    tiermem-router ingest data=../shared/data/locomo10_dev.json conversation=conv-26 question=conv-26:q000
    tiermem-router ingest router=runs/grpo/router      # route with a trained router instead of a fixed policy
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tiermem.config import parse_cli
from tiermem.data.conversations import Conversation, Question, load_conversations
from tiermem.llm import LLMConfig, build_llm
from tiermem.memory.runtime import MemoryConfig, MemoryRuntime

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "ingest" / "default.yaml"


@dataclass
class IngestConfig:
    data: str = ""  # LoCoMo / LongMemEval file; "" = the sample shipped with the package
    conversation: str = ""  # conversation id; "" = the first one in the file
    question: str | int = ""  # question id, or 0-based index in the conversation; "" = the first
    workdir: str = "runs/memory"  # tier cache root: <workdir>/<conv_id>-<key>/
    router: str = ""  # trained router dir or hub id (serving.Router.from_pretrained); "" = memory.fixed_policy
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)  # answerer, and summarizer when memory.summarizer=llm


def pick(convs: list[Conversation], conv_id: str, question: str | int) -> tuple[Conversation, Question]:
    question = str(question)
    if conv_id:
        matches = [c for c in convs if c.conv_id == conv_id]
        if not matches:
            raise ValueError(f"conversation {conv_id!r} not found; have {[c.conv_id for c in convs][:10]}")
        conv = matches[0]
    else:
        conv = convs[0]
    if not conv.questions:
        raise ValueError(f"conversation {conv.conv_id!r} has no questions")
    if question == "":
        return conv, conv.questions[0]
    if question.isdigit():
        index = int(question)
        if index >= len(conv.questions):
            raise ValueError(f"question index {index} out of range (conversation has {len(conv.questions)})")
        return conv, conv.questions[index]
    for q in conv.questions:
        if q.qid == question:
            return conv, q
    raise ValueError(f"question {question!r} not found in conversation {conv.conv_id!r}")


def main(argv: list[str]) -> int:
    cfg = parse_cli(IngestConfig, argv, default_config=DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None)
    conv, question = pick(load_conversations(cfg.data or None), cfg.conversation, cfg.question)
    llm = build_llm(cfg.llm)
    start = time.perf_counter()
    runtime = MemoryRuntime.open_or_build(cfg.workdir, conv, cfg.memory, llm=llm)
    built_s = time.perf_counter() - start
    stats = runtime.manifest["stats"]
    print(f"conversation {conv.conv_id}: {stats['turns']} turns -> {stats['pages']} raw pages "
          f"(<= {cfg.memory.page_tokens} tokens; max {stats['page_tokens_max']}, mean {stats['page_tokens_mean']}) "
          f"and {len(runtime.memory.summaries)} summary units ({cfg.memory.summarizer})")
    print(f"tiers: {runtime.workdir} (ingest took {stats['seconds']:.1f} s when built; opened in {built_s:.1f} s)")
    router = None
    if cfg.router:
        from serving.router import Router

        router = Router.from_pretrained(cfg.router)
    out = runtime.answer(question, router)
    print(f"question {question.qid} [category {question.category}]: {question.question}")
    print(f"gold answer: {question.answer}   (evidence {', '.join(question.evidence) or 'none'})")
    for i, unit in enumerate(out.retrieved, 1):
        print(f"  summary {i} ({unit.score:.3f}, {unit.date}) {unit.text[:110]}")
    print(f"route: {out.action} by {out.decided_by}"
          + (f" (router {out.router_s * 1000:.0f} ms, parsed_ok={out.router_parsed_ok})" if router else ""))
    if out.research is not None:
        r = out.research
        print(f"research: {r.rounds} round(s), stop={r.stop_reason}, pages read {r.pages_read}, "
              f"{len(r.linked)}/{len(r.quotes)} quotes linked, {r.parse_failures} parse failure(s)")
    c = out.cost
    print(f"answer: {out.answer if out.error is None else '<error> ' + out.error}")
    print(f"cost: {c.input_tokens} in / {c.output_tokens} out tokens, {c.llm_calls} LLM call(s), {c.wall_s:.2f} s")
    runtime.close()
    return 0 if out.error is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
