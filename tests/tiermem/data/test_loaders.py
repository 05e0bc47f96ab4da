import copy
import json
from pathlib import Path

import pytest

from tiermem.data import SAMPLE_PATH, DataError, load_conversations, load_locomo, load_longmemeval
from tiermem.memory.text import content_words

FIX = Path(__file__).parents[2] / "helpers" / "fixtures" / "memory"
LOCOMO = FIX / "locomo_tiny.json"
LME = FIX / "longmemeval_tiny.json"


def test_locomo_turns_sessions_and_captions():
    (conv,) = load_locomo(LOCOMO)
    assert conv.conv_id == "tiny-1" and conv.speakers == ["Ada", "Ben"]
    assert [t.turn_id for t in conv.turns] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2", "D2:3"]
    assert conv.turns[0].timestamp == "4:10 pm on 5 January, 2024" and conv.turns[0].session_id == "session_1"
    assert conv.turns[3].timestamp == "11:00 am on 20 January, 2024"
    caption = "[shares a photo: a photo of a red kayak on a dock]"
    assert conv.turns[2].text == f"On Lake Merritt, every Sunday morning. {caption}"


def test_locomo_questions_category5_excluded_and_ids_stable():
    (conv,) = load_locomo(LOCOMO)
    assert [q.qid for q in conv.questions] == ["tiny-1:q000", "tiny-1:q001", "tiny-1:q002", "tiny-1:q003"]
    assert {q.category for q in conv.questions} == {"1", "2", "4"}
    assert conv.questions[2].answer == "30"  # ints become strings
    (with5,) = load_locomo(LOCOMO, exclude_categories=())
    assert with5.questions[-1].qid == "tiny-1:q004" and with5.questions[-1].category == "5"
    assert with5.questions[-1].answer == "Not mentioned in the conversation"


def test_locomo_evidence_typos_repaired():
    (conv,) = load_locomo(LOCOMO)
    assert conv.questions[1].evidence == ["D1:1", "D1:3"]  # "D1:1; D1:3"
    assert conv.questions[2].evidence == ["D2:3"]  # "D:2:3"


def _write(tmp_path, data, name="bad.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _tiny():
    return json.loads(LOCOMO.read_text())


def test_unknown_evidence_dropped_with_warning_or_error(tmp_path):
    data = _tiny()
    data[0]["qa"][0]["evidence"] = ["D1:1", "D9:9"]
    path = _write(tmp_path, data)
    with pytest.warns(UserWarning, match=r"tiny-1.*qa\[0\].*D9:9"):
        (conv,) = load_locomo(path)
    assert conv.questions[0].evidence == ["D1:1"]
    with pytest.raises(DataError, match=r"bad\.json.*'tiny-1'.*qa\[0\].*'evidence'.*D9:9"):
        load_locomo(path, unknown_evidence="error")


@pytest.mark.parametrize(
    ("mutate", "pattern"),
    [
        (lambda d: d[0].pop("qa"), r"'tiny-1'.*missing field 'qa'"),
        (lambda d: d[0]["conversation"].pop("session_2_date_time"), r"'tiny-1'.*'session_2_date_time'"),
        (lambda d: d[0]["conversation"].__setitem__("session_2", []), r"'tiny-1'.*session_2.*empty session"),
        (lambda d: d[0]["conversation"]["session_1"][1].pop("speaker"), r"session_1\[1\].*missing field 'speaker'"),
        (lambda d: d[0]["conversation"]["session_1"][0].__setitem__("text", 5), r"session_1\[0\].*'text' must be str"),
        (lambda d: d[0]["qa"][1].__setitem__("category", "2"), r"qa\[1\].*'category' must be int"),
        (lambda d: d[0]["qa"][0].pop("answer"), r"qa\[0\].*missing field 'answer'"),
        (lambda d: d[0]["qa"][0].__setitem__("evidence", "D1:1"), r"qa\[0\].*'evidence' must be list"),
        (lambda d: d[0]["conversation"]["session_2"][0].__setitem__("dia_id", "D1:1"), r"'tiny-1'.*repeats"),
        (lambda d: d.append(copy.deepcopy(d[0])), r"duplicate sample_id 'tiny-1'"),
        (lambda d: [d[0]["conversation"].pop(k) for k in ("session_1", "session_2")], r"no session_N"),
    ],
)
def test_locomo_malformed_names_file_sample_field(tmp_path, mutate, pattern):
    data = _tiny()
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(DataError, match=pattern) as info:
        load_locomo(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        ("not_json.json", r"not_json\.json: not valid JSON"),
        ("locomo_missing_qa.json", r"'no-qa'.*missing field 'qa'"),
        ("locomo_empty_session.json", r"'empty-sess'.*session_1.*empty session"),
        ("longmemeval_length_mismatch.json", r"'q-bad'.*differ in length"),
    ],
)
def test_bad_fixture_files(name, pattern):
    with pytest.raises(DataError, match=pattern):
        load_conversations(FIX / name)


