"""Minimal pairs at labeling time: variants of a question's summary set, one unit apart, labeled by the evidence rule.

The fixture is the shipped sample with top_k=2 and small pages: every kind of variant occurs there."""

import json
from pathlib import Path

import pytest

from labeling.config import PAIR_KINDS, LabelConfig
from labeling.dataset import load_dataset_dict, load_split
from labeling.evidence import compute_signals
from labeling.question import summary_input_tokens
from labeling.roles import Roles
from labeling.rules import decide
from labeling.run import run
from labeling.store import RecordStore
from tests.helpers.label_helpers import SMALL_MEMORY, HashEmbedder
from tiermem import contract
from tiermem.data.conversations import SAMPLE_PATH, load_conversations
from tiermem.memory import MemoryRuntime
from tiermem.settings.config import from_dict

MEMORY = {**SMALL_MEMORY, "max_rounds": 1, "top_k": 2}
CONVS = ("sample-1", "sample-2")
TIMING = ("label_wall_s", "cost_summary_wall_s", "cost_research_wall_s")


def _cfg(out: Path, split: dict | None = None, **extra) -> LabelConfig:
    return from_dict(LabelConfig, {
        "output_dir": str(out), "memory": MEMORY, "label_rule": "evidence", "generate_answers": False,
        "minimal_pairs": {"enabled": True}, "split": split or {"train": list(CONVS)}, **extra})


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _label(out: Path, split: dict | None = None, **extra) -> tuple[dict, list[dict]]:
    stats = run(_cfg(out, split, **extra), Roles({}, need_answerer=False), embedder=HashEmbedder())
    return stats, _records(out / "all_records.jsonl")


def _strip(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k not in TIMING}


@pytest.fixture(scope="module")
def labeled(tmp_path_factory):
    out = tmp_path_factory.mktemp("pairs") / "run"
    stats, records = _label(out)
    return out, stats, records


def test_every_kind_occurs_and_counts_stay_apart(labeled):
    out, stats, records = labeled
    variants = [r for r in records if r["augmentation"]]
    natural = [r for r in records if not r["augmentation"]]
    assert {r["augmentation"] for r in variants} == set(PAIR_KINDS)
    assert stats["records"] == len(natural) and stats["minimal_pairs"]["emitted"] == len(variants)
    assert sum(stats["labels"]["evidence"]["all"].values()) == len(natural)  # totals count questions only
    assert stats["dataset"]["train"] == len(records)
    for kind, counts in stats["minimal_pairs"]["kinds"].items():
        of_kind = [r for r in variants if r["augmentation"] == kind]
        assert counts["emitted"] == len(of_kind)
        assert counts["train"] == {lab: sum(r["label"] == lab for r in of_kind) for lab in ("ANSWER", "ESCALATE")}
    by_qid = {(r["conv_id"], r["qid"]): r for r in natural}
    for var in variants:
        orig = by_qid[(var["conv_id"], var["augmented_from"])]
        assert var["qid"] == f"{orig['qid']}~{var['augmentation']}" and var["label"] is not None
        assert {r["unit_id"] for r in var["router_summaries"]} != {r["unit_id"] for r in orig["router_summaries"]}
        assert var["research_pages"] == orig["research_pages"]
        assert var["cost_research_input_tokens"] == orig["cost_research_input_tokens"]
        expected = {"drop_answer": ("ANSWER", "ESCALATE", -1), "drop_irrelevant": ("ANSWER", "ANSWER", -1),
                    "bring_answer": ("ESCALATE", "ANSWER", 0), "near_miss": ("ANSWER", "ESCALATE", 0)}
        before, after, size = expected[var["augmentation"]]
        assert (orig["label"], var["label"]) == (before, after)
        assert len(var["router_summaries"]) == len(orig["router_summaries"]) + size
    report = (out / "report.md").read_text()
    assert "## Minimal pairs" in report and "| drop_answer |" in report


