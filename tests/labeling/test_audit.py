"""`tiermem-router audit`: the stratified review sheet, the judge's agreement and Cohen's kappa."""

import json

import pytest

from labeling.audit import AuditConfig, audit, cohen_kappa, main
from tiermem.llm import LLMError, ScriptedLLM


def _records(path, labels, source="tiermem", **extra):
    rows = []
    for i, label in enumerate(labels):
        rows.append({"conv_id": f"c{i % 3}", "qid": f"q{i}", "source": source, "split": "test",
                     "question": f"When did Ana do thing {i}?", "gold_answer": "18.01.2024", "label": label,
                     "router_summaries": [{"text": f"Ana: did thing {i}", "date": "18 January 2024"}],
                     "answer_recall": 1.0 if label == "ANSWER" else 0.0, "gold_in_summary_pages": 1, "n_gold": 1,
                     "gold_in_research_pages": 1, "s_ok": label == "ANSWER", "r_ok": True, **extra})
    rows.append({**rows[0], "qid": "q0~drop_answer", "augmentation": "drop_answer"})  # never sampled
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_cohen_kappa():
    assert cohen_kappa([("ANSWER", "ANSWER"), ("ESCALATE", "ESCALATE")]) == 1.0
    assert cohen_kappa([("ANSWER", "ESCALATE"), ("ESCALATE", "ANSWER")]) == -1.0
    assert cohen_kappa([("ANSWER", "ANSWER")] * 3) is None  # chance agreement 1: kappa undefined
    pairs = [("ANSWER", "ANSWER")] * 20 + [("ANSWER", "ESCALATE")] * 5 + [("ESCALATE", "ANSWER")] * 10 + \
        [("ESCALATE", "ESCALATE")] * 15
    assert cohen_kappa(pairs) == pytest.approx(0.4)  # po 0.7, pe 0.5


def test_sheet_is_stratified_and_leaves_the_verdict_empty(tmp_path):
    data = _records(tmp_path / "r.jsonl", ["ANSWER"] * 10 + ["ESCALATE"] * 3 + [None] * 4)
    summary = audit(AuditConfig(data=str(data), n=6, output_dir=str(tmp_path / "a")))
    rows = [json.loads(x) for x in (tmp_path / "a" / "audit.jsonl").read_text().splitlines()]
    assert summary["labeled"] == 13 and len(rows) == 6
    assert summary["strata"] == {"tiermem/ANSWER": 3, "tiermem/ESCALATE": 3}
    assert all(r["verdict"] is None and r["judge_status"] is None and "~" not in r["qid"] for r in rows)
    sheet = (tmp_path / "a" / "audit.md").read_text()
    assert "18.01.2024" in sheet and "18 January 2024" in sheet and "Ana: did thing" in sheet
    assert sheet.count("- verdict: ______") == 6


def test_a_scripted_judge_fills_verdicts_and_kappa(tmp_path):
    data = _records(tmp_path / "r.jsonl", ["ANSWER"] * 4 + ["ESCALATE"] * 4)
    replies = iter(['{"sufficient": true, "reason": "stated"}', '{"sufficient": true, "reason": "stated"}',
                    '{"sufficient": false, "reason": "no date"}', "not json", LLMError("timeout"),
                    '{"sufficient": false, "reason": "no"}', '{"sufficient": false, "reason": "no"}',
                    '{"sufficient": true, "reason": "yes"}'])

    def respond(messages):
        reply = next(replies)
        if isinstance(reply, Exception):
            raise reply
        return reply

    summary = audit(AuditConfig(data=str(data), n=8, output_dir=str(tmp_path / "a")), judge_llm=ScriptedLLM(respond))
    judge = summary["judge"]
    assert (judge["judged"], judge["unparsed"], judge["errors"]) == (6, 1, 1)
    rows = [json.loads(x) for x in (tmp_path / "a" / "audit.jsonl").read_text().splitlines()]
    ok = [(r["label"], r["judge_verdict"]) for r in rows if r["judge_status"] == "ok"]
    assert round(sum(a == b for a, b in ok) / len(ok), 4) == judge["agreement"]
    assert judge["cohen_kappa"] == round(cohen_kappa(ok), 4)
    assert sum(judge["confusion"][a][b] for a in judge["confusion"] for b in judge["confusion"][a]) == 6
    assert all(r["judge_verdict"] is None for r in rows if r["judge_status"] != "ok")  # never turned into a verdict
    assert "Cohen's kappa" in (tmp_path / "a" / "audit.md").read_text()