def test_missing_file_and_unknown_shape(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_conversations(tmp_path / "nope.json")
    with pytest.raises(DataError, match="neither LoCoMo"):
        load_conversations(_write(tmp_path, [{"foo": 1}]))
    with pytest.raises(DataError, match="non-empty list"):
        load_locomo(_write(tmp_path, {"sample_id": "x"}))


def test_longmemeval_one_conversation_per_question():
    convs = load_longmemeval(LME)
    assert [c.conv_id for c in convs] == ["q-degree", "q-commute_abs"]
    conv = convs[0]
    assert [t.turn_id for t in conv.turns] == ["s-1:0", "s-1:1", "s-2:0", "s-2:1"]
    assert conv.turns[2].speaker == "user" and conv.turns[2].timestamp == "2023/05/22 (Mon) 10:05"
    (q,) = conv.questions
    assert q.evidence == ["s-2:0"] and q.category == "single-session-user" and q.date == "2023/05/30 (Tue) 23:40"
    assert convs[1].questions[0].evidence == [] and convs[1].questions[0].answer == "45"


def test_longmemeval_malformed(tmp_path):
    data = json.loads(LME.read_text())
    data[0]["haystack_sessions"][1][0].pop("content")
    with pytest.raises(DataError, match=r"'q-degree'.*haystack_sessions\[1\]\[0\].*missing field 'content'"):
        load_longmemeval(_write(tmp_path, data))
    data = json.loads(LME.read_text())
    data[1]["haystack_sessions"] = [[]]
    with pytest.raises(DataError, match=r"'q-commute_abs'.*haystack_sessions\[0\].*non-empty"):
        load_longmemeval(_write(tmp_path, data))


def test_auto_format_and_category_filter():
    assert load_conversations(LOCOMO)[0].conv_id == "tiny-1"
    assert [c.conv_id for c in load_conversations(LME, exclude_categories=("temporal-reasoning",))] == ["q-degree"]
    with pytest.raises(ValueError, match="unknown benchmark format"):
        load_conversations(LME, fmt="csv")


def test_shipped_sample_is_answerable_from_its_evidence():
    convs = load_conversations(None)
    assert SAMPLE_PATH.is_file() and len(convs) == 2
    questions = [q for c in convs for q in c.questions]
    assert len(questions) >= 10 and {q.category for q in questions} == {"1", "2", "3", "4"}
    for conv in convs:
        text = {t.turn_id: t.text for t in conv.turns}
        for q in conv.questions:
            assert q.evidence and all(e in text for e in q.evidence), q.qid
            evidence_words = set(content_words(" ".join(text[e] for e in q.evidence)))
            if q.category in ("1", "4"):  # stated outright: every answer word is in the evidence
                assert set(content_words(q.answer)) <= evidence_words, q.qid


@pytest.mark.filterwarnings("ignore:.*dropping unknown evidence")
def test_dev_locomo_loads(locomo_path):
    with pytest.warns(UserWarning, match="dropping unknown evidence"):
        convs = load_locomo(locomo_path)
    assert len(convs) == 7
    questions = [q for c in convs for q in c.questions]
    assert {q.category for q in questions} == {"1", "2", "3", "4"}
    assert all(len({t.turn_id for t in c.turns}) == len(c.turns) for c in convs)


def test_longmemeval_question_date_is_when_the_memory_is_read(tmp_path):
    data = json.loads(LME.read_text())
    assert load_longmemeval(LME)[0].questions[0].asked_before is None  # asked after every session
    data[0]["question_date"] = "2023/05/21 (Sun) 09:00"  # between the two sessions
    (q,) = load_longmemeval(_write(tmp_path, data))[0].questions
    assert q.asked_before == "s-2:0"
