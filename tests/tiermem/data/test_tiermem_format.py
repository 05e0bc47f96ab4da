"""Your own conversations: the tiermem format round-trips, every malformed variant gets a named error, and
`tiermem-router label` runs on the example shipped in the package."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from tests.helpers.fake_openai import fake_openai
from tiermem.data import load_conversations
from tiermem.data.conversations import SAMPLE_PATH, DataError
from tiermem.data.tiermem_format import EXAMPLE_PATH, TiermemFormatError, dump_tiermem, load_tiermem

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = json.loads(EXAMPLE_PATH.read_text())


def _same(a, b) -> None:
    assert [replace(c, source="") for c in a] == [replace(c, source="") for c in b]


def test_example_loads_and_round_trips_through_json_and_jsonl(tmp_path):
    convs = load_conversations(EXAMPLE_PATH)
    assert [c.conv_id for c in convs] == ["tomas-assistant", "ines-travel"]
    tomas = convs[0]
    assert tomas.speakers == ["Tomas", "assistant"] and tomas.turns[0].session_id == "s1"
    q5 = next(q for q in tomas.questions if q.qid == "q5")
    assert q5.evidence == ["s1-1", "s3-5"] and q5.category == "multi-hop" and q5.date == "2024-04-10"
    assert next(q for q in tomas.questions if q.qid == "q6").evidence == []  # evidence is optional
    for name in ("copy.json", "copy.jsonl"):
        path = dump_tiermem(convs, tmp_path / name)
        _same(load_conversations(path), convs)  # auto-detected: the .json header, the .jsonl suffix
        _same(load_conversations(path, fmt="tiermem"), convs)
    jsonl = (tmp_path / "copy.jsonl").read_text().splitlines()
    assert json.loads(jsonl[0]) == {"format": "tiermem-conversations", "version": 1} and len(jsonl) == 3


def test_other_loaders_convert_into_the_format(tmp_path):
    locomo = load_conversations(SAMPLE_PATH)
    _same(load_tiermem(dump_tiermem(locomo, tmp_path / "from_locomo.jsonl")), locomo)


def test_category_exclusion_and_wrong_format_hints(tmp_path):
    convs = load_conversations(EXAMPLE_PATH, exclude_categories=("temporal",))
    assert all(q.category != "temporal" for c in convs for q in c.questions)
    with pytest.raises(DataError, match="tiermem conversation file, but the format is set to 'locomo'"):
        load_conversations(EXAMPLE_PATH, fmt="locomo")
    path = dump_tiermem(convs, tmp_path / "x.jsonl")
    with pytest.raises(DataError, match="pass dataset_format=tiermem"):
        load_conversations(path, fmt="longmemeval")


def _turn(doc, i=0, conv=0):
    return doc["conversations"][conv]["turns"][i]


def _question(doc, i=0, conv=0):
    return doc["conversations"][conv]["questions"][i]


WHERE = r"example\.json: conversations\[0\] \(conversation 'tomas-assistant'\)"
MALFORMED = [
    ("bad format name", lambda d: d.update(format="locomo"), r"not a tiermem conversation file"),
    ("newer version", lambda d: d.update(version=2), r"field 'version' is 2; this tiermem reads versions \[1\]"),
    ("unknown top-level key", lambda d: d.update(convs=[]), r"unknown top-level field\(s\) \['convs'\]"),
    ("conversations not a list", lambda d: d.update(conversations={}), r"field 'conversations' must be a list"),
    ("no conversations", lambda d: d.update(conversations=[]), r"no conversations"),
    ("conversation id missing", lambda d: d["conversations"][0].pop("id"),
     r"conversations\[0\]: missing field 'id'"),
    ("duplicate conversation id", lambda d: d["conversations"][1].update(id="tomas-assistant"),
     r"conversation id\(s\) \['tomas-assistant'\] repeat"),
    ("turns empty", lambda d: d["conversations"][0].update(turns=[]), WHERE + r": field 'turns' must be a non-empty"),
    ("turn speaker missing", lambda d: _turn(d).pop("speaker"), WHERE + r" turns\[0\]: missing field 'speaker'"),
    ("turn text not a string", lambda d: _turn(d).update(text=3), r"turns\[0\]: field 'text' must be a string"),
    ("turn timestamp empty", lambda d: _turn(d, 2).update(timestamp=" "), r"turns\[2\]: field 'timestamp' is empty"),
    ("misspelled turn key", lambda d: _turn(d).update(speeker="x"), r"turns\[0\]: unknown field\(s\) \['speeker'\]"),
    ("turn not an object", lambda d: d["conversations"][0]["turns"].append("hi"),
     r"turns\[19\]: expected an object, got str"),
    ("duplicate turn id", lambda d: _turn(d, 1).update(id="s1-1"), WHERE + r": field 'turns': turn id\(s\) \['s1-1'\]"),
    ("session resumes", lambda d: d["conversations"][0]["turns"].append(
        {"id": "late", "session": "s1", "timestamp": "2024-05-01", "speaker": "Tomas", "text": "x"}),
     r"turns\[19\]: field 'session': session 's1' resumes after another session"),
    ("question answer missing", lambda d: _question(d).pop("answer"),
     WHERE + r" questions\[0\]: missing field 'answer'"),
    ("question answer bool", lambda d: _question(d).update(answer=True), r"questions\[0\]: field 'answer' must be"),
    ("question text missing", lambda d: _question(d).pop("question"), r"questions\[0\]: missing field 'question'"),
    ("evidence unknown", lambda d: _question(d).update(evidence=["s1-1", "nope"]),
     r"questions\[0\]: field 'evidence' names unknown turn id\(s\) \['nope'\]"),
    ("evidence not a list", lambda d: _question(d).update(evidence="s1-1"), r"field 'evidence' must be a list"),
    ("category a list", lambda d: _question(d).update(category=["a"]), r"field 'category' must be a string or"),
    ("duplicate question id", lambda d: _question(d, 1).update(id="q1"),
     r"questions\[1\]: field 'id': question id 'q1'"),
    ("questions not a list", lambda d: d["conversations"][0].update(questions={}), r"field 'questions' must be a list"),
]


@pytest.mark.parametrize("mutate, message", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_json_gets_a_named_error(tmp_path, mutate, message):
    doc = copy.deepcopy(EXAMPLE)
    mutate(doc)
    path = tmp_path / "example.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TiermemFormatError, match=message):
        load_conversations(path)


def test_malformed_jsonl_names_the_line(tmp_path):
    header = json.dumps({"format": "tiermem-conversations", "version": 1})
    conv = json.dumps(EXAMPLE["conversations"][0])
    cases = [
        ([header, conv, "{not json"], r"mine\.jsonl: line 3: not valid JSON"),
        ([conv], r"mine\.jsonl: line 1: not a tiermem conversation file"),
        ([header, conv, conv], r"mine\.jsonl: conversation id\(s\) \['tomas-assistant'\] repeat"),
        ([header, json.dumps({**EXAMPLE["conversations"][1], "turns": "x"})],
         r"line 2 \(conversation 'ines-travel'\): field 'turns' must be a non-empty list"),
        ([""], r"mine\.jsonl: empty file; the first line must be the header"),
    ]
    path = tmp_path / "mine.jsonl"
    for lines, message in cases:
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(TiermemFormatError, match=message):
            load_conversations(path)
    with pytest.raises(FileNotFoundError, match="absent.jsonl"):
        load_conversations(tmp_path / "absent.jsonl")


def test_readme_converter_from_openai_messages(tmp_path, monkeypatch):
    """docs/formats.md's converter (OpenAI-style message lists -> the format) runs and its output loads."""
    doc = (ROOT / "docs" / "formats.md").read_text()
    section = doc.split("## Your own conversations", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/formats.md", "exec"), {"__name__": "formats_doc"})  # noqa: S102 - our own docs
    convs = load_conversations(tmp_path / "my_agent.jsonl")
    assert convs and all(c.turns for c in convs) and convs[0].questions[0].evidence


def test_label_cli_runs_on_the_example_file(tmp_path, capsys, monkeypatch):
    """`tiermem-router label --config configs/label/own_conversations.yaml` on the packaged example; the
    answerer is an OpenAI-compatible endpoint on loopback (the config's local model is what `make label` uses)."""
    from datasets import load_from_disk

    from tiermem_cli.cli import main

    monkeypatch.chdir(ROOT)
    with fake_openai() as base_url:
        rc = main(["label", "--config", "configs/label/own_conversations.yaml", f"data_path={EXAMPLE_PATH}",
                   f"output_dir={tmp_path / 'label'}", "llm.answerer.backend=openai", "llm.answerer.model=fake",
                   f"llm.answerer.base_url={base_url}", "memory.embedder=hashing", "memory.tokenizer=whitespace",
                   "memory.page_tokens=120"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "labeled 11 questions (0 errors)" in out
    dataset = load_from_disk(str(tmp_path / "label" / "dataset"))
    rows = [r for split in dataset.values() for r in split]
    assert {r["source"] for r in rows} == {"tiermem"} and {r["conv_id"] for r in rows} == {"tomas-assistant",
                                                                                            "ines-travel"}
    q5 = next(r for r in rows if r["conv_id"] == "tomas-assistant" and r["qid"] == "q5")
    assert q5["evidence_ids"] == ["s1-1", "s3-5"] and q5["category"] == "multi-hop" and q5["label_rule"] == "evidence"
    assert q5["question_date"] == "2024-04-10"
