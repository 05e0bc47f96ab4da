"""`python -m evaluation.research_recall`: research recall without any language model.

For every question with gold evidence on the named conversations: the pages research reads within its bound (the
extractive path's `research_pages`: `memory.max_rounds x memory.pages_per_round` pages; with `reader=` a reader
directory, the turns it scores best are read first, as `ask` does), and

- recall: a gold turn among the pages read (any), every gold turn among them (all);
- raw-only accuracy by the evidence rule (labeling.evidence: the text read states the answer, or the pages hold
  every gold turn), the verdict `ask`'s ESCALATE path is judged by.

    python -m evaluation.research_recall conversations=[conv-42,conv-47]                       # after (turns)
    python -m evaluation.research_recall conversations=[conv-42,conv-47] memory.turn_k=0       # before (pages only)
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from tiermem.settings.errors import stage_main


@dataclass
class ResearchRecallConfig:
    data: str = "../shared/data/locomo10_dev.json"
    conversations: list[str] = field(default_factory=lambda: ["conv-42", "conv-47"])  # the test split; [] = all
    workdir: str = "runs/eval/research_recall"  # tiers built here (cached by the tier key)
    reader: str = ""  # a reader directory whose scores order the candidate turns; "" = no reader (fused ranks)
    memory: dict[str, Any] = field(default_factory=lambda: {"page_tokens": 1000, "pages_per_round": 2,
                                                            "max_rounds": 3, "keyword_k": 3})
    output: str = ""  # a JSON file for the per-question rows; "" = print the summary only


def measure(cfg: ResearchRecallConfig) -> dict[str, Any]:
    from labeling.evidence import EvidenceConfig, Reading, compute_signals
    from tiermem.data.conversations import load_conversations
    from tiermem.memory.extractive import research_pages
    from tiermem.memory.memory_config import MemoryConfig
    from tiermem.memory.runtime import MemoryRuntime
    from tiermem.settings.config import from_dict

    memory = from_dict(MemoryConfig, cfg.memory, "memory")
    reader = None
    if cfg.reader:
        from tiermem.models.model_dir import load_reader

        reader = load_reader(cfg.reader, "reader=")  # the checked loader every reading stage uses
    convs = load_conversations(cfg.data, "locomo")
    if cfg.conversations:
        convs = [c for c in convs if c.conv_id in cfg.conversations]
    rows = []
    evidence = EvidenceConfig()
    for conv in convs:
        rt = MemoryRuntime.open_or_build(cfg.workdir, conv, memory)
        mem = rt.memory
        page_turns = Reading.of_pages(mem.raw.pages(conv.conv_id))  # the text read, as labeling judges it
        turn_page = mem.turn_page()
        for q in conv.questions:
            if not q.evidence:
                continue
            view = rt.memory_for(q)  # as of the question, when it says when it was asked
            retrieved = view.search_summaries(q.question, memory.top_k)
            pages = research_pages(view, q.question, q.date, retrieved, memory, reader)
            read = set(pages)
            signals = compute_signals(q.answer, q.category, q.evidence, [], pages, page_turns, evidence, "locomo")
            rows.append({"conv_id": conv.conv_id, "qid": q.qid, "pages": pages,
                         "any_gold": any(turn_page.get(t) in read for t in q.evidence),
                         "all_gold": all(turn_page.get(t) in read for t in q.evidence),
                         "raw_only_evidence_ok": bool(signals.r_ok)})
        rt.close()
    n = len(rows)
    summary = {"questions": n, "conversations": [c.conv_id for c in convs], "memory": cfg.memory,
               "reader": cfg.reader or None,
               "recall_any_gold": round(sum(r["any_gold"] for r in rows) / n, 4) if n else None,
               "recall_all_gold": round(sum(r["all_gold"] for r in rows) / n, 4) if n else None,
               "raw_only_accuracy_evidence": round(sum(r["raw_only_evidence_ok"] for r in rows) / n, 4) if n else None}
    if cfg.output:
        from tiermem.runs.safe_io import write_atomic

        write_atomic(cfg.output, json.dumps({"summary": summary, "rows": rows}, indent=2) + "\n")
    return summary


@stage_main("research-recall")
def main(argv: list[str]) -> int:
    from tiermem.settings.config import parse_cli
    from tiermem.settings.errors import HelpShown

    try:
        cfg = parse_cli(ResearchRecallConfig, argv)
    except HelpShown as shown:  # not a tiermem-router stage: the usage line names how it is really run
        print(shown.render("research-recall").replace("tiermem-router research-recall",
                                                      "python -m evaluation.research_recall", 1))
        return 0
    print(json.dumps(measure(cfg), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
