"""The extractive answerer (issue 35): the reader picks the sentence, a calibrated floor says "not stated", the
ANSWER path escalates once, and the quote is a sentence of what was read."""

import dataclasses
import hashlib
import json

import pytest

from router_train.reader.answer_floor import calibrated_floor
from tests.helpers.memory_runtime import CFG, build
from tiermem.data import load_conversations
from tiermem.data.tiermem_format import EXAMPLE_PATH
from tiermem.llm import ScriptedLLM
from tiermem.memory.extractive import AnswerReader, answerer_mode, load_answer_reader, load_floor, router_reader
from tiermem.settings.errors import ConfigError, DataError, MissingFileError
from tiermem.text.sentences import sentence_spans

EXTRACTIVE = dataclasses.replace(CFG, answerer="extractive")


class KeywordReader:
    """A stand-in cross-encoder: a sentence's logit is the highest score of the phrases it holds (-5 for none)."""

    def __init__(self, scores: dict[str, float]):
        self.scores, self.batches = scores, []

    def logits(self, questions, texts):
        self.batches.append(list(texts))
        return [max((v for k, v in self.scores.items() if k.lower() in t.lower()), default=-5.0) for t in texts]


@pytest.fixture
def conv():
    return next(c for c in load_conversations(EXAMPLE_PATH) if c.conv_id == "tomas-assistant")


def _runtime(tmp_path, conv, scores, floor=0.0, cfg=EXTRACTIVE):
    reader = KeywordReader(scores)
    return build(tmp_path, conv, cfg, answer_reader=AnswerReader(reader, floor, "test-reader")), reader


def _read_sentences(rt, page_ids):
    return {(t.turn_id, t.text[s:e]) for p in rt.memory.raw.get_many(page_ids) for t in p.turns
            for s, e in sentence_spans(t.text)}


def test_the_best_sentence_is_the_answer_and_its_quote_is_a_sentence_of_what_was_read(tmp_path, conv):
    rt, reader = _runtime(tmp_path, conv, {"border collie": 4.0, "dog": 1.0})
    rt.cfg = dataclasses.replace(rt.cfg, fixed_policy="research")
    out = rt.answer("What breed is Pepper?")
    assert out.answer_source == "reader" and out.research.stop_reason == "extractive" and out.cost.llm_calls == 0
    # every sentence read, one batch (the conversation fits the page bound: research reads it whole, no turn ranking)
    assert len(reader.batches) == 1
    ev = out.evidence
    assert ev.quote == "A three-year-old border collie called Pepper." and ev.turn_id == "s2-1"
    assert (ev.turn_id, ev.quote) in _read_sentences(rt, out.research.pages_read)
    assert ev.speaker == "Tomas" and ev.date == "17 March 2024" and out.reading.logit == 4.0
    assert out.answer == 'Tomas (17 March 2024): "A three-year-old border collie called Pepper."'
    # the reader saw each sentence with its day and speaker, relative dates made absolute
    seen = "17 March 2024: Tomas: Big news: yesterday (16 March 2024) I adopted a dog from the shelter!"
    assert seen in reader.batches[-1]


def test_under_the_floor_the_memory_does_not_state_it(tmp_path, conv, capsys):
    rt, _ = _runtime(tmp_path, conv, {"shelter": 1.5}, floor=2.0)
    rt.cfg = dataclasses.replace(rt.cfg, fixed_policy="research")
    out = rt.answer("What is Tomas's favourite film?")
    assert out.answer is None and out.evidence is None and not out.reading.stated and not out.escalated_once
    assert out.reading.best is not None and out.reading.logit == 1.5  # the closest sentence is kept, not shown as one
    from tiermem_cli.ingest import answer_lines

    lines = answer_lines(out)
    assert lines[0].startswith("answer: not stated: the memory does not state it")
    assert "under the reader's floor 2.00" in lines[0] and lines[1].startswith('closest: "')


def test_answer_under_the_floor_escalates_once_to_the_pages(tmp_path, conv):
    # "Priya loved Pepper" is in a page and in no summary unit (the extractive summarizer left it out)
    rt, reader = _runtime(tmp_path, conv, {"priya loved pepper": 3.0}, floor=2.0)
    assert not any("Priya loved Pepper" in u.text for u in rt.memory.summaries.units)
    out = rt.answer("Who loved Pepper?")
    assert out.action == "ANSWER" and out.escalated_once and out.summary is not None and out.research is not None
    assert len(reader.batches) == 2  # the summaries, then the pages: once, never again
    assert out.summary.answer is None and out.reading.stated and "Priya loved Pepper" in out.answer
    assert out.evidence.turn_id == "s3-3" and out.evidence.source == "page"
    assert (out.evidence.turn_id, out.evidence.quote) in _read_sentences(rt, out.research.pages_read)
    assert out.cost.pages_read == len(out.research.pages_read) > 0

    # nothing anywhere above the floor: one escalation, then "not stated"
    reader.scores, reader.batches = {}, []
    out = rt.answer("What is Tomas's favourite film?")
    assert out.escalated_once and len(reader.batches) == 2 and out.answer is None and not out.reading.stated


def test_answer_above_the_floor_stays_on_the_summaries(tmp_path, conv):
    rt, reader = _runtime(tmp_path, conv, {"riverside animal shelter": 3.0}, floor=2.0)
    out = rt.answer("Where does Tomas volunteer?")
    assert out.action == "ANSWER" and not out.escalated_once and out.research is None and len(reader.batches) == 1
    assert "Riverside animal shelter" in out.answer and out.evidence.source == "summary"
    unit_texts = " ".join(u.text for u in out.retrieved)
    assert out.evidence.quote in unit_texts and out.evidence.turn_id == "s1-1"


