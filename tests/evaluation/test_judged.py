"""eval against careful-reading judgments: records relabeled by the judgments of exactly their units, every router
scored again on them without being asked again, and the recorded teacher as a router row of its own."""

from __future__ import annotations

import json

import pytest

from evaluation import evaluate as E
from labeling.judgments.format import load_judgments
from labeling.judgments.report import ReplayedRouter, judged_records
from serving.routers import RouterSpec, build
from tests.helpers.records import rec
from tests.labeling.test_judgments import judgment, write
from tiermem.stats import auroc

# (s_ok by the lexical rule, r_ok, judged verdict or None: not judged, teacher's (action, confidence))
ROWS = [(True, True, "yes", ("ANSWER", 5)), (True, True, "no", ("ESCALATE", 3)),
        (False, True, "no", ("ESCALATE", 5)), (False, True, "yes", ("ANSWER", 4)),
        (True, True, "partial", ("ESCALATE", 4)), (False, True, "no", ("ANSWER", 3)),
        (True, True, "yes", ("ANSWER", 3)), (False, False, "no", ("ESCALATE", 4)), (False, True, None, None),
        (True, True, "stale", ("ANSWER", 5))]


def _records() -> list[dict]:
    out = []
    for i, (s, r, _, _) in enumerate(ROWS):
        label = "ANSWER" if s else ("ESCALATE" if r else None)
        out.append(rec(f"q{i}", f"c{i % 2}", s, r, label, "test", summary=f"unit text {i}"))
    return out


@pytest.fixture()
def judged_file(tmp_path):
    rows = []
    for i, (_, _, verdict, teacher) in enumerate(ROWS):
        if verdict is None:
            continue
        texts = ["other units"] if verdict == "stale" else [f"unit text {i}"]
        v = "yes" if verdict == "stale" else verdict
        rows.append(judgment(f"c{i % 2}", f"q{i}", f"question q{i}?", texts, [v], v, action=teacher[0],
                             confidence=teacher[1]))
    return write(tmp_path / "judgments.jsonl", rows)


def test_records_are_relabeled_by_the_judgment_of_their_units_and_the_rest_counted(judged_file):
    rows, coverage = judged_records(_records(), load_judgments(judged_file))
    assert [r["qid"] for r in rows] == [f"q{i}" for i in range(8)]
    assert coverage["by_match"] == {"matched": 8, "no_judgment": 1, "question_differs": 0, "units_differ": 1}
    assert [r["label"] for r in rows] == ["ANSWER", "ESCALATE", "ESCALATE", "ANSWER", "ESCALATE", "ESCALATE",
                                          "ANSWER", None]
    assert coverage["labels_changed"] == 3  # q1 and q4 lose their ANSWER, q3 gains one


class CountingRouter:
    """Scores by a table, counting the questions it was asked."""

    name, threshold_logit, asked = "counting", 0.0, 0

    def route_batch(self, questions, summaries, threshold_logit=None):
        from serving.routers.base import Decision, decide

        self.asked += len(questions)
        scores = [float(q.rsplit("q", 1)[1].rstrip("?")) - 4.5 for q in questions]
        return [Decision(decide(s, 0.0), None, "", True, 0.0, 0, score=s) for s in scores]


def test_eval_scores_every_router_against_the_judgments_without_asking_it_again(judged_file, tmp_path):
    data = tmp_path / "records.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _records()))
    teacher = build(RouterSpec(kind="recorded-teacher", path=str(judged_file)))
    counting = CountingRouter()
    cfg = E.EvalConfig(data=str(data), output_dir=str(tmp_path / "eval"), judgments=str(judged_file))
    cfg.bootstrap.n_boot = 0
    router = ReplayedRouter(counting)
    report, _ = E.evaluate_records(_records(), cfg, router, "counting", [("teacher", ReplayedRouter(teacher),
                                                                          "teacher")])
    rows, coverage = judged_records(_records(), load_judgments(judged_file))
    judged_report, _ = E.evaluate_records(rows, cfg, router.again(), "counting",
                                          [("teacher", ReplayedRouter(teacher).again(), "teacher")])
    assert counting.asked == 10  # the second scoring replayed every decision
    from labeling.judgments.report import judged_summary

    summary = judged_summary(judged_report, coverage)
    labeled = [r for r in rows if r["label"]]
    y = [r["label"] == "ESCALATE" for r in labeled]
    by_hand = auroc([float(r["qid"][1:]) - 4.5 for r in labeled], y)
    assert summary["routers"]["routed"]["auroc"]["estimate"] == pytest.approx(by_hand)
    # the teacher: its recorded confidence as a score; both unrecorded questions escalate and are counted
    conf = {f"q{i}": t for i, (_, _, v, t) in enumerate(ROWS) if t}
    p = [0.5 + 0.09 * conf[r["qid"]][1] if conf[r["qid"]][0] == "ESCALATE" else 0.5 - 0.09 * conf[r["qid"]][1]
         for r in labeled]
    assert summary["routers"]["teacher"]["auroc"]["estimate"] == pytest.approx(auroc(p, y))
    assert any("teacher: 2 router call(s) failed" in n for n in report["meta"]["notes"])


def test_the_eval_stage_writes_the_judged_section(judged_file, tmp_path):
    data = tmp_path / "records.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _records()))
    out = tmp_path / "eval"
    assert E.main([f"data={data}", f"output_dir={out}", "router.kind=recorded-teacher", f"router.path={judged_file}",
                   f"judgments={judged_file}", "bootstrap.n_boot=0"]) == 0
    got = json.loads((out / "eval.json").read_text())["judged"]
    assert got["matched"] == 8 and got["labels_changed"] == 3 and "routed" in got["routers"]
    md = (out / "eval.md").read_text()
    assert "### Against careful-reading judgments" in md and "8 of 10 records judged" in md
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "tiermem-judgments", "version": 1}\n{"conv_id": 3}\n')
    assert E.main([f"data={data}", f"output_dir={tmp_path / 'eval2'}", "router.kind=always-escalate",
                   "router.path=null", f"judgments={bad}"]) != 0


def test_eval_checks_labels_and_routers_against_verdicts_of_two_formats(judged_file, tmp_path):
    data = tmp_path / "records.jsonl"
    records = _records()
    for r in records:
        r["question"] = f"question {r['qid']}?"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    realmem = tmp_path / "realmem.jsonl"  # a second format: the one question the judgments left unjudged
    realmem.write_text("\n".join(json.dumps(x) for x in [
        {"format": "realmem-careful-reading", "version": 2},
        {"person": "c0", "query_id": "q8", "units": [{"text": "unit text 8"}], "informed": {"sufficient": False}}]))
    out = tmp_path / "eval"
    assert E.main([f"data={data}", f"output_dir={out}", "router.kind=recorded-teacher", f"router.path={judged_file}",
                   f"verdicts=[{judged_file}, {realmem}]", "bootstrap.n_boot=20"]) == 0
    got = json.loads((out / "eval.json").read_text())["verdicts"]
    agreement = got["label_agreement"]
    assert agreement["by_match"]["matched"] == 9 and agreement["by_match"]["units_differ"] == 1
    assert agreement["n"] == 8 and agreement["agreement"]["lo"] is not None  # q7 unlabeled: both paths wrong
    assert got["matched"] == 9 and "routed" in got["routers"]
    assert "### Against careful-reading verdicts" in (out / "eval.md").read_text()
