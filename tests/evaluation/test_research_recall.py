"""`python -m evaluation.research_recall` (issue 40): research recall and raw-only accuracy without a language model,
before (pages only, memory.turn_k=0) and after (turns ranked)."""

import json

from evaluation.research_recall import ResearchRecallConfig, main, measure

FAST = {"page_tokens": 60, "tokenizer": "whitespace", "embedder": "hashing", "pages_per_round": 1, "max_rounds": 1}


def test_recall_is_measured_on_the_sample_before_and_after(tmp_path):
    out = tmp_path / "rows.json"
    after = measure(ResearchRecallConfig(data="", conversations=[], workdir=str(tmp_path / "tiers"), memory=FAST,
                                         output=str(out)))
    before = measure(ResearchRecallConfig(data="", conversations=[], workdir=str(tmp_path / "tiers"),
                                          memory={**FAST, "turn_k": 0}))
    assert after["questions"] == before["questions"] > 0
    for s in (after, before):
        assert 0 <= s["recall_all_gold"] <= s["recall_any_gold"] <= 1 and 0 <= s["raw_only_accuracy_evidence"] <= 1
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == after["questions"] and all(len(r["pages"]) <= 1 for r in rows)  # the bound: 1 page


def test_the_stage_prints_its_summary(tmp_path, capsys):
    assert main(["data=", "conversations=[]", f"workdir={tmp_path / 'tiers'}",
                 "memory=" + json.dumps(FAST)]) == 0
    assert '"recall_any_gold"' in capsys.readouterr().out