def test_pair_labels_equal_the_rule_on_the_same_set_retrieved_for_real(labeled):
    out, _, records = labeled
    cfg = _cfg(out)
    convs = {c.conv_id: c for c in load_conversations(SAMPLE_PATH)}
    natural = {(r["conv_id"], r["qid"]): r for r in records if not r["augmentation"]}
    firsts = {}
    for rec in records:
        if rec["augmentation"]:
            firsts.setdefault(rec["augmentation"], rec)
    assert set(firsts) == set(PAIR_KINDS)
    for kind, var in firsts.items():
        conv = convs[var["conv_id"]]
        q = next(q for q in conv.questions if q.qid == var["augmented_from"])
        runtime = MemoryRuntime.open_or_build(out / "tiers", conv, cfg.memory, embedder=HashEmbedder())
        try:
            ranked = runtime.memory.search_summaries(q.question, cfg.minimal_pairs.deep_k)
            rank = {u.unit_id: i for i, u in enumerate(ranked)}
            units = [next(u for u in ranked if u.unit_id == s["unit_id"]) for s in var["router_summaries"]]
            page_turns = {p.page_id: p.turn_ids for p in runtime.memory.raw.pages(conv.conv_id)}
            tokens = summary_input_tokens(q, units, runtime.count_tokens)
        finally:
            runtime.close()
        assert [rank[u.unit_id] for u in units] == sorted(rank[u.unit_id] for u in units), kind  # rank order
        assert [s["score"] for s in var["router_summaries"]] == [round(u.score, 6) for u in units]
        k = cfg.memory.top_k
        if kind in ("bring_answer", "near_miss"):
            assert rank[units[-1].unit_id] >= k  # a unit from below the router's top_k
        else:
            assert all(rank[u.unit_id] < k for u in units)
        orig = natural[(var["conv_id"], var["augmented_from"])]
        signals = compute_signals(q.answer, q.category, q.evidence, units, orig["research_pages"],
                                  page_turns.__getitem__, cfg.evidence, "locomo", question=q.question)
        decision = decide(signals.s_ok, signals.r_ok)
        assert (var["label"], var["s_ok"], var["r_ok"]) == (decision.label, signals.s_ok, signals.r_ok), kind
        assert var["answer_recall"] == (None if signals.answer_recall is None else round(signals.answer_recall, 4))
        assert var["cost_summary_input_tokens"] == tokens
        assert contract.parse(var["sft_target"]).action == var["label"]


def test_pairs_reach_only_the_train_split_whatever_the_split(tmp_path):
    out = tmp_path / "run"
    first = {"train": ["sample-1"], "test": ["sample-2"]}
    moved = {"train": ["sample-2"], "test": ["sample-1"]}
    seen = {}
    for split in (first, moved):  # the same records, resumed; only the split spec changes
        stats, records = _label(out, split)
        data = load_dataset_dict(out / "dataset")
        train_aug = [r for r in data["train"] if r["augmentation"]]
        assert train_aug and {r["conv_id"] for r in train_aug} == set(split["train"])
        assert not any(r["augmentation"] for r in data["test"])
        assert not any(r["augmentation"] for r in load_split(out / "dataset", "test"))
        assert not any(r["augmentation"] for r in load_split(out / "all_records.jsonl", "test"))
        assert all(r["split"] == "train" for r in records if r["augmentation"])
        assert stats["minimal_pairs"]["train_rows"] == len(train_aug)
        assert stats["minimal_pairs"]["held_out"] == stats["minimal_pairs"]["emitted"] - len(train_aug)
        seen[split["train"][0]] = ({r["qid"] for r in train_aug}, stats["minimal_pairs"]["emitted"])
    assert seen["sample-1"][1] == seen["sample-2"][1]  # computed for both conversations either way
    # the moved conversation's pairs equal the ones a run that always had it in train makes
    _, clean = _label(tmp_path / "clean", moved)
    assert seen["sample-2"][0] == {r["qid"] for r in clean if r["augmentation"]}


