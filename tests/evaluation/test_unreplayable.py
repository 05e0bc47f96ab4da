"""Eval and calibrate read every record the labeler writes: a question without gold evidence ids gets r_ok=None
under the evidence rule and may still be labeled ANSWER. Replay counts such questions (n_unreplayable), leaves them
out of the replayed metrics and keeps them in the ranking ones; a verdict of the wrong type stays a RecordError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labeling.config import LabelConfig
from labeling.roles import Roles
from labeling.run import run as label_run
from tests.helpers.label_helpers import SMALL_MEMORY, HashEmbedder
from tiermem.data.tiermem_format import EXAMPLE_PATH
from tiermem.settings.config import from_dict
from tiermem_cli import cli


@pytest.fixture(scope="module")
def labeled_example(tmp_path_factory) -> Path:
    """The shipped example conversations, labeled generator-free (configs/label/own_conversations.yaml's rule) with
    research judged by its gold turns alone: the question without gold turn ids then has no research verdict (by
    default the text research read gives it one, so nothing in the example would be left to replay)."""
    out = tmp_path_factory.mktemp("label") / "run"
    cfg = from_dict(LabelConfig, {"output_dir": str(out), "data_path": str(EXAMPLE_PATH), "label_rule": "evidence",
                                  "generate_answers": False, "memory": {**SMALL_MEMORY, "max_rounds": 1},
                                  "evidence": {"research_by_text": False},
                                  "split": {"ratios": [0.5, 0.5, 0.0], "seed": 0}})
    label_run(cfg, Roles({}, need_answerer=False), embedder=HashEmbedder())
    return out


def _validation(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "all_records.jsonl").read_text().splitlines()]
    return [r for r in rows if r["split"] == "validation"]


def _fit(run_dir: Path, tmp_path: Path) -> Path:
    router = tmp_path / "features"
    assert cli.main(["fit-features", f"data={run_dir / 'dataset'}", "split=validation",
                     f"output_dir={router}", "eval_splits=[]"]) == 0
    return router


def test_the_example_has_a_labeled_question_without_a_research_verdict(labeled_example):
    rows = _validation(labeled_example)
    no_gold = [r for r in rows if r["r_ok"] is None]
    assert no_gold and all(r["label"] == "ANSWER" and r["n_gold"] == 0 for r in no_gold)
    assert {r["label"] for r in rows} - {None} == {"ANSWER", "ESCALATE"}  # a dropped question may sit beside them


def test_eval_on_the_labeled_example_counts_what_it_cannot_replay(labeled_example, tmp_path, capsys):
    router = _fit(labeled_example, tmp_path)
    out = tmp_path / "eval"
    rc = cli.main(["eval", f"data={labeled_example / 'dataset'}", "split=validation", "router.kind=features",
                   f"router.path={router}", f"output_dir={out}", "bootstrap.n_boot=20"])
    assert rc == 0, capsys.readouterr().err
    rows = _validation(labeled_example)
    n_unknown = sum(r["r_ok"] is None for r in rows)
    report = json.loads((out / "eval.json").read_text())
    meta = report["meta"]
    assert meta["n_unreplayable"] == meta["n_unreplayable_labeled"] == n_unknown
    assert meta["n"] == len(rows) - n_unknown  # replayed: only questions whose both verdicts are known
    assert report["policies"]["routed"]["n"] == meta["n"]
    # AUROC etc. read the label, which every labeled question has
    assert report["ranking"]["routed"]["n_labeled"] == sum(r["label"] is not None for r in rows)
    assert report["ranking"]["routed"]["auroc"]["estimate"] is not None
    md = (out / "eval.md").read_text()
    assert f"n_unreplayable: {n_unknown}" in md and "not replayable" in md
    preds = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert sorted(p["qid"] for p in preds if not p["replayed"]) == sorted(r["qid"] for r in rows
                                                                          if r["r_ok"] is None)


def test_calibrate_on_the_labeled_example_succeeds_and_reports_the_count(labeled_example, tmp_path, capsys):
    router = _fit(labeled_example, tmp_path)
    capsys.readouterr()
    rc = cli.main(["calibrate", f"router.path={router}", f"data={labeled_example / 'dataset'}", "split=validation"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    result = json.loads(captured.out[captured.out.index("{"):])
    n_unknown = sum(r["r_ok"] is None for r in _validation(labeled_example))
    assert result["n_unreplayable"] == n_unknown and result["n_calibration"] == result["n_records"] - n_unknown
    stored = json.loads((router / "tiermem_router.json").read_text())["calibration"]
    assert stored["n_unreplayable"] == n_unknown


@pytest.mark.parametrize("stage", ["eval", "calibrate"])
def test_a_research_verdict_of_the_wrong_type_names_file_record_and_field(labeled_example, tmp_path, capsys, stage):
    rows = _validation(labeled_example)
    rows[1]["r_ok"] = "yes"
    data = tmp_path / "records.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = (["eval", "router=always-escalate", f"output_dir={tmp_path / 'eval'}"] if stage == "eval"
            else ["calibrate", "router=always-escalate", "write=false"])
    assert cli.main([*args, f"data={data}", "split=validation"]) == 3
    err = capsys.readouterr().err
    assert f"RecordError: {data} [validation] record 1 (qid={rows[1]['qid']!r}): field 'r_ok' must be " \
           "true/false/null, got 'yes'" in err
    assert "Traceback" not in err
