"""Probe table (docs/probes.md), "parsing, inputs, endpoints, dates": long and hostile LLM
replies, request fields without a bound, free-text values, judge failures, date and number misreads, malformed
endpoint replies, the calendar's ends, malformed records and non-finite config numbers.

Each probe uses its own inputs and goes through the entry point a user reaches (the stage's `main`, the HTTP app,
the LLM client against a local endpoint) where one exists."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import pytest

from labeling.answer_judges import LexicalJudge, parse_correct_wrong, parse_sufficiency
from labeling.audit import AuditConfig, audit
from labeling.audit import main as audit_main
from labeling.dataset import RecordError
from tiermem.llm import LLMError, ScriptedLLM
from tiermem.memory.replies import _complete_fact_objects, parse_facts_reply, parse_plan_reply
from tiermem.settings.config import ConfigError, parse_config
from tiermem.text.answer_match import canonical_numbers, find_dates
from tiermem.text.json_text import MAX_FAILED_STARTS, MAX_REPLY_CHARS, first_json_object, json_values

# ---- 3: a long or hostile LLM reply is read in linear time, up to a bound ----------------------------------------

HOSTILE_REPLIES = {
    "200,000 '{'": "{" * 200_000,
    "1 MB of '{'": "{" * 1_000_000,
    "100,000 deep": "[" * 100_000 + "]" * 100_000,
    "1 MB of half objects": 'x{"a" ' * 170_000,
    "20,000 facts cut off": '{"facts": [' + '{"fact": "f", "quote": "q"}, ' * 20_000,
}


@pytest.mark.parametrize("name", list(HOSTILE_REPLIES))
def test_a_hostile_reply_is_parsed_in_bounded_time_without_recursion_error(name):
    reply = HOSTILE_REPLIES[name]
    started = time.perf_counter()
    for parse in (first_json_object, parse_facts_reply, parse_plan_reply, parse_sufficiency, parse_correct_wrong,
                  _complete_fact_objects):
        parse(reply)  # no RecursionError, no minutes: before, 200,000 '{' took 7 s and 1 MB never finished
    # generous for a loaded 2-core machine; the quadratic scan took 7 s for the first reply alone
    assert time.perf_counter() - started < 10


def test_json_is_still_found_after_prose_and_failed_starts_and_the_bound_is_logged(caplog):
    noise = '{"a" } ' * (MAX_FAILED_STARTS - 1)  # each a start that fails
    assert first_json_object(f'Sure! {noise}```json\n{{"sufficient": true, "reason": "r"}}\n```') == {
        "sufficient": True, "reason": "r"}
    assert parse_sufficiency('I think {so} [sic]: {"sufficient": true, "reason": "ok"}').sufficient is True
    # past the bound of failed starts, a later object is not searched for (the scan stays linear)
    assert first_json_object('{"a" } ' * MAX_FAILED_STARTS + '{"label": "CORRECT"}') is None
    assert [v for v, _, _ in json_values('[1] {"a": 2} [3, [4]]')] == [[1], {"a": 2}, [3, [4]]]
    with caplog.at_level(logging.WARNING, logger="tiermem.text.json_text"):
        assert first_json_object('{"label": "WRONG", "reason": "' + "x" * MAX_REPLY_CHARS + '"}') is None
        assert parse_correct_wrong("x " * MAX_REPLY_CHARS + '{"label": "CORRECT"}') == (None, "")  # past the bound
    assert f"only its first {MAX_REPLY_CHARS} are read" in caplog.text
    facts = parse_facts_reply('{"facts": [{"fact": "Ana moved", "quote": "I moved"}, {"fact": "Bo')
    assert [f.fact for f in facts] == ["Ana moved"]


# ---- 4: every /route field that reaches a prompt has a length bound ----------------------------------------------

def test_a_long_summary_date_is_a_422_naming_the_field_and_its_bound():
    from fastapi.testclient import TestClient

    from serving.routers.top1 import Top1ScoreRouter
    from serving.server import ServeConfig, create_app

    client = TestClient(create_app(Top1ScoreRouter(), ServeConfig()), raise_server_exceptions=False)
    body = {"question": "When did Ana move?", "summaries": [{"text": "Ana moved.", "date": "7 May 2023", "score": 0.5},
                                                           {"text": "Bo too.", "date": "9" * 8192, "score": 0.2}]}
    r = client.post("/route", json=body)
    assert r.status_code == 422 and "summaries[1].date has 8192 characters" in r.text and "max_date_chars" in r.text
    body["summaries"][1]["date"] = "Tuesday, 7 May 2023, 1:56 pm"
    assert client.post("/route", json=body).status_code == 200
    with pytest.raises(ConfigError, match="max_date_chars"):
        ServeConfig(max_date_chars=0)


# ---- 6, 11, 14: dates and numbers -------------------------------------------------------------------------------

def test_date_work_per_text_is_bounded_for_odd_spellings():
    find_dates("yesterday", date(2023, 5, 8))  # dateparser's first import
    spellings = ["pAsT mOn", "PAST mon", "past MON", "Past Mon", "pASt moN", "last FRI", "NeXt WeD", "THIS tue"]
    text = " and ".join(spellings * 20)[:1024]
    started = time.perf_counter()
    found = find_dates(text, date(2023, 5, 8))
    assert time.perf_counter() - started < 3  # 4 s before: language detection per distinct spelling
    assert found and all(m.when.lo is not None for m in found)
    assert len(find_dates("on 7 May 2023, " * 1000, None)) == 200  # MAX_MENTIONS_PER_TEXT: bounded work


@pytest.mark.parametrize(("text", "expected"), [
    ("it happened 2023-05-07T10:00:00Z", [(2023, 5, 7)]),
    ("at 2023-05-07T10:00+02:00 sharp", [(2023, 5, 7)]),
    ("Jan 32", []),
    ("on 32 January", []),
    ("29 February", [(None, 2, 29)]),
    ("May I ask you something?", []),
    ("Wow. May we come along?", []),
    ("they will march on Sunday", []),
    ("In May we went hiking", [(None, 5, None)]),
    ("March was cold", [(None, 3, None)]),
])
def test_dates_are_not_misread(text, expected):
    assert [(m.when.year, m.when.month, m.when.day) for m in find_dates(text)] == expected


def test_a_year_less_29_february_takes_the_nearest_leap_year():
    [m] = find_dates("on 29 February", date(2023, 5, 1))
    assert (m.when.year, m.when.month, m.when.day) == (2024, 2, 29)


@pytest.mark.parametrize(("words", "digits"), [
    ("twenty-five", "25"), ("Twenty five cats", "25 cats"), ("three hundred", "300"),
    ("a hundred and twenty-one", "121"), ("two thousand and ten", "2010"), ("one two three", "1 2 3"),
])
def test_number_words_of_more_than_one_word_are_one_number(words, digits):
    assert canonical_numbers(words) == digits


def test_the_lexical_judge_calls_a_wrong_day_wrong():
    judge = LexicalJudge()
    wrong = judge.judge("When?", "7 May 2023", "8 May 2023", "2")
    assert not wrong.correct and "contradicts the gold's 7 may 2023" in wrong.reason and wrong.score > 0.3
    assert judge.judge("When?", "7 May 2023", "May 7th, 2023", "2").correct
    assert judge.judge("When?", "7 May 2023", "on 7 May", "2").correct  # year-less: no contradiction
    assert not judge.judge("When?", "twenty-five", "205", "2").correct


@pytest.mark.parametrize("base", [date(9999, 12, 31), date(1, 1, 1)])
def test_relative_dates_at_the_calendar_ends_are_no_date_not_a_crash(base):
    text = ("tomorrow, yesterday, the day after tomorrow, last week, next week, this week, next month, last month, "
            "next year, last year, two years ago, the 31st, the day before 9 June 2023, last weekend, next sat, "
            "in December")
    for mention in find_dates(text, base):
        assert mention.when.lo is None or date.min <= mention.when.lo <= mention.when.hi <= date.max
    from tiermem.memory.summaries import absolutize

    assert absolutize("yesterday we met", base.isoformat()).startswith("yesterday")


def test_a_question_date_that_is_no_date_is_a_data_error_at_load(tmp_path):
    from tiermem.data.conversations import load_conversations
    from tiermem.settings.errors import DataError

    conv = {"format": "tiermem-conversations", "version": 1, "conversations": [{
        "id": "c1", "turns": [{"id": "t1", "session": "s1", "speaker": "Ana", "text": "I moved to Lyon.",
                               "timestamp": "2023-05-07"}],
        "questions": [{"id": "q1", "question": "Where did Ana move?", "answer": "Lyon", "evidence": ["t1"],
                       "date": "the 45th of Smarch"}]}]}
    path = tmp_path / "conv.json"
    path.write_text(json.dumps(conv))
    with pytest.raises(DataError, match=r"questions\[0\]: field 'date' 'the 45th of Smarch' is not a date"):
        load_conversations(str(path))
    conv["conversations"][0]["questions"][0]["date"] = "9999-12-31"
    path.write_text(json.dumps(conv))
    assert load_conversations(str(path))[0].questions[0].date == "9999-12-31"


# ---- 7: a free-text value is text ---------------------------------------------------------------------------------

@pytest.mark.parametrize("question", ["Tomas: when did he adopt Pepper?", "what about dog #2?",
                                      "- what did Ana buy?", "[s1] yes: no", "null?", "42"])
def test_ask_question_values_are_text_not_yaml(question):
    from tiermem_cli.ingest import IngestConfig

    cfg = parse_config(IngestConfig, None, [f"question={question}", "memory.max_rounds=3", "router=~"])
    assert cfg.question == question and cfg.memory.max_rounds == 3 and cfg.router == "~"


def test_typed_keys_keep_their_yaml_typing():
    from labeling.audit import AuditConfig

    cfg = parse_config(AuditConfig, None, ["n=7", "baseline=null", "judge.temperature=0.5", "judge.model=a: b #c"])
    assert cfg.n == 7 and cfg.baseline is None and cfg.judge.temperature == 0.5 and cfg.judge.model == "a: b #c"
    with pytest.raises(ConfigError, match="expected int"):
        parse_config(AuditConfig, None, ["n=seven"])


# ---- 10: audit when judge calls fail, and a kappa that means little ----------------------------------------------

def _label_records(path: Path, n: int = 8, **overrides: Any) -> Path:
    rows = []
    for i in range(n):
        label = "ANSWER" if i % 2 else "ESCALATE"
        rows.append({"conv_id": f"k{i % 4}", "qid": f"p{i}", "source": "tiermem", "split": "test",
                     "question": f"Where did Bo go on trip {i}?", "gold_answer": f"Town {i}", "label": label,
                     "router_summaries": [{"text": f"Bo: went to Town {i}", "date": "3 March 2024"}],
                     "answer_recall": 1.0, "gold_in_summary_pages": 1, "n_gold": 1, "gold_in_research_pages": 1,
                     "s_ok": label == "ANSWER", "r_ok": True, **overrides})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _audit_with(tmp_path: Path, responder: Callable[[Any], str], capsys: Any, n: int = 8) -> tuple[int, str]:
    import labeling.audit as audit_module

    tmp_path.mkdir(parents=True, exist_ok=True)
    data = _label_records(tmp_path / "r.jsonl", n)
    real = audit_module.audit
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(audit_module, "audit", lambda cfg: real(cfg, judge_llm=ScriptedLLM(responder)))
        rc = audit_main([f"data={data}", f"output_dir={tmp_path / 'a'}", f"n={n}"])
    captured = capsys.readouterr()
    return rc, captured.out + captured.err


def test_audit_exits_6_when_every_judge_call_failed_and_1_when_some_did(tmp_path, capsys):
    def fail(messages):
        raise LLMError("HTTP 500 from the judge")

    rc, out = _audit_with(tmp_path / "all", fail, capsys)
    assert rc == 6 and "every judge call failed (8 LLM error(s)" in out and "HTTP 500" in out
    assert (tmp_path / "all" / "a" / "audit.md").is_file()  # the sheet is still there for a person
    rc, out = _audit_with(tmp_path / "empty", lambda m: "{}", capsys)
    assert rc == 6 and "8 unreadable" in out
    calls = iter(range(100))
    rc, out = _audit_with(tmp_path / "some", lambda m: "{}" if next(calls) % 2 else
                          '{"sufficient": true, "reason": "stated"}', capsys)
    assert rc == 1 and "4 of 8 judge call(s) gave no verdict" in out


def test_audit_exits_7_when_the_judge_endpoint_is_unreachable(tmp_path, capsys, monkeypatch):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("R4_KEY", "x")
    data = _label_records(tmp_path / "r.jsonl", 2)
    rc = audit_main([f"data={data}", f"output_dir={tmp_path / 'a'}", "judge.backend=openai", "judge.model=m",
                     f"judge.base_url=http://127.0.0.1:{port}/v1", "judge.api_key_env=R4_KEY", "judge.max_retries=0",
                     "judge.timeout_s=5"])
    assert rc == 7, capsys.readouterr().err


def test_a_kappa_from_few_records_or_a_constant_judge_is_printed_with_n_interval_and_warning(tmp_path, capsys):
    rc, out = _audit_with(tmp_path / "const", lambda m: '{"sufficient": true, "reason": "r"}', capsys, n=4)
    assert rc == 0
    first = out.splitlines()[0]
    assert "n=4" in first and "95% interval" in first and "only 4 judged record(s) (< 30)" in first
    assert "the judge always said ANSWER" in first
    summary = json.loads((tmp_path / "const" / "a" / "summary.json").read_text())["judge"]
    assert len(summary["kappa_warnings"]) == 2 and summary["cohen_kappa"] == 0.0  # 0.0 by construction, flagged
    sheet = (tmp_path / "const" / "a" / "audit.md").read_text()
    assert "warning: the judge always said ANSWER" in sheet


def test_a_kappa_interval_comes_from_the_judged_records(tmp_path):
    data = _label_records(tmp_path / "r.jsonl", 40)
    answers = iter([i % 3 != 0 for i in range(40)])
    judge = ScriptedLLM(lambda m: json.dumps({"sufficient": next(answers), "reason": "r"}))
    summary = audit(AuditConfig(data=str(data), n=40, output_dir=str(tmp_path / "a")), judge_llm=judge)["judge"]
    span = summary["kappa_interval"]
    assert summary["judged"] == 40 and span["lo"] <= summary["cohen_kappa"] <= span["hi"] and span["n_boot"] > 0
    assert not any("only" in w for w in summary["kappa_warnings"])


# ---- 13: a malformed endpoint reply is that call's LLMError, retried then recorded --------------------------------

GOOD = {"choices": [{"message": {"role": "assistant", "content": "ok"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
MALFORMED = {  # the prompt that asks for it -> (content type, body, words of the recorded error)
    "plain": ("text/plain", b"hello there", "not JSON"),
    "html": ("text/html", b"<html><body>502 Bad Gateway</body></html>", "not JSON"),
    "empty choice": ("application/json", json.dumps({"choices": [{}]}).encode(), "no message object"),
    "number content": ("application/json", json.dumps({"choices": [{"message": {"content": 5}}]}).encode(),
                       "content is int"),
    "string usage": ("application/json", json.dumps({**GOOD, "usage": {"prompt_tokens": "many",
                                                                       "completion_tokens": 1}}).encode(),
                     "usage.prompt_tokens is 'many'"),
    "bad utf-8": ("application/json", b'{"choices": [{"message": {"content": "caf\xe9"}}]}', "not UTF-8"),
    "surrogate": ("application/json", b'{"choices": [{"message": {"content": "a\\ud800b"}}]}', "lone surrogate"),
    "deep": ("application/json", b"[" * 100_000 + b"]" * 100_000, "nested deeper"),
    "no choices": ("application/json", b'{"choices": []}', "without choices"),
    "list body": ("application/json", b"[1, 2]", "not a chat completion object"),
}


def test_malformed_endpoint_replies_are_llm_errors_for_their_call_after_retries():
    from tests.helpers.fake_openai import fake_openai
    from tiermem.llm.remote import OpenAIChatLLM

    hits: dict[str, int] = {}

    def reply(messages: list[dict[str, Any]]) -> str | tuple[str, bytes]:
        kind = messages[-1]["content"]
        hits[kind] = hits.get(kind, 0) + 1
        return MALFORMED[kind][:2] if kind in MALFORMED else " fine "

    with fake_openai(reply) as url:
        llm = OpenAIChatLLM("m", base_url=url, max_retries=1, structured="none")
        kinds = [*MALFORMED, "good"]
        results = llm.chat_many([[{"role": "user", "content": k}] for k in kinds])
    for kind, result in zip(kinds, results, strict=True):
        if kind == "good":
            assert result.text == "fine" and result.input_tokens == 1
            continue
        assert isinstance(result, LLMError), (kind, result)
        assert MALFORMED[kind][2] in str(result) and "after 2 attempt(s)" in str(result), (kind, str(result))
        assert hits[kind] == 2  # retried once (max_retries=1), then recorded
    assert llm.stats["errors"] == len(MALFORMED) and llm.stats["new_calls"] == 1


# ---- 15: malformed records to audit and unit-reader are named -----------------------------------------------------

AUDIT_RECORD_PROBES = [  # (line text, words of the error)
    ("123", "line 2: a label record must be a JSON object, got int"),
    ("null", "line 2: a label record must be a JSON object, got NoneType"),
    ('["a"]', "line 2: a label record must be a JSON object, got list"),
    ('{"router_summaries": "Bo went"}', "line 2: field 'router_summaries' must be a list"),
    ('{"router_summaries": [{"text": 5}]}', "field 'text' must be a string"),
    ('{"router_summaries": [{"text": "t", "date": 2024}]}', "field 'router_summaries[0].date' must be a string"),
    ('{"qid": 7}', "line 2: field 'qid' must be a string, got 7"),
    ('{"label": "MAYBE"}', "line 2: field 'label' must be ANSWER or ESCALATE or null, got 'MAYBE'"),
    ('{"gold_answer": null}', "line 2: field 'gold_answer' must be a string"),
]


@pytest.mark.parametrize(("line", "needle"), AUDIT_RECORD_PROBES)
def test_malformed_audit_records_are_exit_3_naming_file_line_and_field(tmp_path, capsys, line, needle):
    good = _label_records(tmp_path / "ok.jsonl", 1).read_text()
    if line.startswith("{"):
        row = json.loads(good)
        row.update(json.loads(line))
        line = json.dumps(row) if "qid" in json.loads(line) else json.dumps({**row, "qid": "p9"})
    path = tmp_path / "r.jsonl"
    path.write_text(good + line + "\n")
    assert audit_main([f"data={path}", f"output_dir={tmp_path / 'a'}"]) == 3
    err = capsys.readouterr().err
    assert "RecordError" in err and f"{path}: " in err and needle in err, err


def test_invalid_utf8_in_audit_records_names_the_file_and_offset(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    path.write_bytes(_label_records(tmp_path / "ok.jsonl", 1).read_bytes() + b'{"q": "\xff"}\n')
    assert audit_main([f"data={path}", f"output_dir={tmp_path / 'a'}"]) == 3
    assert "byte" in capsys.readouterr().err


def _reader_rows(targets: list[Any] | None = None, label: Any = "ANSWER") -> list[dict[str, Any]]:
    rows = []
    for i in range(4):
        unit = {"unit_id": f"u{i}", "text": f"Bo: went to Town {i}", "date": None, "rank": 1, "s_ok": True,
                "answer_recall": 1.0}
        rows.append({"conv_id": f"k{i % 2}", "qid": f"p{i}", "question": f"Where did Bo go {i}?", "split": "train",
                     "router_summaries": [{"text": unit["text"], "date": None, "score": 0.5}], "label": label,
                     "unit_targets": [unit] if targets is None else targets})
    return rows


@pytest.mark.parametrize(("change", "needle"), [
    ({"unit_targets": None}, "field 'unit_targets' must be a list"),
    ({"unit_targets": [{"text": "t", "s_ok": True, "answer_recall": 0.5}]}, "unit_targets[0]'.rank must be an integer"),
    ({"unit_targets": [{"text": "t", "rank": 1, "s_ok": True, "answer_recall": 1.5}]}, "answer_recall must be"),
    ({"unit_targets": [{"text": "t", "rank": 1, "answer_recall": 0.5}]}, "missing field 's_ok'"),
    ({"label": "MAYBE"}, "field 'label' must be ANSWER or ESCALATE"),
    ({"qid": 3}, "field 'qid' must be a string"),
    ({"router_summaries": {"text": "t"}}, "field 'router_summaries' must be a list"),
])
def test_unit_reader_records_are_checked_before_any_training(tmp_path, change, needle):
    from router_train.reader.unit_inputs import natural_records

    rows = _reader_rows()
    rows[2].update(change)
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(RecordError, match="record 2|line 3") as err:  # the reader's checks, or the loader's
        natural_records(str(path), "train")
    assert needle in str(err.value)


def test_unit_reader_without_any_unit_target_is_a_named_error(tmp_path):
    from router_train.reader.targets import pairs
    from router_train.reader.unit_inputs import natural_records
    from tiermem.settings.errors import DataError

    path = tmp_path / "r.jsonl"
    nulls = [{"text": "t", "rank": 1, "s_ok": False, "answer_recall": None}]
    for targets in ([], nulls):
        path.write_text("".join(json.dumps(r) + "\n" for r in _reader_rows(targets)))
        with pytest.raises(DataError, match="none of 4 record"):
            pairs(natural_records(str(path), "train"), 2)


# ---- 16: config numbers that are not finite ------------------------------------------------------------------------

@pytest.mark.parametrize("override", ["l2=.nan", "learning_rate=.inf", "weight_decay=-.inf", "text_weights=[0, .nan]"])
def test_non_finite_unit_reader_numbers_are_config_errors(override):
    from router_train.reader.unit_reader import UnitReaderConfig

    with pytest.raises(ConfigError, match=rf"{override.split('=')[0]}.*must be a finite number"):
        parse_config(UnitReaderConfig, None, [override])


def test_non_finite_numbers_in_any_config_and_trainer_mapping_are_config_errors_exit_2(tmp_path, capsys):
    from router_train.fit_features import FitFeaturesConfig
    from router_train.lm.recipe_config import RecipeConfig
    from tiermem_cli import cli

    with pytest.raises(ConfigError, match=r"l2: must be a finite number, got nan"):
        parse_config(FitFeaturesConfig, None, ["l2=.nan"])
    with pytest.raises(ConfigError, match=r"trainer.learning_rate: must be a finite number, got inf"):
        parse_config(RecipeConfig, None, ["trainer.learning_rate=.inf"])
    assert cli.main(["audit", "judge.temperature=.nan", f"output_dir={tmp_path / 'a'}"]) == 2
    assert "judge.temperature: must be a finite number" in capsys.readouterr().err


@pytest.mark.parametrize("asked", ["9999-12-31T23:59:59", "0001-01-01"])
def test_a_label_run_with_questions_asked_at_the_calendar_ends_keeps_every_record(tmp_path, asked):
    """Before: `label` lost the whole run (0 records) to an OverflowError in the date arithmetic."""
    from labeling.config import LabelConfig
    from labeling.roles import Roles
    from labeling.run import run as label_run
    from tests.helpers.label_helpers import SMALL_MEMORY, HashEmbedder
    from tiermem.data.tiermem_format import EXAMPLE_PATH
    from tiermem.settings.config import from_dict

    data = json.loads(EXAMPLE_PATH.read_text())
    data["conversations"] = data["conversations"][:1]
    for q in data["conversations"][0]["questions"]:
        q["date"] = asked
        q["question"] = f"{q['question']} (asked yesterday, about last week and next year)"
    path = tmp_path / "conv.json"
    path.write_text(json.dumps(data))
    cfg = from_dict(LabelConfig, {"output_dir": str(tmp_path / "label"), "data_path": str(path), "label_rule":
                                  "evidence", "generate_answers": False, "memory": {**SMALL_MEMORY, "max_rounds": 1}})
    label_run(cfg, Roles({}, need_answerer=False), embedder=HashEmbedder())
    records = [json.loads(x) for x in (tmp_path / "label" / "all_records.jsonl").read_text().splitlines()]
    assert len(records) >= len(data["conversations"][0]["questions"])
    assert not [r["error"] for r in records if r.get("error")]