def test_pairs_are_deterministic(labeled, tmp_path):
    _, _, records = labeled
    _, again = _label(tmp_path / "again")
    assert [_strip(r) for r in again if r["augmentation"]] == [_strip(r) for r in records if r["augmentation"]]


def test_switch_off_gives_the_natural_records_only(labeled, tmp_path):
    _, on_stats, on = labeled
    off_stats, off = _label(tmp_path / "off", minimal_pairs={"enabled": False})
    assert not any(r["augmentation"] or r["augmented_from"] for r in off)
    assert [_strip(r) for r in off] == [_strip(r) for r in on if not r["augmentation"]]
    assert off_stats["minimal_pairs"] is None and off_stats["labels"] == on_stats["labels"]
    assert "Minimal pairs: off" in (tmp_path / "off" / "report.md").read_text()


@pytest.mark.parametrize("where", ["after_a_pair", "mid_run"])
def test_killed_run_resumes_to_the_clean_records(labeled, tmp_path, monkeypatch, where):
    done, _, clean = labeled
    # A kill right after a variant is committed and before its question is the case the commit order is for.
    first_pair = next(i for i, r in enumerate(_records(done / "records.jsonl")) if r["augmentation"])
    crash_at = 1 + (first_pair if where == "after_a_pair" else len(clean) // 2)
    put, calls = RecordStore.put, {"n": 0}

    def dying_put(self, record):
        calls["n"] += 1
        if calls["n"] > crash_at:
            raise KeyboardInterrupt("killed")
        put(self, record)

    out = tmp_path / "run"
    monkeypatch.setattr(RecordStore, "put", dying_put)
    with pytest.raises(KeyboardInterrupt):
        _label(out)
    monkeypatch.setattr(RecordStore, "put", put)
    store = _records(out / "records.jsonl")
    assert len(store) == crash_at
    if where == "after_a_pair":
        last = store[-1]
        assert last["augmentation"] and not any(r["qid"] == last["augmented_from"] for r in store)
    stats, resumed = _label(out)
    assert [_strip(r) for r in resumed] == [_strip(r) for r in clean]
    keys = [(r["conv_id"], r["qid"]) for r in _records(out / "records.jsonl")]
    assert len(keys) == len(set(keys))
    assert stats["resumed_records"] == sum(1 for r in store if not r["augmentation"])


def test_config_switch_is_checked_and_fingerprinted(tmp_path):
    with pytest.raises(ValueError, match="generate_answers=false"):
        from_dict(LabelConfig, {"label_rule": "evidence", "minimal_pairs": {"enabled": True}})
    with pytest.raises(ValueError, match="label_rule=evidence"):
        from_dict(LabelConfig, {"label_rule": "outcome", "generate_answers": True,
                                "minimal_pairs": {"enabled": True}})
    with pytest.raises(ValueError, match="deep_k"):
        _cfg(tmp_path, minimal_pairs={"enabled": True, "deep_k": 2})
    out = tmp_path / "fp"
    _label(out, minimal_pairs={"enabled": True, "deep_k": 15})
    with pytest.raises(ValueError, match="minimal_pairs.deep_k"):
        _label(out)


def test_dataset_card_states_the_pairs(labeled):
    from datasets import load_from_disk

    from labeling.hub import render_dataset_card

    out, stats, records = labeled
    card = render_dataset_card(load_from_disk(str(out / "dataset")), "acme/labels", {"label_rule": "evidence"},
                               stats).text
    assert "## Minimal pairs" in card
    for kind, counts in stats["minimal_pairs"]["kinds"].items():
        train = counts["train"]
        assert (f"| {kind} | {counts['emitted']} | {train['ANSWER'] + train['ESCALATE']} | {train['ANSWER']} | "
                f"{train['ESCALATE']} |") in card
    n_aug = sum(1 for r in records if r["augmentation"])
    assert f"| {n_aug} |" in card.split("## Counts per split")[1].split("## Minimal pairs")[0]
