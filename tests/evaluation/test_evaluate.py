import json
import shutil
from dataclasses import dataclass

import pytest

from evaluation import evaluate as E
from tests.helpers.records import rec

RECORDS = [
    rec("q1", "c1", True, True, "ANSWER", "train"),
    rec("q2", "c2", True, True, "ANSWER", "test", summary="SAYS IT"),
    rec("q3", "c2", False, True, "ESCALATE", "test"),
    rec("q4", "c2", True, False, "ANSWER", "test", summary="SAYS IT"),
    rec("q5", "c2", False, False, None, "test", cat="2"),
]


@dataclass
class Decision:
    action: str
    p_escalate: float
    reason: str
    parsed_ok: bool
    latency_s: float
    prompt_tokens: int


class KeywordRouter:
    """A deterministic stand-in with serving.routers.Router's interface: ANSWER when a summary says 'SAYS IT'."""

    threshold_logit = 0.5

    def route_batch(self, questions, summaries, threshold_logit=None):
        t = self.threshold_logit if threshold_logit is None else threshold_logit
        out = []
        for s in summaries:
            p = 0.1 if any("SAYS IT" in u["text"] for u in s) else 0.9
            out.append(Decision("ESCALATE" if p >= t else "ANSWER", p, "kw", True, 0.05, 100))
        return out


@pytest.fixture
def dataset_dir(tmp_path):
    from datasets import Dataset, DatasetDict

    dsd = DatasetDict({s: Dataset.from_list([r for r in RECORDS if r["split"] == s]) for s in ("train", "test")})
    path = tmp_path / "dataset"
    dsd.save_to_disk(str(path))
    return path


def test_load_split_from_datasetdict_and_jsonl(dataset_dir, tmp_path):
    recs = E.load_split(dataset_dir, "test")
    assert [r["qid"] for r in recs] == ["q2", "q3", "q4", "q5"]
    assert recs[0]["router_summaries"][0]["text"] == "SAYS IT"
    jsonl = tmp_path / "records.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    assert [r["qid"] for r in E.load_split(jsonl, "train")] == ["q1"]
    with pytest.raises(E.ConfigError, match="no split 'validation'"):
        E.load_split(dataset_dir, "validation")
    with pytest.raises(FileNotFoundError, match="make label"):
        E.load_split(tmp_path / "missing", "test")


def test_evaluate_records_with_router(dataset_dir, tmp_path):
    cfg = E.EvalConfig(data=str(dataset_dir), output_dir=str(tmp_path / "eval"))
    records = E.load_split(dataset_dir, "test")
    report, preds = E.evaluate_records(records, cfg, KeywordRouter(), "keyword")
    routed = report["policies"]["routed"]
    # q2, q4 answered from summaries (right); q3 escalated (right); q5 escalated (both wrong)
    assert routed["accuracy"] == pytest.approx(3 / 4)
    assert routed["escalation_rate"] == pytest.approx(0.5)
    # the answering model's tokens; the router's own prompt tokens in their own column
    assert routed["mean_input_tokens"] == pytest.approx((200 + 2000 + 200 + 2000) / 4)
    assert routed["mean_router_tokens"] == pytest.approx(100)
    assert report["policies"]["summary_only"]["accuracy"] == pytest.approx(0.5)
    assert report["policies"]["raw_only"]["accuracy"] == pytest.approx(0.5)
    assert report["policies"]["random"]["escalation_rate"] == pytest.approx(0.5)
    assert report["meta"]["label_rule"] == "evidence" and report["meta"]["threshold_logit"] == 0.5
    assert [p["qid"] for p in preds] == ["q2", "q3", "q4", "q5"]
    paths = E.write_outputs(report, preds, cfg.output_dir)
    assert {"json", "markdown", "plot", "predictions"} <= set(paths)
    assert json.loads(paths["json"].read_text())["policies"]["routed"]["n"] == 4
    assert "| routed | 0.750 | 0.500 |" in paths["markdown"].read_text()


def test_threshold_override_moves_decisions(dataset_dir):
    cfg = E.EvalConfig(data=str(dataset_dir))
    cfg.router.threshold_logit = 0.05  # everything escalates
    report, _ = E.evaluate_records(E.load_split(dataset_dir, "test"), cfg, KeywordRouter(), "keyword")
    assert report["policies"]["routed"]["escalation_rate"] == 1.0
    assert report["meta"]["threshold_logit"] == 0.05


