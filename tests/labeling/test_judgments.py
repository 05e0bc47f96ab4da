"""Careful-reading judgments as a label source: the file's checks, the digest match, what a label run takes from a
judgment (s_ok, per-unit verdicts and spans, the recorded teacher) and what it counts where none matches."""

import json
from pathlib import Path

import pytest

from labeling.config import LabelConfig
from labeling.dataset import RecordError
from labeling.judgments.format import FORMAT, load_judgments, text_digest, units_digest
from labeling.roles import Roles
from labeling.run import run
from tests.helpers.label_helpers import SMALL_MEMORY, HashEmbedder
from tiermem.settings.config import from_dict

MEMORY = {**SMALL_MEMORY, "max_rounds": 1, "top_k": 2}
HEADER = {"format": FORMAT, "version": 1}


def judgment(conv_id: str, qid: str, question: str, texts: list[str], verdicts: list[str], verdict: str,
             spans: list[str | None] | None = None, action: str = "ESCALATE", confidence: int = 4) -> dict:
    spans = spans or [None] * len(texts)
    return {"conv_id": conv_id, "qid": qid, "question": question, "units_sha1": units_digest(texts),
            "units": [{"rank": i + 1, "unit_id": f"u{i}", "text_sha1": text_digest(t), "verdict": v, "span": s}
                      for i, (t, v, s) in enumerate(zip(texts, verdicts, spans, strict=True))],
            "verdict": verdict, "reason": "because", "gold_doubtful": False,
            "teacher": {"action": action, "confidence": confidence, "thinking": "the units say so"}}


def write(path: Path, rows: list, header: dict | None = None) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in [header or HEADER, *rows]), encoding="utf-8")
    return path


def test_a_judgment_matches_only_the_units_it_read(tmp_path):
    texts = ["Ana went to Paris.", "Leo bakes bread."]
    j = load_judgments(write(tmp_path / "j.jsonl", [judgment("c1", "q1", "Where did Ana go?", texts,
                                                             ["yes", "no"], "yes", ["Paris", None])]))
    got, why = j.match("c1", "q1", "Where did Ana go?", texts)
    assert why == "matched" and got.sufficient and got.unit(1, texts[0]).span == "Paris"
    assert got.unit(2, texts[0]) is None  # the unit at rank 2 read another text
    assert j.match("c1", "q1", "Where did Ana go?", texts[::-1]) == (None, "units_differ")
    assert j.match("c1", "q1", "Where did Leo go?", texts) == (None, "question_differs")
    assert j.match("c1", "q9", "Where did Ana go?", texts) == (None, "no_judgment")
    assert j.lookup("Where did Ana go?", texts) is got


@pytest.mark.parametrize("edit, needle", [
    (lambda r: r.pop("verdict"), "line 2: missing field 'verdict'"),
    (lambda r: r.update(verdict="maybe"), "line 2: field 'verdict' must be one of"),
    (lambda r: r["units"][1].update(verdict=True), "line 2: field 'units[1]': field 'verdict' must be str"),
    (lambda r: r["units"][0].update(rank=2), "field 'units' must list ranks 1..2 in order"),
    (lambda r: r["teacher"].update(confidence=9), "line 2: field 'teacher': field 'confidence' must be 1..5"),
    (lambda r: r["teacher"].update(action="answer"), "field 'action' must be one of"),
    (lambda r: r.update(units_sha1="xyz"), "field 'units_sha1' must be 16 lower-case hex digits"),
    (lambda r: r.update(gold_doubtful="no"), "field 'gold_doubtful' must be bool"),
])
def test_a_malformed_judgment_is_named_by_line_and_field(tmp_path, edit, needle):
    row = judgment("c1", "q1", "Q?", ["a", "b"], ["no", "no"], "no")
    edit(row)
    with pytest.raises(RecordError, match="j.jsonl") as err:
        load_judgments(write(tmp_path / "j.jsonl", [row]))
    assert needle in str(err.value)


