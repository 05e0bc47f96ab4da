"""Data rules: a rerun keeps the finished outputs (JSONL split on "\n" only, outputs written then swapped in), and
no garbage becomes memory (bad timestamps, oversized turns, invalid UTF-8, duplicate ids among many turns, empty
turns)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from labeling.config import LabelConfig
from labeling.dataset import RecordError, load_split
from labeling.roles import Roles
from labeling.run import recover_outputs, run
from tests.helpers.label_helpers import SMALL_MEMORY, HashEmbedder, answer_from_prompt
from tiermem.data import load_conversations
from tiermem.data.conversations import DataError
from tiermem.data.textfile import jsonl_records
from tiermem.data.tiermem_format import EXAMPLE_PATH, TiermemFormatError, load_tiermem
from tiermem.llm import ScriptedLLM
from tiermem.memory.raw_store import whitespace_tokens
from tiermem.memory.runtime import MemoryConfig, MemoryRuntime
from tiermem.memory.summaries import HashingEmbedder
from tiermem.runs.rundir import claim_output_dir
from tiermem.settings.config import from_dict
from tiermem.settings.errors import EXIT_DATA, EXIT_STORE
from tiermem_cli import cli

FIXTURES = Path(__file__).parents[2] / "helpers" / "fixtures" / "memory"
SEPARATORS = FIXTURES / "locomo_line_separators.json"
LOCOMO = json.loads((FIXTURES / "locomo_tiny.json").read_text())
LME = json.loads((FIXTURES / "longmemeval_tiny.json").read_text())
TIERMEM = json.loads(EXAMPLE_PATH.read_text())
TIMING = ("label_wall_s", "cost_summary_wall_s", "cost_research_wall_s")
FINAL = ("all_records.jsonl", "stats.json", "report.md")
FAST_FAIL = ["memory.tokenizer=whitespace", "memory.embedder=hashing", "llm.answerer.backend=openai",
             "llm.answerer.base_url=http://127.0.0.1:9/v1", "llm.answerer.max_retries=0", "llm.answerer.timeout_s=1",
             "max_conversations=1", "max_questions_per_conversation=1"]


def _cfg(out: Path, data: Path | None = None, **extra: Any) -> LabelConfig:
    return from_dict(LabelConfig, {"output_dir": str(out), "memory": SMALL_MEMORY, "label_rule": "evidence",
                                   "data_path": str(data) if data else "", **extra})


def _label(cfg: LabelConfig) -> dict[str, Any]:
    return run(cfg, Roles({"answerer": ScriptedLLM(answer_from_prompt)}), embedder=HashEmbedder())


def _lines(path: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING}
            for line in path.read_text(encoding="utf-8").split("\n") if line]


def _snapshot(out: Path) -> dict[str, bytes]:
    files = [out / name for name in FINAL] + sorted(p for p in (out / "dataset").rglob("*") if p.is_file())
    return {str(p.relative_to(out)): p.read_bytes() for p in files}


def _cli_label(tmp_path: Path, capsys: Any, data: Path, *extra: str) -> tuple[int, str, Path]:
    out = tmp_path / "out"
    code = cli.main(["label", f"output_dir={out}", f"data_path={data}", "dataset_format=auto", *FAST_FAIL, *extra])
    return code, capsys.readouterr().err, out


# ------------------------------------------------------------------------------- JSONL by "\n" only, write-then-swap


def test_jsonl_reader_splits_records_on_newline_only():
    text = json.dumps({"t": "a\u2028b\u2029c\x85d\x0ce\x1cf"}, ensure_ascii=False) + "\r\n\n" + '{"t": 2}\n'
    assert "\u2028" in text and len(text.splitlines()) > 3  # what the old readers split on
    assert list(jsonl_records(text, "x.jsonl")) == [(1, {"t": "a\u2028b\u2029c\x85d\x0ce\x1cf"}), (3, {"t": 2})]


def test_rerun_of_a_run_with_line_separators_resumes_with_identical_records(tmp_path):
    """The reported reproduction: U+2028/U+2029/\\x85/\\x0c in a conversation labels once; the rerun called its own
    records.jsonl corrupt after deleting the finished outputs."""
    out = tmp_path / "run"
    first = _label(_cfg(out, SEPARATORS))
    records = out / "records.jsonl"
    assert first["errors"] == 0 and any(ch in records.read_text(encoding="utf-8") for ch in "\u2028\u2029\x85")
    before = _lines(out / "all_records.jsonl")
    again = _label(_cfg(out, SEPARATORS))
    assert again["resumed_records"] == again["records"] == first["records"] and again["new_records"] == 0
    assert _lines(out / "all_records.jsonl") == before
    assert len(_lines(records)) == first["records"]  # the store was not appended to either
    # the dataset loader reads the JSONL (raw U+2028 inside) as the saved dataset: one conversation, one split
    split = next(name for name, n in again["dataset"].items() if n)
    assert ([r["qid"] for r in load_split(out / "all_records.jsonl", split)] ==
            [r["qid"] for r in load_split(out / "dataset", split)]) and len(before) == again["records"]


def test_rerun_failing_mid_finalize_keeps_the_previous_outputs(tmp_path, monkeypatch):
    out = tmp_path / "run"
    _label(_cfg(out, max_questions_per_conversation=2))
    kept = _snapshot(out)
    assert "dataset/dataset_dict.json" in kept

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full while writing report.md")

    monkeypatch.setattr("labeling.run.write_report", broken)
    with pytest.raises(OSError, match="disk full"):
        _label(_cfg(out))  # a larger subset: new records, new outputs, then finalize fails
    assert _snapshot(out) == kept  # every finished output still there, byte for byte
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")
                and not p.name.startswith(".tiermem-run")]  # no staging left behind
    monkeypatch.undo()
    stats = _label(_cfg(out))  # the next rerun finishes and swaps its outputs in
    assert len(_lines(out / "all_records.jsonl")) == stats["records"]
    assert json.loads((out / "stats.json").read_text())["records"] > json.loads(kept["stats.json"])["records"]


def test_a_swap_killed_between_its_renames_gets_the_old_dataset_back(tmp_path):
    out = claim_output_dir(tmp_path / "run", "label")
    (out / ".dataset-old-x" / "dataset").mkdir(parents=True)
    (out / ".dataset-old-x" / "dataset" / "dataset_dict.json").write_text("{}")
    (out / ".finalize-y").mkdir()
    recover_outputs(out)
    assert (out / "dataset" / "dataset_dict.json").read_text() == "{}"
    assert sorted(p.name for p in out.iterdir()) == [".tiermem-run.json", ".tiermem-run.lock", "dataset"]


# ------------------------------------------------------------------------------------------------- timestamps

BAD_DATES = ["not a date at all", "2024-13-45T99:99:99Z"]


def _locomo_date(value: str) -> Any:
    data = copy.deepcopy(LOCOMO)
    data[0]["conversation"]["session_2_date_time"] = value
    return data


def _lme_date(value: str) -> Any:
    data = copy.deepcopy(LME)
    data[0]["haystack_dates"][0] = value
    return data


def _tiermem_date(value: str) -> Any:
    data = copy.deepcopy(TIERMEM)
    data["conversations"][0]["turns"][2]["timestamp"] = value
    return data


DATE_CASES = {
    "locomo": (_locomo_date, "'tiny-1'.conversation: field 'session_2_date_time'"),
    "longmemeval": (_lme_date, "'q-degree' session 0 ('s-1'): field 'haystack_dates[0]'"),
    "tiermem": (_tiermem_date, "(conversation 'tomas-assistant') turns[2] (turn 's1-3', session 's1'): "
                               "field 'timestamp'"),
}


@pytest.mark.parametrize("fmt", sorted(DATE_CASES))
@pytest.mark.parametrize("value", BAD_DATES)
def test_a_timestamp_that_is_no_date_is_a_named_data_error(tmp_path, capsys, fmt, value):
    edit, needle = DATE_CASES[fmt]
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(edit(value)))
    code, err, out = _cli_label(tmp_path, capsys, path)
    assert code == EXIT_DATA, err
    assert str(path) in err and needle in err and f"{value!r} is not a date" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_every_shipped_date_form_still_loads():
    for path in (FIXTURES / "locomo_tiny.json", FIXTURES / "longmemeval_tiny.json", EXAMPLE_PATH, None):
        assert load_conversations(path)


# ------------------------------------------------------------------------------------------------ oversized turns


def test_a_200_kb_turn_is_paged_within_page_tokens_and_its_summaries_link_back(tmp_path):
    conv = load_conversations(FIXTURES / "locomo_tiny.json")[0]
    big = " ".join(f"kayak{j} paddle" for j in range(20_000))[:200_000]
    conv.turns[1].text = big
    cfg = MemoryConfig(page_tokens=120, tokenizer="whitespace", embedder="hashing", keep_ratio=0.5)
    rt = MemoryRuntime.open_or_build(tmp_path / "tiers", conv, cfg, embedder=HashingEmbedder(),
                                     count_tokens=whitespace_tokens)
    try:
        pages = rt.memory.raw.pages(conv.conv_id)
        assert rt.manifest["stats"]["page_tokens_max"] <= 120
        assert all(whitespace_tokens(p.text) <= 120 for p in pages)
        holding = [p for p in pages if conv.turns[1].turn_id in p.turn_ids]
        assert len(holding) > 100
        units = [u for u in rt.memory.summaries.units if conv.turns[1].turn_id in u.turn_ids]
        assert units and all(set(u.turn_ids) <= {t for pid in u.page_ids for t in rt.memory.page(pid).turn_ids}
                             for u in units)
    finally:
        rt.close()


# ------------------------------------------------------------------------------------------------ invalid UTF-8


def _with_stray_byte(text: str, after: str) -> tuple[bytes, int]:
    data = text.encode("utf-8")
    offset = data.index(after.encode()) + len(after.encode())
    return data[:offset] + b"\xff" + data[offset:], offset


@pytest.mark.parametrize("name", ["bench.json", "mine.json", "mine.jsonl"])
def test_invalid_utf8_in_a_conversation_file_is_exit_3_naming_file_and_offset(tmp_path, capsys, name):
    if name == "bench.json":
        text = json.dumps(LOCOMO)
    elif name == "mine.json":
        text = json.dumps(TIERMEM)
    else:
        text = "\n".join([json.dumps({"format": "tiermem-conversations", "version": 1}),
                          *(json.dumps(c) for c in TIERMEM["conversations"])]) + "\n"
    data, offset = _with_stray_byte(text, "Tomas" if name != "bench.json" else "Ada")
    path = tmp_path / name
    path.write_bytes(data)
    code, err, out = _cli_label(tmp_path, capsys, path)
    assert code == EXIT_DATA, err
    assert f"{path}: not UTF-8 text: byte 0xff at byte offset {offset}" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_invalid_utf8_in_label_records_names_file_and_offset(tmp_path, capsys):
    records = tmp_path / "records.jsonl"
    data, offset = _with_stray_byte('{"qid": "q1", "split": "test"}\n{"qid": "q2", "split": "test"}\n', "q2")
    records.write_bytes(data)
    with pytest.raises(RecordError, match=rf"records\.jsonl: not UTF-8 text: byte 0xff at byte offset {offset} "
                                          r"\(line 2\)"):
        load_split(records, "test")
    # the label run's own store: a store file (exit 5, docs/serving.md exit-code table), named the same way
    out = claim_output_dir(tmp_path / "out", "label")
    (out / "records.jsonl").write_bytes(data)
    code = cli.main(["label", f"output_dir={out}", f"data_path={FIXTURES / 'locomo_tiny.json'}", *FAST_FAIL])
    err = capsys.readouterr().err
    assert code == EXIT_STORE, err
    assert f"{out / 'records.jsonl'}: not UTF-8 text: byte 0xff at byte offset {offset}" in err


# --------------------------------------------------------------------------------------- duplicate ids, linearly


def _many_turns(n: int) -> dict[str, Any]:
    turns = [{"id": f"t{i}", "session": f"s{i // 100}", "timestamp": "2024-06-03T09:12:00Z", "speaker": "user",
              "text": f"turn number {i}"} for i in range(n)]
    return {"format": "tiermem-conversations", "version": 1,
            "conversations": [{"id": "big", "turns": turns, "questions": [{"id": "q", "question": "Which turn?",
                                                                          "answer": "t7", "evidence": ["t7"]}]}]}


def test_twenty_thousand_turns_load_and_a_repeated_id_among_them_is_named(tmp_path):
    doc = _many_turns(20_000)
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    (conv,) = load_tiermem(path)
    assert len(conv.turns) == 20_000 and conv.turns[-1].turn_id == "t19999"
    doc["conversations"][0]["turns"][-1]["id"] = "t123"
    path.write_text(json.dumps(doc))
    with pytest.raises(TiermemFormatError, match=r"turn id\(s\) \['t123'\] repeat"):
        load_tiermem(path)


# --------------------------------------------------------------------------------------------------- empty turns


def _empty_turns() -> Any:
    data = copy.deepcopy(LOCOMO)
    s1 = data[0]["conversation"]["session_1"]
    s1[1]["text"] = "  "  # empty, no image: dropped
    s1.append({"speaker": "Ben", "dia_id": "D1:4", "text": "", "img_url": ["https://x/y.jpg"]})  # url alone: dropped
    s1.append({"speaker": "Ada", "dia_id": "D1:5", "text": "", "blip_caption": "a dog on a dock"})  # caption: kept
    data[0]["qa"][0]["evidence"] = ["D1:1", "D1:2"]
    return data


def test_empty_turns_are_dropped_counted_and_reported(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(_empty_turns()))
    (conv,) = load_conversations(path)
    ids = [t.turn_id for t in conv.turns]
    assert conv.dropped_turns == ["D1:2", "D1:4"] and "D1:2" not in ids and "D1:4" not in ids
    assert next(t for t in conv.turns if t.turn_id == "D1:5").text == "[shares a photo: a dog on a dock]"
    assert conv.questions[0].evidence == ["D1:1"]
    out = tmp_path / "run"
    stats = _label(_cfg(out, path, max_questions_per_conversation=1))
    assert stats["empty_turns_dropped"] == {"total": 2, "by_conversation": {"tiny-1": 2}}
    assert json.loads((out / "stats.json").read_text())["empty_turns_dropped"]["total"] == 2
    assert "empty turns dropped by the loader (no text, no image caption): 2 (tiny-1: 2)" in (
        out / "report.md").read_text()


def _locomo_all(edit: Any) -> Any:
    data = copy.deepcopy(LOCOMO)
    for key, session in data[0]["conversation"].items():
        if key.startswith("session_") and isinstance(session, list):
            for i, turn in enumerate(session):
                edit(i, turn)
    return data


EMPTY_CONVERSATIONS = {
    # the reported LoCoMo conversation: no turn has text of its own, some carry an image caption
    "locomo captions only": (_locomo_all(lambda i, t: t.update(text="", blip_caption="a photo" if i % 2 else None)),
                             "bench.json", "sample 'tiny-1': every turn's text is empty", "image captions"),
    "locomo whitespace only": (_locomo_all(lambda i, t: t.update(text=" \u2028 ", blip_caption=None)), "bench.json",
                               "sample 'tiny-1': every turn's text is empty", "6 turns"),
    "longmemeval": ([{**LME[0], "haystack_sessions": [[{**t, "content": " "} for t in s]
                                                      for s in LME[0]["haystack_sessions"]]}], "bench.json",
                    "instance 'q-degree': every turn's text is empty", "nothing to remember"),
    "tiermem": ({**TIERMEM, "conversations": [{**TIERMEM["conversations"][0], "turns": [
        {**t, "text": "\t"} for t in TIERMEM["conversations"][0]["turns"]]}]}, "mine.json",
                "(conversation 'tomas-assistant'): field 'turns': every turn's text is empty", "nothing to remember"),
}


@pytest.mark.parametrize("name", sorted(EMPTY_CONVERSATIONS))
def test_a_conversation_with_no_turn_text_is_a_named_error(tmp_path, capsys, name):
    content, file_name, needle, detail = EMPTY_CONVERSATIONS[name]
    path = tmp_path / file_name
    path.write_text(json.dumps(content))
    with pytest.raises(DataError):
        load_conversations(path)
    code, err, out = _cli_label(tmp_path, capsys, path)
    assert code == EXIT_DATA, err
    assert str(path) in err and needle in err and detail in err and not out.exists()
