"""Per-unit targets at labeling time: each unit's target is the evidence rule over a one-unit summary set, and the
deeper units (below the router's top-k) never leave the train split."""

import json
from pathlib import Path

import pytest

from labeling.config import LabelConfig
from labeling.dataset import load_split
from labeling.evidence import EvidenceConfig, answer_recall, compute_signals
from labeling.roles import Roles
from labeling.run import run
from labeling.unit_targets import for_split
from tests.helpers.label_helpers import SMALL_MEMORY, HashEmbedder
from tiermem.data.conversations import SAMPLE_PATH, load_conversations
from tiermem.memory import MemoryRuntime
from tiermem.settings.config import from_dict
from tiermem.settings.errors import ConfigError

MEMORY = {**SMALL_MEMORY, "max_rounds": 1, "top_k": 2}


def _label(out: Path, split: dict, deep_k: int | None = 6) -> list[dict]:
    cfg = from_dict(LabelConfig, {"output_dir": str(out), "memory": MEMORY, "label_rule": "evidence",
                                  "generate_answers": False, "minimal_pairs": {"enabled": True, "deep_k": 4},
                                  "unit_targets": {"deep_k": deep_k}, "split": split})
    run(cfg, Roles({}, need_answerer=False), embedder=HashEmbedder())
    return [json.loads(line) for line in (out / "all_records.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def train_only(tmp_path_factory):
    out = tmp_path_factory.mktemp("units") / "run"
    return out, _label(out, {"train": ["sample-1", "sample-2"]})


def _page_turns(out: Path) -> dict[str, list[str]]:
    """Every page's turns, read from the run's own tier cache."""
    turns = {}
    for conv in load_conversations(SAMPLE_PATH):
        runtime = MemoryRuntime.open_or_build(out / "tiers", conv, from_dict(LabelConfig, {"memory": MEMORY}).memory,
                                              embedder=HashEmbedder())
        turns.update({p.page_id: p.turn_ids for p in runtime.memory.raw.pages(conv.conv_id)})
        runtime.close()
    return turns


def test_each_target_is_the_evidence_rule_over_a_one_unit_set(train_only):
    out, records = train_only
    page_turns = _page_turns(out)
    natural = [r for r in records if not r["augmentation"] and not r["error"]]
    checked = positives = 0
    for r in natural:
        assert [u["unit_id"] for u in r["unit_targets"][: len(r["router_summaries"])]] == \
            [s["unit_id"] for s in r["router_summaries"]]
        assert [u["rank"] for u in r["unit_targets"]] == list(range(1, len(r["unit_targets"]) + 1))
        for u in r["unit_targets"]:
            recall = answer_recall(r["gold_answer"], [u], r["category"], r["source"], r["question"])
            signals = compute_signals(r["gold_answer"], r["category"], r["evidence_ids"], [u], r["research_pages"],
                                      page_turns.__getitem__, EvidenceConfig(), r["source"], question=r["question"])
            assert u["answer_recall"] == (None if recall is None else round(recall, 4))
            assert u["gold_in_pages"] == signals.gold_in_summary_pages
            assert u["s_ok"] == signals.s_ok
            checked += 1
            positives += u["s_ok"]
    # the fixture must exercise both: units that state the answer alone, and units that do not
    assert checked > 20 and 0 < positives < checked
    assert any(len(r["unit_targets"]) > len(r["router_summaries"]) for r in natural)  # deeper ranks are there
    assert all(r["unit_targets"] == [] for r in records if r["augmentation"])  # pairs carry none of their own


def test_deeper_units_never_leave_the_train_split(tmp_path, train_only):
    _, train_records = train_only
    records = _label(tmp_path / "run", {"train": ["sample-1"], "test": ["sample-2"]})
    held = [r for r in records if r["split"] == "test"]
    assert held and all(len(r["unit_targets"]) == len(r["router_summaries"]) for r in held if not r["error"])
    assert all(u["rank"] <= len(r["router_summaries"]) for r in held for u in r["unit_targets"])
    # the same questions labeled as train keep their deeper ranks: the split alone removed them
    deep_in_train = {r["qid"] for r in train_records if r["conv_id"] == "sample-2"
                     and len(r["unit_targets"]) > len(r["router_summaries"])}
    assert deep_in_train
    for split in ("train", "test"):  # the saved dataset agrees with all_records.jsonl
        for r in load_split(tmp_path / "run" / "dataset", split):
            if split == "test":
                assert all(u["rank"] <= len(r["router_summaries"]) for u in r["unit_targets"])
    # for_split keeps only the router units of a held-out record
    rec = {"split": "validation", "router_summaries": [{}], "unit_targets": [{"rank": 1}, {"rank": 2}]}
    assert for_split([rec])[0]["unit_targets"] == [{"rank": 1}]


def test_deep_k_below_top_k_is_refused():
    with pytest.raises(ConfigError, match="unit_targets.deep_k"):
        from_dict(LabelConfig, {"memory": MEMORY, "unit_targets": {"deep_k": 1}})