def test_a_bad_file_is_a_named_error(tmp_path):
    row = judgment("c1", "q1", "Q?", ["a"], ["no"], "no")
    with pytest.raises(RecordError, match="line 1: the header must say"):
        load_judgments(write(tmp_path / "a.jsonl", [row], header={"format": "other"}))
    with pytest.raises(RecordError, match="line 1: field 'version' must be 1"):
        load_judgments(write(tmp_path / "b.jsonl", [row], header={**HEADER, "version": 2}))
    with pytest.raises(RecordError, match="judged twice"):
        load_judgments(write(tmp_path / "c.jsonl", [row, row]))
    with pytest.raises(RecordError, match="followed by no judgment"):
        load_judgments(write(tmp_path / "d.jsonl", []))
    (tmp_path / "e.jsonl").write_bytes(json.dumps(HEADER).encode() + b"\n{\"conv_id\": \"\xff\"}\n")
    with pytest.raises(RecordError, match="not UTF-8"):
        load_judgments(tmp_path / "e.jsonl")
    (tmp_path / "f.jsonl").write_text(json.dumps(HEADER) + "\n{not json\n")
    with pytest.raises(RecordError, match="line 2: not valid JSON"):
        load_judgments(tmp_path / "f.jsonl")


def _label(out: Path, judgments: Path | None) -> list[dict]:
    cfg = from_dict(LabelConfig, {"output_dir": str(out), "memory": MEMORY, "label_rule": "evidence",
                                  "generate_answers": False, "unit_targets": {"deep_k": 4},
                                  "judgments": None if judgments is None else str(judgments),
                                  "split": {"train": ["sample-1", "sample-2"]}})
    run(cfg, Roles({}, need_answerer=False), embedder=HashEmbedder())
    return [json.loads(line) for line in (out / "all_records.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def lexical_run(tmp_path_factory):
    return _label(tmp_path_factory.mktemp("lexical") / "run", None)


def test_label_takes_the_judged_verdicts_where_the_units_match_and_counts_the_rest(lexical_run, tmp_path):
    natural = [r for r in lexical_run if not r["augmentation"] and not r["error"] and r["r_ok"] is not None]
    assert len(natural) >= 3 and all(r["s_ok_by"] is None for r in lexical_run)
    flip, keep, stale = natural[0], natural[1], natural[2]
    texts = [[u["text"] for u in r["router_summaries"]] for r in (flip, keep, stale)]
    # flip: the judgment says the opposite of the lexical rule, with a span on its first unit
    verdict = "no" if flip["s_ok"] else "yes"
    first = flip["router_summaries"][0]["text"]
    rows = [judgment(flip["conv_id"], flip["qid"], flip["question"], texts[0],
                     ["yes" if verdict == "yes" else "no"] + ["no"] * (len(texts[0]) - 1), verdict,
                     [first.split()[0] if verdict == "yes" else None] + [None] * (len(texts[0]) - 1),
                     action="ANSWER", confidence=5),
            judgment(keep["conv_id"], keep["qid"], keep["question"], texts[1], ["partial"] * len(texts[1]), "partial"),
            judgment(stale["conv_id"], stale["qid"], stale["question"], ["other units"], ["yes"], "yes")]
    out = tmp_path / "judged"
    records = {(r["conv_id"], r["qid"]): r for r in _label(out, write(tmp_path / "j.jsonl", rows))}
    got = records[(flip["conv_id"], flip["qid"])]
    assert got["s_ok_by"] == "judgment" and got["judgment_match"] == "matched"
    assert got["s_ok"] is (verdict == "yes") and got["s_ok_evidence"] is flip["s_ok"]  # the lexical rule kept
    assert got["label"] == ("ANSWER" if verdict == "yes" else "ESCALATE")
    assert got["label_evidence"] == flip["label"]
    units = got["unit_targets"]
    assert units[0]["verdict"] == ("yes" if verdict == "yes" else "no")
    assert all(u["verdict"] is None for u in units if u["rank"] > len(got["router_summaries"]))  # deeper: unjudged
    teacher = json.loads(got["teacher"])
    assert teacher["action"] == "ANSWER" and teacher["confidence"] == 5 and teacher["source"] == FORMAT
    assert got["teacher_agrees"] is (got["label"] == "ANSWER")
    partial = records[(keep["conv_id"], keep["qid"])]
    assert partial["s_ok"] is False and {u["verdict"] for u in partial["unit_targets"][:2]} == {"partial"}
    fallback = records[(stale["conv_id"], stale["qid"])]
    assert fallback["s_ok_by"] == "lexical" and fallback["judgment_match"] == "units_differ"
    assert fallback["s_ok"] is stale["s_ok"] and fallback["judgment"] is None
    stats = json.loads((out / "stats.json").read_text())["judgments"]
    assert stats["by_match"]["matched"] == 2 and stats["by_match"]["units_differ"] == 1
    assert stats["by_match"]["no_judgment"] == len([r for r in lexical_run if not r["augmentation"]
                                                    and not r["error"]]) - 3
    assert "## Careful-reading judgments" in (out / "report.md").read_text()


def test_a_changed_judgments_file_is_not_resumed_into_the_same_run(lexical_run, tmp_path):
    r = next(r for r in lexical_run if not r["augmentation"] and not r["error"])
    rows = [judgment(r["conv_id"], r["qid"], r["question"], [u["text"] for u in r["router_summaries"]],
                     ["no"] * len(r["router_summaries"]), "no")]
    path = write(tmp_path / "j.jsonl", rows)
    out = tmp_path / "run"
    _label(out, path)
    write(path, [dict(rows[0], reason="changed")])
    with pytest.raises(Exception, match="judgments_sha256"):
        _label(out, path)


def _scripted_coverage(verdict: str, bad_for: str | None = None):
    """A coverage judge that says `verdict` of every unit (its first word quoted as the span), or replies garbage
    to the question `bad_for`."""
    from tiermem.llm import ScriptedLLM

    def reply(messages):
        user = messages[-1]["content"]
        if bad_for and bad_for in user:
            return "I cannot decide."
        units = [line for line in user.split("\n") if line.startswith("[")]
        return json.dumps({"units": [{"rank": i + 1, "verdict": verdict, "span": u.split(") ", 1)[1].split()[0]}
                                     for i, u in enumerate(units)],
                           "verdict": verdict, "reason": "scripted", "gold_doubtful": False})
    return ScriptedLLM(reply)


def _label_live(out: Path, judgments: Path, llm) -> list[dict]:
    cfg = from_dict(LabelConfig, {"output_dir": str(out), "memory": MEMORY, "label_rule": "evidence",
                                  "generate_answers": False, "judgments": str(judgments),
                                  "llm": {"answerer": None, "coverage": {"backend": "openai", "model": "m"}},
                                  "split": {"train": ["sample-1", "sample-2"]}})
    run(cfg, Roles({"coverage": llm}, need_answerer=False), embedder=HashEmbedder())
    return [json.loads(line) for line in (out / "all_records.jsonl").read_text().splitlines()]


def test_the_live_coverage_judge_writes_the_same_format_and_its_file_is_the_cache(lexical_run, tmp_path):
    natural = [r for r in lexical_run if not r["augmentation"] and not r["error"]]
    path = tmp_path / "live.jsonl"
    first = _label_live(tmp_path / "run1", path, _scripted_coverage("yes", bad_for=natural[0]["question"]))
    errors = [r for r in first if r["error"]]
    assert len(errors) == 1 and "coverage judge" in errors[0]["error"]  # an unreadable reply is no verdict
    judged = [r for r in first if r["s_ok_by"] == "judgment"]
    assert len(judged) == len(natural) - 1 and all(r["s_ok"] is True for r in judged)
    written = load_judgments(path)  # the file reads back through the same checks
    assert len(written) == len(natural) - 1 and written.header["writer"]
    # a rerun in a new directory asks the judge only for what the file lacks (the garbage reply's question)
    calls = _scripted_coverage("no")
    again = _label_live(tmp_path / "run2", path, calls)
    assert len(calls.calls) == 1
    assert sum(r["s_ok_by"] == "judgment" for r in again) == len(natural)
    # a file no live judge wrote is read, never appended to
    foreign = write(tmp_path / "foreign.jsonl", [judgment("x", "q", "Q?", ["a"], ["no"], "no")])
    with pytest.raises(Exception, match="not written by the live coverage judge"):
        _label_live(tmp_path / "run3", foreign, _scripted_coverage("yes"))
    with pytest.raises(Exception, match="llm.coverage writes careful-reading judgments"):
        from_dict(LabelConfig, {"llm": {"coverage": {"backend": "openai", "model": "m"}}})
