"""Round eight (issue 66), the loaders: dates of two kinds never compared by skipping, every file a RealMem folder
holds read through the checked reader, structured memory points kept as their JSON text, empty requests and points
of empty sessions dropped and counted."""

import json
import os

import pytest

from tests.helpers.memory_runtime import build
from tests.helpers.realmem_fixture import edited, write
from tiermem.data.conversations import load_conversations
from tiermem.data.realmem import load_realmem
from tiermem.settings.errors import DataError


def _lme(question_date, dates):
    return [{"question_id": "q1", "question_type": "single-session-user", "question": "Where did I move?",
             "answer": "Lisbon", "question_date": question_date, "haystack_session_ids": ["s-1", "s-2"],
             "haystack_dates": dates, "answer_session_ids": ["s-2"],
             "haystack_sessions": [[{"role": "user", "content": "I love pasta."}],
                                   [{"role": "user", "content": "I moved to Lisbon.", "has_answer": True}]]}]


@pytest.mark.parametrize("question_date, dates", [
    ("2024-06-01T10:00:00Z", ["2024-05-20 09:00", "2024-06-11 09:00"]),
    ("2024-06-01 10:00", ["2024-05-20T09:00:00+00:00", "2024-06-11T09:00:00Z"]),
    ("2024-06-01 10:00", ["2024-05-20 09:00", "2024-06-11T09:00:00Z"]),
])
def test_a_question_date_and_session_dates_of_two_zone_kinds_are_refused_by_name(tmp_path, question_date, dates):
    path = tmp_path / "lme.json"
    path.write_text(json.dumps(_lme(question_date, dates)))
    with pytest.raises(DataError, match=r"instance 'q1': .*has a time zone .* but .* has none") as exc:
        load_conversations(path)
    assert str(path) in str(exc.value)


def test_dates_of_one_kind_still_hide_the_later_session():
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "lme.json"
    path.write_text(json.dumps(_lme("2024-06-01T10:00:00Z", ["2024-05-20T09:00:00Z", "2024-06-11T09:00:00Z"])))
    question = load_conversations(path)[0].questions[0]
    assert question.asked_before == "s-2:0"  # the answer session, 10 days later, is after the question


@pytest.mark.parametrize("kind", ["fifo", "directory", "dangling link", "nested"])
def test_every_file_a_realmem_folder_holds_goes_through_the_checked_reader(tmp_path, kind):
    folder = tmp_path / "rm"
    write(folder)
    bad = folder / "Zed_dialogues_1k.json"
    if kind == "fifo":
        os.mkfifo(bad)
    elif kind == "directory":
        bad.mkdir()
    elif kind == "dangling link":
        bad.symlink_to(tmp_path / "gone.json")
    else:
        bad.write_text("[" * 5000 + "]" * 5000)
    with pytest.raises(DataError, match="Zed_dialogues_1k.json") as exc:
        load_realmem(folder)  # a FIFO would block here forever
    assert {"fifo": "not a regular file", "directory": "is a directory", "dangling link": "link to a missing",
            "nested": "nested too deeply"}[kind] in str(exc.value)


def test_a_structured_memory_point_is_its_json_text_and_counted(tmp_path):
    plan = {"day 1": "Urumqi", "day 2": ["Kanas", "Hemu"]}

    def edit(data):
        a = data["dialogues"][1]
        a["extracted_memory"][0]["content"] = plan
        b = data["dialogues"][0]
        b["dialogue_turns"][3]["memory_used"][0]["content"] = plan

    conv = load_realmem(write(tmp_path, edited(edit)))[0]
    text = json.dumps(plan, ensure_ascii=False)
    assert [u.text for u in conv.summaries if u.unit_id == "S1:m1"] == [text]
    assert conv.load_notes["points_structured"] == 1
    q1 = next(q for q in conv.questions if q.qid == "Q-0001")
    assert q1.points[0].text == text and q1.points[0].turn_ids == ["S1:3"]  # matched to its point, not "unmatched"


def test_an_empty_request_and_a_point_of_an_empty_session_are_dropped_and_counted(tmp_path):
    def edit(data):
        data["dialogues"][0]["dialogue_turns"][2]["content"] = "   "  # Q-0001 asks nothing
        for turn in data["dialogues"][3]["dialogue_turns"]:  # session D: every turn empty, one memory point
            turn["content"] = ""

    conv = load_realmem(write(tmp_path / "rm", edited(edit)))[0]
    assert "Q-0001" not in {q.qid for q in conv.questions} and conv.load_notes["queries_empty"] == 1
    assert conv.load_notes["points_in_empty_sessions"] == 1
    assert all(u.turn_ids for u in conv.summaries)
    runtime = build(tmp_path, conv)  # the tier build and memory as of every question: no exit 70
    for q in conv.questions:
        runtime.memory.as_of(q.asked_before)
