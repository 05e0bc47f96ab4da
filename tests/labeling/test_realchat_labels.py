"""Labels on a messaging-style conversation (tests/helpers/fixtures/labeling/realchat_style.json): numeric-date
golds, relative-time answers, two people talking about a third, and questions that name a day."""

import json
from pathlib import Path

from labeling.config import LabelConfig
from labeling.roles import Roles
from labeling.run import run
from tests.helpers.label_helpers import HashEmbedder
from tiermem.data.conversations import load_conversations
from tiermem.memory.policies import first_round_pages, time_pages
from tiermem.memory.raw_store import whitespace_tokens
from tiermem.memory.runtime import MemoryConfig, MemoryRuntime
from tiermem.memory.summaries import HashingEmbedder
from tiermem.settings.config import from_dict

FIXTURE = Path(__file__).resolve().parents[1] / "helpers" / "fixtures" / "labeling" / "realchat_style.json"
MEMORY = {"tokenizer": "whitespace", "page_tokens": 40, "max_rounds": 1, "top_k": 2, "pages_per_round": 1,
          "keyword_k": 1}


def _memory(tmp_path):
    conv = load_conversations(str(FIXTURE))[0]
    cfg = MemoryConfig(page_tokens=40, tokenizer="whitespace", embedder="hashing")
    runtime = MemoryRuntime.open_or_build(tmp_path / "tiers", conv, cfg, embedder=HashingEmbedder(),
                                          count_tokens=whitespace_tokens)
    return conv, runtime


def test_a_question_naming_a_day_reads_that_days_pages_first(tmp_path):
    conv, runtime = _memory(tmp_path)
    memory = runtime._require()
    page_of = {t.turn_id: p.page_id for p in memory.all_pages() for t in p.turns}
    q = "Where is Paola going on 16.01.2024?"
    on_the_day = {page_of["d2-1"], page_of["d2-2"]}
    assert set(time_pages(memory, q)) == on_the_day
    assert first_round_pages(memory, q, [], pages_per_round=1, keyword_k=1)[0] in on_the_day
    assert time_pages(memory, "Where is Paola going?") == []
    # a relative time in the question reads against the question's own date
    assert page_of["d4-1"] in time_pages(memory, "What happened yesterday?", question_date="2024-01-23")
    runtime.close()


def test_realchat_style_questions_are_labeled_by_meaning(tmp_path):
    cfg = from_dict(LabelConfig, {"data_path": str(FIXTURE), "dataset_format": "tiermem", "output_dir":
                                  str(tmp_path / "label"), "memory": MEMORY, "label_rule": "evidence",
                                  "generate_answers": False, "llm": {"answerer": None},
                                  "split": {"train": ["ana-lucia"], "validation": [], "test": []}})
    stats = run(cfg, Roles({}, need_answerer=False), embedder=HashEmbedder())
    records = {r["qid"]: r for r in map(json.loads, (tmp_path / "label" / "all_records.jsonl").open())}
    assert stats["errors"] == 0
    # the day-naming question reads its day's page, so its research path holds the gold turn: labeled, not dropped
    assert records["q4"]["gold_in_research_pages"] == 1 and records["q4"]["label"] is not None


SPEAKERS = FIXTURE.with_name("realchat_speakers.json")
SPEAKERS_MEMORY = {"tokenizer": "whitespace", "page_tokens": 30, "keep_ratio": 1.0, "max_rounds": 1, "top_k": 3,
                   "pages_per_round": 1, "keyword_k": 1}


def _label(tmp_path, fixture, memory, conv):
    cfg = from_dict(LabelConfig, {"data_path": str(fixture), "dataset_format": "tiermem", "output_dir":
                                  str(tmp_path / "label"), "memory": memory, "label_rule": "evidence",
                                  "generate_answers": False, "llm": {"answerer": None},
                                  "split": {"train": [conv], "validation": [], "test": []}})
    stats = run(cfg, Roles({}, need_answerer=False), embedder=HashEmbedder())
    rows = map(json.loads, (tmp_path / "label" / "all_records.jsonl").open())
    return stats, {r["qid"]: r for r in rows if not r["augmentation"]}


def test_lower_case_speakers_misspelled_names_and_research_by_what_it_read(tmp_path):
    """Each question gets the label a careful reader of its three router summaries gives (the run before speakers
    and read text: ESCALATE, dropped, ANSWER, dropped, ESCALATE)."""
    stats, records = _label(tmp_path, SPEAKERS, SPEAKERS_MEMORY, "elise-muhhamed")
    assert stats["errors"] == 0
    assert {q: r["label"] for q, r in records.items()} == {
        "q1": "ANSWER",  # 'elise: ... we tried basketball at the community gym': lower-case speaker, 'Jan' a date
        "q2": "ANSWER",  # 'muhhamed: I cooked a lamb tagine for my parents' answers a question about Muhammad
        "q3": "ANSWER",  # Kate is a name the turns mention (not a speaker); Kane's unit is someone else's
        "q4": "ESCALATE",  # no summary says 'cello'; the one page research reads does, 1 of 3 gold turns
        "q5": "ANSWER",  # 'Moreau' matches no one: Elise's units still count
    }
    # speakers are data on every unit of the record, from the unit's source turns
    for rec in records.values():
        for unit in rec["router_summaries"]:
            assert unit["speakers"] == [unit["text"].split(":")[0]]
        assert all(u["speakers"] for u in rec["unit_targets"])
    q4 = records["q4"]
    assert (q4["gold_in_research_pages"], q4["n_gold"], q4["research_recall"], q4["r_ok_by"]) == (1, 3, 1.0, "text")
    assert records["q1"]["person_guard"] == "units about elise = elise"
    assert records["q2"]["person_guard"] == "units about muhammad = muhhamed"
    assert "moreau: no speaker or mentioned name matches, does not narrow" in records["q5"]["person_guard"]
    # the per-unit targets read the same answer matching: the basketball unit is the positive one for q1
    positives = [u["text"] for u in records["q1"]["unit_targets"] if u["s_ok"]]
    assert positives and all("basketball" in t for t in positives)
    report = (tmp_path / "label" / "report.md").read_text()
    assert "## Unlabeled questions by drop reason" in report and "| evidence | all reasons | 0 of 5 |" in report
