"""Chat reading data: Molweni and FriendsQA in their published shapes -> turns shown as `speaker: text`, answer
spans exact in the turns, unanswerable questions with their plausible answers; the span targets and the
answer-erased negatives built from them; the per-source held-out split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from router_train.reader.chat_reading import check_source, load_chat_source, load_friendsqa, load_molweni
from router_train.reader.reading_data import erase, question_pairs
from tiermem.settings.errors import ConfigError, DataError

FIXTURES = Path(__file__).parents[2] / "helpers" / "fixtures" / "reading"


def _q(questions, qid):
    return next(q for q in questions if q.qid == qid)


def test_molweni_turns_and_spans_are_exact():
    qs = load_molweni(FIXTURES / "molweni_small.json")
    assert len(qs) == 5 and sum(q.answerable for q in qs) == 3
    q = _q(qs, "m1")
    assert [q.context[s:e] for s, e in q.unit_spans()] == [
        "Mia: I met my new neighbour Sam at the park yesterday",
        "Leo: Nice ! did you install Ubuntu 22.04 on the laptop ?", "Mia: yes , with the USB stick"]
    assert [(q.context[a: a + len(t)], t) for a, t in q.answers] == [("at the park", "at the park")]
    # the published context is lower-cased; the span comes back in the turn's own case
    assert _q(qs, "m2").answers[0][1] == "with the USB stick"
    m3 = _q(qs, "m3")
    assert not m3.answerable and m3.plausible[0][1] == "22.04" and m3.article == _q(qs, "m1").article
    assert _q(qs, "m4").article != m3.article  # dialogues are the held-out unit


def test_friendsqa_utterance_words_and_speaker_answers():
    qs = load_friendsqa(FIXTURES / "friendsqa_small.json")
    assert len(qs) == 5 and all(q.answerable for q in qs)
    f1 = _q(qs, "f1")
    assert [(f1.context[a: a + len(t)], t) for a, t in f1.answers] == [("some guy", "some guy")]
    # a speaker answer points at the name in the turn's `speaker:` prefix
    f2 = _q(qs, "f2")
    a, text = f2.answers[0]
    assert text == "Joey Tribbiani" and f2.context[a: a + len(text) + 1] == "Joey Tribbiani:"
    f3 = _q(qs, "f3")
    assert [f3.context[a: a + len(t)] for a, t in f3.answers] == ["be nice", "All right"]
    assert f3.context.splitlines()[2].startswith("Chandler Bing, Joey Tribbiani: ")


def test_span_targets_and_erased_negatives():
    q = _q(load_molweni(FIXTURES / "molweni_small.json"), "m1")
    pairs = question_pairs(q, negatives=1, erased=True)
    pos = [p for p in pairs if p[2] == 1.0]
    assert len(pos) == 1 and pos[0][1][pos[0][3][0]: pos[0][3][1]] == "at the park"
    # the gold turn with its answer cut out: the event is named, the asked attribute is gone
    assert ("Where did Mia meet Sam ?", "Mia: I met my new neighbour Sam yesterday", 0.0, None) in pairs
    assert all(p[3] is None for p in pairs if p[2] == 0.0)
    assert erase("Mia: at the park", [(5, 16)]) is None  # too little left to read as a turn
    # unanswerable: the plausible answer's turn is always among the units kept
    m3 = _q(load_molweni(FIXTURES / "molweni_small.json"), "m3")
    assert [p[1] for p in question_pairs(m3, negatives=1, unanswerable_units=1)] == [
        "Leo: Nice ! did you install Ubuntu 22.04 on the laptop ?"]


def test_bad_chat_sources_are_named(tmp_path):
    with pytest.raises(ConfigError, match="kind one of"):
        check_source("squad:x.json")
    with pytest.raises(DataError, match="no such file"):
        load_chat_source(f"molweni:{tmp_path / 'missing.json'}")
    doc = json.loads((FIXTURES / "molweni_small.json").read_text())
    doc["data"]["dialogues"][0]["qas"][0]["answers"][0]["answer_start"] = 5
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(DataError, match=r"bad\.json dialogues\[0\] qas\[0\] answers\[0\]"):
        load_molweni(bad)
    doc = json.loads((FIXTURES / "friendsqa_small.json").read_text())
    doc["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["inner_end"] = 40
    bad.write_text(json.dumps(doc))
    with pytest.raises(DataError, match=r"qas\[0\] answers\[0\]: words 9\.\.40"):
        load_friendsqa(bad)