def test_main_baselines_only(dataset_dir, tmp_path, capsys):
    out = tmp_path / "base"
    rc = E.main([f"data={dataset_dir}", "router.kind=none", f"output_dir={out}"])
    assert rc == 0
    data = json.loads((out / "eval.json").read_text())
    assert "routed" not in data["policies"] and data["sweep"] is None
    assert (out / "eval.png").stat().st_size > 0
    assert "| summary-only |" in capsys.readouterr().out


def test_main_errors_are_one_line(tmp_path, capsys):
    out = tmp_path / "eval"
    assert E.main([f"data={tmp_path / 'nope'}", "router.kind=none", f"output_dir={out}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "label dataset not found" in err[0]
    assert not out.exists()  # an eval that fails on its data leaves no run directory behind
    assert E.main(["router.kind=magic"]) == 2
    assert "router.kind" in capsys.readouterr().err
    assert E.main(["bogus_key=1"]) == 2
    assert "bogus_key" in capsys.readouterr().err


def test_teacher_router_errors_and_garbage_are_counted(dataset_dir):
    from serving.routers.teacher import TeacherRouter
    from tiermem.llm import LLMError, ScriptedLLM

    def responder(messages):
        user = messages[-1]["content"]
        if "q3" in user:
            return LLMError("endpoint down")
        if "q5" in user:
            return "I think we should look it up"
        return '{"action": "ANSWER", "reason": "stated"}'

    cfg = E.EvalConfig(data=str(dataset_dir))
    report, preds = E.evaluate_records(E.load_split(dataset_dir, "test"), cfg,
                                       TeacherRouter(ScriptedLLM(responder)), "teacher")
    routed = report["policies"]["routed"]
    assert [p["action"] for p in preds] == ["ANSWER", "ESCALATE", "ANSWER", "ESCALATE"]
    assert report["meta"]["router_errors"] == 1
    assert preds[1]["error"] and "endpoint down" in preds[1]["error"]
    assert routed["unparseable"] == 2  # the failed call and the garbage both fell back to ESCALATE, flagged
    assert any("p_escalate" in n for n in report["meta"]["notes"])  # no probabilities for the error case
    assert any("router call(s) failed" in n for n in report["meta"]["notes"])


def test_main_with_a_trained_router_run(tmp_path):
    """End to end through Router.from_pretrained: the fixture router learned 'When' -> ESCALATE."""
    from datasets import Dataset, DatasetDict

    from tests.helpers.router_fixtures import FIXTURES, make_router_run

    run_dir = tmp_path / "run"  # eval records its summary in the run: never in the shared cached fixture
    shutil.copytree(make_router_run(), run_dir)
    rows = []
    for i, (question, summaries, label) in enumerate(FIXTURES):
        r = rec(f"f{i}", "c9", label == "ANSWER", True, label, "test")  # research right everywhere
        # no retrieval score, as in the fixture router's training prompts (contract v2 renders scores)
        r.update(question=question, router_summaries=[dict(s, unit_id="u", page_ids=[]) for s in summaries])
        rows.append(r)
    DatasetDict({"test": Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "ds"))
    out = tmp_path / "eval"
    assert E.main([f"data={tmp_path / 'ds'}", f"router.path={run_dir}", f"output_dir={out}"]) == 0
    data = json.loads((out / "eval.json").read_text())
    routed, oracle = data["policies"]["routed"], data["policies"]["oracle"]
    assert routed["accuracy"] == 1.0 == oracle["accuracy"]
    assert data["policies"]["summary_only"]["accuracy"] == 0.5
    assert routed["hard_recall"] == 1.0 and routed["false_cache_hits"] == 0 and routed["false_cache_misses"] == 0
    assert routed["mean_router_tokens"] > 0 and routed["unparseable"] == 0
    assert data["sweep"]["points"][-1]["escalation_rate"] == 1.0
    assert data["sweep"]["apgr"] > 0.5  # better than random: the escalations go to the right questions
    preds = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert all(0.0 <= p["p_escalate"] <= 1.0 for p in preds)


def _many(n_conv=6, per=20, seed=0):
    """Records over several conversations; a 'SAYS IT' summary marks questions the summary path answers."""
    import random

    rng = random.Random(seed)
    rows = []
    for c in range(n_conv):
        for i in range(per):
            s_ok = rng.random() < 0.4
            r_ok = rng.random() < (0.95 if not s_ok else 0.8)
            label = "ANSWER" if s_ok else ("ESCALATE" if r_ok else None)
            says = s_ok if rng.random() < 0.85 else not s_ok  # the keyword router is right 85% of the time
            rows.append(rec(f"c{c}q{i}", f"c{c}", s_ok, r_ok, label, "test", summary="SAYS IT" if says else "no"))
    return rows


class NoiseRouter:
    """Random scores: a router that knows nothing (log-odds, like the LM routers)."""

    threshold_logit = 0.0

    def __init__(self, seed=1):
        import random

        self.rng = random.Random(seed)

    def route_batch(self, questions, summaries, threshold_logit=None):
        from serving.routers import Decision as D

        t = self.threshold_logit if threshold_logit is None else threshold_logit
        out = []
        for _ in questions:
            s = self.rng.gauss(0, 1)
            out.append(D("ESCALATE" if s >= t else "ANSWER", 1 / (1 + 2.718281828 ** -s), "noise", True, 0.0, 50,
                         score=s))
        return out


def test_intervals_ranking_and_paired_comparisons_in_the_report(tmp_path):
    records = _many()
    cfg = E.EvalConfig(data=str(tmp_path / "none"), output_dir=str(tmp_path / "eval"))
    cfg.bootstrap.n_boot = 300
    report, preds = E.evaluate_records(records, cfg, KeywordRouter(), "keyword",
                                       compare=[("noise", NoiseRouter(), "noise router")])
    assert list(report["policies"])[:2] == ["routed", "noise"]
    iv = report["intervals"]["routed"]["accuracy"]
    assert iv["lo"] < iv["estimate"] < iv["hi"]
    assert iv["estimate"] == pytest.approx(report["policies"]["routed"]["accuracy"])
    for key in ("summary_only", "raw_only", "random", "oracle", "noise"):
        assert report["intervals"][key]["escalation_rate"] is not None
    assert report["uncertainty"]["n_clusters"] == 6 and report["uncertainty"]["n"] == len(records)
    rk, rn = report["ranking"]["routed"], report["ranking"]["noise"]
    assert rk["auroc"]["lo"] > 0.6 and rk["apgr"]["lo"] > 0.5  # the keyword router beats chance ...
    assert rn["auroc"]["lo"] < 0.5 < rn["auroc"]["hi"]  # ... noise does not
    assert "reliability" in rk and "ece" in rn
    readings = {(c["a"], c["b"], c["metric"]): c for c in report["comparisons"]}
    assert "no better than random" in readings[("noise", "random (0.5)", "AUROC")]["reading"]
    assert "better than" in readings[("routed", "random (0.5)", "AUROC")]["reading"]
    vs_main = readings[("noise", "routed", "AUROC")]
    assert vs_main["hi"] < 0 and "worse" in vs_main["reading"]  # paired AUROC difference vs the main router
    assert {p["router"] for p in preds} == {"routed", "noise"}
    paths = E.write_outputs(report, preds, cfg.output_dir)
    md = paths["markdown"].read_text()
    assert "no better than random" in md and "| noise |" in md and "AUROC" in md
    assert "conversation(s): the bootstrap" not in md  # 6 conversations: at or above the few-clusters cutoff
    assert paths["reliability_plot"].stat().st_size > 0 and "eval_reliability.png" in md
    data = json.loads(paths["json"].read_text())
    assert data["ranking"]["routed"]["auroc"]["estimate"] > 0.7 and data["sweeps"]["noise"]["apgr"] is not None


def test_small_test_sets_are_called_small(dataset_dir):
    cfg = E.EvalConfig(data=str(dataset_dir))
    cfg.bootstrap.n_boot = 50
    report, _ = E.evaluate_records(E.load_split(dataset_dir, "test"), cfg, KeywordRouter(), "keyword")
    notes = " ".join(report["uncertainty"]["notes"])
    assert "only 4 questions" in notes and "prove nothing" in notes and "only 1 conversation" in notes
    assert "caution" in E.eval_report.render_markdown(report)


def test_compare_config_builds_routers_through_the_registry(tmp_path, capsys):
    """Any labeled JSONL with a label config.yaml beside it; main + compared routers from the registry."""
    from serving.routers.top1 import Top1ScoreRouter

    data_dir = tmp_path / "other_label"
    data_dir.mkdir()
    (data_dir / "config.yaml").write_text("data_path: my_convs.json\nlabel_rule: evidence\n")
    rows = _many(n_conv=3, per=10)
    for r in rows:
        r["router_summaries"][0]["score"] = 0.9 if r["router_summaries"][0]["text"] == "SAYS IT" else 0.2
    (data_dir / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    Top1ScoreRouter().save(tmp_path / "top1")  # uncalibrated: the spec's threshold applies
    out = tmp_path / "eval"
    rc = E.main([f"data={data_dir / 'records.jsonl'}", "router.kind=always-escalate", f"output_dir={out}",
                 "bootstrap.n_boot=100",
                 f"compare=[{{name: top1, kind: top1-score, path: {tmp_path / 'top1'}, threshold_logit: -0.5}}, "
                 "{name: never, kind: always-answer}]"])
    assert rc == 0, capsys.readouterr().err
    data = json.loads((out / "eval.json").read_text())
    assert set(data["policies"]) >= {"routed", "top1", "never"}
    assert data["policies"]["top1"]["accuracy"] > data["policies"]["never"]["accuracy"]
    assert data["meta"]["compared"]["top1"]["threshold_logit"] == -0.5
    assert data["ranking"]["top1"]["auroc"]["estimate"] > 0.7
    assert data["ranking"]["never"]["auroc"]["estimate"] == 0.5  # a constant score ranks at chance
    prov = data["meta"]["provenance"]
    assert prov["label_config"].endswith("other_label/config.yaml") and prov["data_path"] == "my_convs.json"
    md = (out / "eval.md").read_text()
    assert "my_convs.json" in md and "contract: not recorded" in md
    assert E.main(["router.kind=none", "compare=[{kind: always-answer}]"]) == 2
    assert "needs a name" in capsys.readouterr().err
    assert E.main(["router.kind=none", "compare=[{name: random, kind: always-answer}]"]) == 2
    assert "reserved" in capsys.readouterr().err


def test_old_router_kind_names_are_unknown_kinds():
    # no aliases in a package never released: `trained` and `llm` were renamed local and teacher
    for old in ("trained", "llm"):
        with pytest.raises(E.ConfigError, match=f"unknown router kind '{old}'"):
            E.parse_cli(E.EvalConfig, [f"router.kind={old}"], default_config=None)


def test_pairs_add_head_to_head_differences_with_tokens(tmp_path):
    """`pairs`: a refined router against the one it started from (the demo's grpo vs sft), in accuracy, AUROC and
    mean input tokens at each row's threshold; a pair with the main router replaces that row's main comparison."""
    records = _many()
    cfg = E.EvalConfig(data=str(tmp_path / "none"), output_dir=str(tmp_path / "eval"),
                       compare=[{"name": "noise", "kind": "always-answer"}], pairs=[["noise", "routed"]])
    cfg.bootstrap.n_boot = 200
    report, _ = E.evaluate_records(records, cfg, KeywordRouter(), "keyword",
                                   compare=[("noise", NoiseRouter(), "noise router")])
    pairs = [c for c in report["comparisons"] if c.get("pair")]
    assert {c["metric"] for c in pairs} == {"accuracy", "mean input tokens", "AUROC", "APGR"}
    assert all((c["a"], c["b"]) == ("noise", "routed") for c in pairs)
    auroc = next(c for c in pairs if c["metric"] == "AUROC")
    assert auroc["hi"] < 0 and "worse" in auroc["reading"]
    # no second copy of the main-router comparison for the same row
    assert len([c for c in report["comparisons"] if (c["a"], c["b"], c["metric"]) == ("noise", "routed", "AUROC")]) == 1
    tokens = next(c for c in pairs if c["metric"] == "mean input tokens")
    policies = report["policies"]
    assert tokens["estimate"] == pytest.approx(policies["noise"]["mean_input_tokens"]
                                               - policies["routed"]["mean_input_tokens"])
    assert "noise is worse than routed on AUROC" in E.eval_report.render_markdown(report)
    with pytest.raises(E.ConfigError, match="pairs"):
        E.EvalConfig(compare=[{"name": "noise", "kind": "always-answer"}], pairs=[["noise", "sft"]])