def test_answerer_setting():
    assert answerer_mode("auto", "local", "packaged:smollm2-135m-instruct") == "extractive"
    assert answerer_mode("auto", None, None) == "extractive"
    assert answerer_mode("auto", "openai", "gpt-4o-mini") == "llm"
    assert answerer_mode("auto", "local", "HuggingFaceTB/SmolLM2-1.7B-Instruct") == "llm"
    assert answerer_mode("extractive", "openai", "x") == "extractive"
    with pytest.raises(ConfigError, match="memory.answerer"):
        dataclasses.replace(CFG, answerer="reader")


def test_a_generating_answerer_keeps_the_lm_path(tmp_path, conv):
    llm = ScriptedLLM(lambda m: "Riverside animal shelter")
    rt = build(tmp_path, conv, dataclasses.replace(CFG, answerer="auto"), llm=llm)  # scripted: not the packaged model
    out = rt.answer("Where does Tomas volunteer?")
    assert out.reading is None and out.answer_source == "lm" and len(llm.calls) == 1


def test_calibrated_floor_separates_answerable_from_unanswerable():
    got = calibrated_floor([3.0, 2.5, 1.0, -1.0, -2.0, 0.5], [True, True, True, False, False, False])
    assert got["floor"] == 0.75 and got["tpr"] == 1.0 and got["fpr"] == 0.0 and got["youden_j"] == 1.0
    overlap = calibrated_floor([2.0, 0.0, 1.0, -1.0], [True, True, False, False])
    assert -1.0 < overlap["floor"] <= 2.0 and overlap["youden_j"] == 0.5
    with pytest.raises(DataError, match="answerable and unanswerable"):
        calibrated_floor([1.0, 2.0], [True, True])


def test_floor_is_read_with_the_reader_and_its_absence_is_a_named_error(tmp_path):
    weights = b"not really weights"
    (tmp_path / "model.safetensors").write_bytes(weights)
    with pytest.raises(ConfigError, match=r"no calibrated answer floor.*tiermem-router answer-floor reader="):
        load_floor(tmp_path)
    unbound = {"heldout": {"answer_floor": {"floor": 1.25}}}  # bound to no weights: not used (issue 41)
    (tmp_path / "reader_pretrain.json").write_text(json.dumps(unbound))
    with pytest.raises(ConfigError, match="names no weights it was calibrated for"):
        load_floor(tmp_path)
    unbound["heldout"]["answer_floor"]["reader_weights_sha256"] = hashlib.sha256(weights).hexdigest()
    (tmp_path / "reader_pretrain.json").write_text(json.dumps(unbound))
    assert load_floor(tmp_path) == 1.25
    floor_file = tmp_path / "answer_floor.json"
    floor_file.write_text(json.dumps({"floor": -0.5, "reader_weights_sha256": hashlib.sha256(weights).hexdigest()}))
    assert load_floor(tmp_path) == -0.5  # the calibration written for these weights wins
    (tmp_path / "model.safetensors").write_bytes(b"retrained")
    with pytest.raises(ConfigError, match="calibrated for other weights"):
        load_floor(tmp_path)
    with pytest.raises(MissingFileError, match="make reader-pretrain"):
        load_answer_reader(tmp_path / "absent")


def test_a_unit_reader_router_answers_with_its_own_reader(tmp_path, conv):
    weights = b"router reader"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "model.safetensors").write_bytes(weights)
    (tmp_path / "run" / "answer_floor.json").write_text(
        json.dumps({"floor": 1.0, "reader_weights_sha256": hashlib.sha256(weights).hexdigest()}))

    class Router:
        reader = KeywordReader({"riverside": 2.0})
        run_dir = tmp_path / "run"

        def route(self, question, summaries):
            return type("D", (), {"action": "ANSWER", "parsed_ok": True})()

    assert router_reader(Router()).floor == 1.0 and router_reader(object()) is None
    rt, configured = _runtime(tmp_path, conv, {"riverside": 9.0}, floor=5.0)
    out = rt.answer("Where does Tomas volunteer?", Router())
    assert out.reading.reader == str(tmp_path / "run") and out.reading.logit == 2.0 and not configured.batches


class SpanReader(KeywordReader):
    """A reader that also predicts spans (issue 40's seam for the span reader): the span is the phrase it scores."""

    def best_spans(self, questions, texts):
        out = []
        for t in texts:
            phrase = max(self.scores, key=lambda k: (k.lower() in t.lower(), self.scores[k]))
            start = t.lower().find(phrase.lower())
            out.append((start, start + len(phrase), self.scores[phrase]) if start >= 0 else (0, 0, -5.0))
        return out


def test_a_reader_that_predicts_spans_answers_with_the_span_and_quotes_the_sentence(tmp_path, conv):
    reader = SpanReader({"border collie": 4.0})
    rt = build(tmp_path, conv, dataclasses.replace(EXTRACTIVE, fixed_policy="research"),
               answer_reader=AnswerReader(reader, 0.0, "span-reader"))
    out = rt.answer("What breed is Pepper?")
    assert out.answer == "border collie"
    assert out.evidence.quote == "A three-year-old border collie called Pepper." and out.evidence.turn_id == "s2-1"


def test_an_empty_span_falls_back_to_the_sentence(tmp_path, conv):
    from tiermem.memory.extractive import span_answer

    class Empty:
        def best_spans(self, questions, texts):
            return [(3, 3, 0.0)]

    assert span_answer(Empty(), "q", "some text") is None
    assert span_answer(object(), "q", "some text") is None