def test_baseline_samples_the_changed_labels(tmp_path, capsys):
    new = _records(tmp_path / "new.jsonl", ["ANSWER", "ESCALATE", "ANSWER", "ESCALATE"])
    old = _records(tmp_path / "old.jsonl", ["ANSWER", "ANSWER", "ESCALATE", "ESCALATE"])
    assert main([f"data={new}", f"baseline={old}", f"output_dir={tmp_path / 'a'}", "n=10"]) == 0
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["baseline"] == {"data": str(old), "shared": 4, "changed": 2,
                                   "changes": {"ANSWER -> ESCALATE": 1, "ESCALATE -> ANSWER": 1},
                                   "unlabeled": {"questions": 4, "unlabeled": 0, "share": 0.0, "by_drop_reason": {}}}
    assert {r["qid"] for r in map(json.loads, (tmp_path / "a" / "audit.jsonl").open())} == {"q1", "q2"}
    assert "audit: 2 of 4 labeled questions" in capsys.readouterr().out  # the sheet holds the 2 changed ones


def test_bad_records_name_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"conv_id": "c", "qid": "q"}\n')
    assert main([f"data={bad}", f"output_dir={tmp_path / 'a'}"]) != 0
    with pytest.raises(Exception, match=r"bad.jsonl: line 1: missing field .question."):
        audit(AuditConfig(data=str(bad), output_dir=str(tmp_path / "b")))


def test_audit_stage_on_the_shipped_example_with_a_judge_endpoint(tmp_path, capsys, monkeypatch):
    """The stage as a user runs it: label the shipped example, then audit it with a judge behind an
    OpenAI-compatible endpoint (scripted here: sufficient when a summary holds the gold answer's words)."""
    from labeling.config import LabelConfig
    from labeling.roles import Roles
    from labeling.run import run as label_run
    from tests.helpers.fake_openai import fake_openai
    from tests.helpers.label_helpers import SMALL_MEMORY, HashEmbedder
    from tiermem.data.tiermem_format import EXAMPLE_PATH
    from tiermem.settings.config import from_dict

    run_dir = tmp_path / "label"
    cfg = from_dict(LabelConfig, {"output_dir": str(run_dir), "data_path": str(EXAMPLE_PATH), "label_rule":
                                  "evidence", "generate_answers": False, "memory": {**SMALL_MEMORY, "max_rounds": 1}})
    label_run(cfg, Roles({}, need_answerer=False), embedder=HashEmbedder())

    def judge(messages):
        user = messages[-1]["content"]
        gold = user.split("Gold answer: ")[1].split("\n")[0]
        summaries = user.split("Summaries:\n")[1].lower()
        return json.dumps({"sufficient": all(w in summaries for w in gold.lower().split()), "reason": "scripted"})

    monkeypatch.setenv("FAKE_KEY", "x")
    with fake_openai(judge) as base_url:
        rc = main([f"data={run_dir}", f"output_dir={tmp_path / 'audit'}", "n=8", "judge.backend=openai",
                   "judge.model=fake", f"judge.base_url={base_url}", "judge.api_key_env=FAKE_KEY",
                   "judge.structured=none"])
    out = capsys.readouterr().out
    assert rc == 0, out
    summary = json.loads((tmp_path / "audit" / "summary.json").read_text())
    assert summary["sampled"] == 8 and summary["judge"]["judged"] == 8
    assert f"Cohen's kappa {summary['judge']['cohen_kappa']}" in out.splitlines()[0]


def test_the_sheet_shows_the_unlabeled_share_by_drop_reason_for_both_runs(tmp_path):
    now = _records(tmp_path / "now.jsonl", ["ANSWER", "ESCALATE", None, None, "ANSWER", None],
                   drop_reason="both paths wrong")
    rows = [json.loads(x) for x in now.read_text().splitlines()]
    rows[5]["drop_reason"] = "summary path wrong, research path not judged"
    now.write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = _records(tmp_path / "before.jsonl", ["ANSWER", None, None, None, None, None],
                      drop_reason="both paths wrong")
    summary = audit(AuditConfig(data=str(now), n=4, baseline=str(before), output_dir=str(tmp_path / "a")))
    assert summary["unlabeled"] == {"questions": 6, "unlabeled": 3, "share": 0.5, "by_drop_reason": {
        "both paths wrong": {"n": 2, "share": 0.3333},
        "summary path wrong, research path not judged": {"n": 1, "share": 0.1667}}}
    assert summary["baseline"]["unlabeled"]["share"] == 0.8333
    sheet = (tmp_path / "a" / "audit.md").read_text()
    assert "| this run | both paths wrong | 2 | 0.333 |" in sheet
    assert "| baseline | all reasons | 5 of 6 | 0.833 |" in sheet
