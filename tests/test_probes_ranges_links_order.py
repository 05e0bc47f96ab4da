"""Probe table (docs/probes.md): numbers out of range, duplicate records, records that must
say where, writes through links, time order, text a tokenizer cannot take, the card's two truths, stage help.

Each probe goes through the real entry point (`tiermem-router <stage>` or the HTTP app) and asserts the named error,
its exit code or status, and that the message names the file and line (or the field)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from serving.routers.top1 import Top1ScoreRouter
from tests.helpers.records import rec
from tiermem.runs.run_meta import read_run_meta
from tiermem.settings.errors import EXIT_DATA, EXIT_RUN_DIR, EXIT_USAGE
from tiermem_cli import cli


def _records(tmp_path: Path, rows: list[dict[str, Any]], name: str = "val.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _rows(split: str = "validation", n: int = 6) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        label = "ANSWER" if i % 2 else "ESCALATE"
        row = rec(f"q{i}", f"c{i % 3}", label == "ANSWER", True, label, split)
        row["router_summaries"][0]["score"] = 0.1 + 0.1 * i
        rows.append(row)
    return rows


def _top1_run(tmp_path: Path) -> Path:
    return Top1ScoreRouter().save(tmp_path / "top1")


@pytest.fixture(scope="module")
def tiny_router() -> Any:
    """The test suite's tiny LM router (a random 2-layer Llama with the real tokenizer), loaded once."""
    from serving.routers.local import LocalRouter
    from tests.helpers.router_fixtures import make_router_run

    return LocalRouter.from_pretrained(make_router_run())


def _err_line(capsys: Any) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(lines) == 1, lines
    return lines[0]


# ---- 1, 6: a retrieval score out of its range, or no number, is refused where it is read -------------------------

# the raw JSON of the third record's first summary score -> the words the error must carry
SCORE_PROBES = {
    "1e308": ("1e308", "got 1e+308"),
    "BM25-scale 12.5": ("12.5", "BM25 or dot-product score"),
    "-3 (below a cosine)": ("-3", "got -3"),
    "NaN": ("NaN", "got nan"),
    "Infinity": ("Infinity", "got inf"),
    "400-digit integer": ("9" * 400, "integer of 400 digits"),
    "a string": ('"0.5"', "got '0.5'"),
}


def _with_raw_score(tmp_path: Path, raw: str, split: str = "validation") -> Path:
    rows = _rows(split)
    rows[2]["router_summaries"][0]["score"] = "@@SCORE@@"
    path = _records(tmp_path, rows)
    path.write_text(path.read_text().replace('"@@SCORE@@"', raw))
    return path


@pytest.mark.parametrize("name", sorted(SCORE_PROBES))
def test_a_retrieval_score_out_of_range_in_records_is_refused_by_calibrate_naming_file_line_field(
        tmp_path, capsys, name):
    raw, needle = SCORE_PROBES[name]
    data = _with_raw_score(tmp_path, raw)
    run = _top1_run(tmp_path)
    before = (run / "tiermem_router.json").read_bytes()
    code = cli.main(["calibrate", f"router={run}", f"data={data}"])
    err = _err_line(capsys)
    assert code == EXIT_DATA, err
    assert f"{data}: line 3: field 'router_summaries[0].score'" in err and needle in err
    assert "cosine similarity in [-1, 1]" in err and "Traceback" not in err
    assert (run / "tiermem_router.json").read_bytes() == before  # no threshold stored from it


@pytest.mark.parametrize("name", ["1e308", "NaN", "BM25-scale 12.5"])
def test_a_retrieval_score_out_of_range_in_records_is_exit_3_from_eval_not_70(tmp_path, capsys, name):
    data = _with_raw_score(tmp_path, SCORE_PROBES[name][0], split="test")
    out = tmp_path / "eval"
    code = cli.main(["eval", "router=top1-score", f"data={data}", f"output_dir={out}", "bootstrap.n_boot=0"])
    err = _err_line(capsys)
    assert code == EXIT_DATA, err
    assert f"{data}: line 3: field 'router_summaries[0].score'" in err and not out.exists()


def test_scores_at_the_ends_of_the_cosine_range_and_null_scores_are_accepted(tmp_path):
    from labeling.dataset import load_split

    rows = _rows()
    rows[0]["router_summaries"][0]["score"] = -1.0
    rows[1]["router_summaries"][0]["score"] = 1.0000001  # float32 rounding of a dot product of unit vectors
    rows[2]["router_summaries"][0]["score"] = None  # an LM router without a signal head needs none
    assert len(load_split(_records(tmp_path, rows), "validation")) == len(rows)


# ---- 3: (conv_id, qid) is a record's key ------------------------------------------------------------------------


def test_a_duplicate_record_is_a_named_error_in_calibrate_and_eval(tmp_path, capsys):
    rows = _rows()
    data = _records(tmp_path, [*rows, dict(rows[1])])
    code = cli.main(["calibrate", "router=top1-score", f"data={data}", "write=false"])
    err = _err_line(capsys)
    assert code == EXIT_DATA, err
    assert (f"{data}: line 7: duplicate record (conv_id='c1', qid='q1'); first at {data}: line 2" in err)
    test = _records(tmp_path, [{**r, "split": "test"} for r in [*rows, rows[4]]], "test.jsonl")
    code = cli.main(["eval", "router=top1-score", f"data={test}", f"output_dir={tmp_path / 'eval'}",
                     "bootstrap.n_boot=0"])
    err = _err_line(capsys)
    assert code == EXIT_DATA and "line 7: duplicate record (conv_id='c1', qid='q4')" in err


def test_the_same_qid_in_two_conversations_is_no_duplicate(tmp_path):
    from labeling.dataset import load_split

    rows = _rows()
    rows[1]["qid"] = rows[0]["qid"]  # q0 in c0 and in c1: two questions
    assert len(load_split(_records(tmp_path, rows), "validation")) == len(rows)


# ---- 1: a signal inside its meaning but outside what the router was trained on is clipped, counted, reported -------

def _narrow_feature_router() -> Any:
    """A features router fitted on retrieval scores in [0.2, 0.6] only: a higher score is beyond its training."""
    import numpy as np

    from serving.routers.features import FeatureRouter
    from serving.signals import FEATURES, feature_matrix
    from tiermem.models.logistic import fit_logistic

    questions = [f"When did Ada move to city {i}?" for i in range(20)]
    summaries = [[{"text": f"Ada moved to city {i}.", "date": None, "score": 0.2 + 0.4 * i / 19}] for i in range(20)]
    y = np.array([1.0 if i < 10 else 0.0 for i in range(20)])  # a low score: escalate
    return FeatureRouter(fit_logistic(feature_matrix(questions, summaries), y, FEATURES))


def _one(score: float) -> list[dict[str, Any]]:
    return [{"text": "Ada moved to city 3.", "date": None, "score": score}]


def test_a_signal_beyond_the_training_range_is_clipped_to_it_and_named_in_the_decision():
    router = _narrow_feature_router()
    assert router.model.train_min[0] == pytest.approx(0.2) and router.model.train_max[0] == pytest.approx(0.6)
    q = "When did Ada move to city 3?"
    edge, beyond, far, inside = (router.route(q, _one(s)) for s in (0.6, 0.95, 1.0, 0.4))
    # a linear model would extrapolate the score 0.95 to a far surer ANSWER; clipped, it reads 0.6
    assert beyond.score == pytest.approx(edge.score) and far.score == pytest.approx(edge.score)
    assert set(beyond.clipped) == {"top1", "mean_score"} and edge.clipped == [] and inside.clipped == []
    low = router.route(q, _one(-0.9))
    assert low.score == pytest.approx(router.route(q, _one(0.2)).score) and "top1" in low.clipped


def test_a_weightless_or_skipped_feature_is_clipped_but_not_reported():
    import numpy as np

    from tiermem.models.logistic import LogisticModel

    model = LogisticModel(["a", "b"], [0.0, 0.0], [1.0, 1.0], [1.0, 0.0], 0.0, 1.0, "balanced", 4, 0.5,
                          [0.0, 0.0], [1.0, 1.0])
    x = np.array([[2.0, 5.0], [0.5, 0.5]])
    assert model.log_odds(x).tolist() == [1.0, 0.5]
    assert model.clipped_features(x) == [["a"], []]  # b is clipped too, but weighs nothing
    assert model.clipped_features(x, skip=("a",)) == [[], []]


@pytest.mark.parametrize(("edit", "needle"), [
    ({"train_max": None}, "field 'train_max' must be given with its partner"),
    ({"train_min": [0.0]}, "field 'train_min' must be a list of 2 finite numbers"),
    ({"train_max": [1.0, float("nan")]}, "field 'train_max' must be a list of 2 finite numbers"),
    ({"train_min": [2.0, 0.0]}, "field 'train_min' exceeds train_max for features ['a']"),
])
def test_a_saved_training_range_is_checked_at_load_naming_the_field(tmp_path, edit, needle):
    from tiermem.models.logistic import read_logistic
    from tiermem.settings.errors import RouterLoadError

    fields = {"feature_names": ["a", "b"], "mean": [0.0, 0.0], "scale": [1.0, 1.0], "weights": [1.0, 1.0],
              "bias": 0.0, "l2": 1.0, "class_weight": "balanced", "n_train": 4, "train_escalate_share": 0.5,
              "train_min": [0.0, 0.0], "train_max": [1.0, 1.0], **edit}
    path = tmp_path / "feature_model.json"
    path.write_text(json.dumps(fields))
    with pytest.raises(RouterLoadError, match=None) as exc:
        read_logistic(path)
    assert str(path) in str(exc.value) and needle in str(exc.value)


def test_a_model_saved_without_a_training_range_loads_with_a_warning_and_clips_nothing(tmp_path, caplog):
    import numpy as np

    from tiermem.models.logistic import read_logistic

    path = tmp_path / "feature_model.json"
    path.write_text(json.dumps({"feature_names": ["a"], "mean": [0.0], "scale": [1.0], "weights": [2.0], "bias": 0.0,
                                "l2": 1.0, "class_weight": "balanced", "n_train": 4, "train_escalate_share": 0.5}))
    with caplog.at_level("WARNING"):
        model = read_logistic(path)
    assert "no training range recorded" in caplog.text and str(path) in caplog.text
    assert model.log_odds(np.array([[10.0]])).tolist() == [20.0] and model.clipped_features(np.array([[10.0]])) == [[]]


def test_the_trained_signal_head_clips_as_serving_does():
    import numpy as np
    import torch

    from router_train.lm.objectives import SignalHead

    model = _narrow_feature_router().model
    from serving.signals import feature_matrix

    x = feature_matrix(["When did Ada move to city 3?"] * 3, [_one(0.95), _one(-0.5), _one(0.4)])
    head = SignalHead(model)
    trained = head(torch.tensor(x, dtype=torch.float32)).detach().numpy()
    assert np.allclose(trained, model.log_odds(x), atol=1e-4)


def test_route_responses_name_the_clipped_signals_and_health_counts_them():
    client = _client(_narrow_feature_router())
    q = '"When did Ada move to city 3?"'  # as long as the training questions (q_words is a signal too)
    beyond = client.post("/route", content=_body("0.95", question=q))
    inside = client.post("/route", content=_body("0.4", question=q))
    assert beyond.status_code == inside.status_code == 200, (beyond.text, inside.text)
    assert "top1" in beyond.json()["clipped"] and inside.json()["clipped"] == []
    health = client.get("/health").json()
    assert health["route_decisions"] == 2 and health["route_decisions_clipped"] == 1


def test_eval_counts_and_reports_the_decisions_that_clipped_a_signal(tmp_path):
    run = _narrow_feature_router().save(tmp_path / "features")
    rows = _rows("test")
    for r in rows:  # questions and summaries like the training rows, scores inside their range
        r["question"], r["router_summaries"][0]["score"] = "When did Ada move to city 3?", 0.5
        r["router_summaries"][0].update(text="Ada moved to city 3.", date=None)
    rows[0]["router_summaries"][0]["score"] = 0.99  # beyond the router's training range
    rows[1]["router_summaries"][0]["score"] = 0.4
    out = tmp_path / "eval"
    assert cli.main(["eval", f"router={run}", f"data={_records(tmp_path, rows, 'test.jsonl')}", "split=test",
                     f"output_dir={out}", "bootstrap.n_boot=0"]) == 0
    report = json.loads((out / "eval.json").read_text())
    clipped = report["clipped_signals"]["routed"]
    assert clipped == {"n_decisions": 6, "n_clipped": 1, "by_feature": {"mean_score": 1, "top1": 1}}
    preds = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert "top1" in next(p for p in preds if p["qid"] == "q0")["clipped"]
    assert next(p for p in preds if p["qid"] == "q1")["clipped"] == []
    md = (out / "eval.md").read_text()
    assert "### Signals outside the training range" in md and "read signals outside the router's training range" in md


# ---- 1, 5: /route numbers and text, checked at the boundary ---------------------------------------------------

def _client(router: Any = None) -> Any:
    from fastapi.testclient import TestClient

    from serving.server import ServeConfig, create_app

    return TestClient(create_app(router or Top1ScoreRouter(), ServeConfig(max_body_bytes=200_000)),
                      raise_server_exceptions=False)


def _body(score: str = "0.5", extra: str = "", question: str = '"When did Ada move?"') -> str:
    return (f'{{"question": {question}, "summaries": [{{"text": "Ada moved in May.", "date": null, '
            f'"score": {score}}}]{extra}}}')


ROUTE_NUMBER_PROBES = [  # (raw JSON body, needle); every one a 422 naming the field
    (_body("50"), "summaries[0].score must be a cosine similarity in [-1, 1]"),
    (_body("1e308"), "summaries[0].score must be a cosine similarity"),
    (_body("-1.5"), "got -1.5"),
    (_body("12.75"), "BM25 or dot-product score"),
    (_body("9" * 400), "summaries[0].score must be a cosine similarity in [-1, 1] (docs/formats.md, 'Retrieval "
                       "scores'), got an integer of 400 digits"),
    (_body(extra=', "threshold_logit": ' + "9" * 400), "'threshold_logit' (log-odds; absent: the router's own) "
                                                          "must be a finite number, got an integer of 400 digits"),
    (_body(extra=', "threshold_logit": Infinity'), "'threshold_logit' (log-odds; absent: the router's own) must be "
                                                   "a finite number, got inf"),
    (_body(extra=', "threshold_logit": -Infinity'), "got -inf"),
    (_body(extra=', "threshold_prob": ' + "9" * 400), "'threshold_prob'"),
    (_body(extra=', "threshold_prob": 1.5'), "'threshold_prob' (absent: the router's own threshold) must be a "
                                             "probability in [0, 1], got 1.5"),
]


@pytest.mark.parametrize(("body", "needle"), ROUTE_NUMBER_PROBES)
def test_route_numbers_out_of_their_range_are_422_naming_the_field(body, needle):
    r = _client().post("/route", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert needle in r.json()["error"]


def test_route_numbers_in_range_still_decide():
    client = _client()
    for score, action in (("0.9", "ANSWER"), ("-1", "ESCALATE"), ("1", "ANSWER")):
        r = client.post("/route", content=_body(score, ', "threshold_logit": -0.5'))
        assert r.status_code == 200 and r.json()["action"] == action, r.text
    assert client.post("/route", content=_body(extra=', "threshold_logit": 1000000000')).status_code == 200


SURROGATE_PROBES = [  # a lone surrogate escape in each text field of a request
    ("/route", _body(question='"When did \\ud800 move?"'), "'question' holds a lone surrogate (U+D800)"),
    ("/route", _body().replace("Ada moved", "Ada \\udfff moved"), "summaries[0].text holds a lone surrogate"),
    ("/route", _body().replace('"date": null', '"date": "\\ud83d"'), "summaries[0].date holds a lone surrogate"),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi \\ud800"}]}',
     "messages[0].content holds a lone surrogate"),
]


@pytest.mark.parametrize(("path", "body", "needle"), SURROGATE_PROBES)
def test_a_lone_surrogate_is_a_422_naming_the_field_on_the_lm_router(tiny_router, path, body, needle):
    r = _client(tiny_router).post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert needle in r.json()["error"]
    # a surrogate pair written as two escapes is one valid character and is served
    ok = _body(question='"When did \\ud83d\\ude00 move?"')
    assert _client(tiny_router).post("/route", content=ok).status_code == 200


# ---- 8: stage help ---------------------------------------------------------------------------------------------

# the config class of each stage: tests/test_configs.py's CONFIG_CLASSES names them by config folder; these stages
# share another's
STAGE_CONFIG_FOLDER = {"label-merge": "label", "fit-features": "features", "ask": "ingest",
                       "unit-reader": "unit_reader", "reader-pretrain": "reader_pretrain",
                       "answer-floor": "answer_floor"}


def _leaf_keys(cls: type, prefix: str = "") -> list[str]:
    import dataclasses
    import types
    import typing

    hints = typing.get_type_hints(cls)
    keys = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = args[0] if len(args) == 1 and typing.get_origin(tp) in (typing.Union, types.UnionType) else tp
        has_default = f.default is not None or f.default_factory is not dataclasses.MISSING
        if dataclasses.is_dataclass(tp) and has_default:
            keys += _leaf_keys(tp, f"{prefix}{f.name}.")
        elif f.init:
            keys.append(prefix + f.name)
    return keys


@pytest.mark.parametrize("stage", sorted(cli.STAGES))
def test_every_stage_help_exits_0_and_lists_every_config_key(capsys, stage):
    import importlib

    from tests.test_configs import CONFIG_CLASSES

    module, name = CONFIG_CLASSES[STAGE_CONFIG_FOLDER.get(stage, stage)].split(":")
    cls = getattr(importlib.import_module(module), name)
    for flag in ("--help", "-h"):
        assert cli.main([stage, flag]) == 0
        out, err = capsys.readouterr()
        assert out.startswith(f"usage: tiermem-router {stage} ") and "error" not in err
        listed = {line.split()[0] for line in out.splitlines() if line.startswith("  ") and not line.startswith("   ")}
        missing = [k for k in _leaf_keys(cls) if k not in listed]
        assert not missing, f"{stage} --help does not list {missing}"


def test_label_help_shows_the_default_and_the_help_text_of_a_key(capsys):
    assert cli.main(["label", "--help", "output_dir=ignored"]) == 0
    out = capsys.readouterr().out
    assert "  question_sampling (random|first, default: 'random')\n      random (seeded) | first" in out
    assert "  memory.embedder (str, default: 'packaged:all-minilm-l6-v2')\n      a model spec, or \"hashing\"" in out
    assert "configs/label/cpu_default.yaml applied" in out  # the defaults the stage really uses


def test_top_level_help_lists_exactly_the_stage_table_and_the_demo_steps(capsys):
    from tiermem_cli.demo import STEPS

    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    block = out.split("stages:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split()[0] for line in block] == list(cli.STAGES)
    demo = next(line for line in block if line.split()[0] == "demo")
    assert " -> ".join(STEPS) in demo and "{" not in out


# ---- 2: no write goes through a link the stage did not create --------------------------------------------------

@pytest.mark.parametrize("name", ["README.md", ".tiermem-run.lock", "tiermem_router.json"])
def test_calibrate_refuses_a_router_directory_holding_a_link_and_writes_nothing_through_it(tmp_path, capsys, name):
    run = _top1_run(tmp_path)
    outside = tmp_path / "outside.txt"
    if name == "tiermem_router.json":  # a linked metadata file: the real one moved out of the directory
        (run / name).rename(outside)
    else:
        outside.write_text("keep me\n")
    before = outside.read_bytes()
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(outside)
    data = _records(tmp_path, _rows())
    code = cli.main(["calibrate", f"router={run}", f"data={data}"])
    err = _err_line(capsys)
    assert code == EXIT_RUN_DIR, err
    assert f"{run}: holds symbolic link(s) {name} -> {outside}" in err and "RunDirError" in err
    assert outside.read_bytes() == before and (run / name).is_symlink()


def test_eval_refuses_an_output_directory_holding_a_link(tmp_path, capsys):
    data = _records(tmp_path, _rows("test"), "test.jsonl")
    out = tmp_path / "eval"
    assert cli.main(["eval", "router=top1-score", f"data={data}", f"output_dir={out}", "bootstrap.n_boot=0"]) == 0
    capsys.readouterr()
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    (out / "eval.json").unlink()
    (out / "eval.json").symlink_to(outside)
    assert cli.main(["eval", "router=top1-score", f"data={data}", f"output_dir={out}", "bootstrap.n_boot=0"]) == 4
    assert "eval.json -> " in _err_line(capsys) and outside.read_text() == "{}"


def test_a_link_planted_after_the_claim_is_refused_at_the_write(tmp_path):
    """The claim's scan and the write are not one step: each write refuses a link on its own."""
    import os

    from tiermem.runs.safe_io import open_nofollow, write_atomic
    from tiermem.settings.errors import RunDirError

    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    link = tmp_path / "README.md"
    link.symlink_to(outside)
    with pytest.raises(RunDirError, match="README.md is a symbolic link"):
        write_atomic(link, "card")
    with pytest.raises(RunDirError, match="README.md is a symbolic link"):
        open_nofollow(link, os.O_RDWR | os.O_CREAT)
    assert outside.read_text() == "keep me\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "README.md", "outside.txt"]  # no temporary file left behind
    plain = write_atomic(tmp_path / "card.md", "card")
    assert plain.read_text() == "card" and oct(plain.stat().st_mode & 0o777) == "0o644"


# ---- 7, 9: the card, its metadata, and the evaluation of record ---------------------------------------------------

def _lm_run(tmp_path: Path) -> Path:
    import shutil

    from tests.helpers.router_fixtures import make_router_run

    run = tmp_path / "run"
    shutil.copytree(make_router_run(), run)
    return run


def _fixture_rows(split: str) -> list[dict[str, Any]]:
    from tests.helpers.router_fixtures import FIXTURES

    rows = []
    for i, (question, summaries, label) in enumerate(FIXTURES * 2):
        r = rec(f"f{i}", f"c{i % 2}", label == "ANSWER", True, label, split)
        r.update(question=question, router_summaries=[dict(s, unit_id="u", page_ids=[]) for s in summaries])
        rows.append(r)
    return rows


def _eval(run: Path, data: Path, out: Path, split: str = "test") -> None:
    assert cli.main(["eval", f"router={run}", f"data={data}", f"split={split}", f"output_dir={out}",
                     "bootstrap.n_boot=0"]) == 0


def test_a_pushed_card_with_its_eval_names_no_local_path(tmp_path):
    from datasets import Dataset, DatasetDict

    from serving.hub import read_eval
    from serving.model_card import render_card
    from tests.helpers.router_fixtures import edit_run_meta
    from tiermem.runs.run_meta import read_run_meta

    run = _lm_run(tmp_path)
    own = tmp_path / "label" / "dataset"  # the router's training data (its metadata names it)
    DatasetDict({s: Dataset.from_list(_fixture_rows(s)) for s in ("train", "validation", "test")}).save_to_disk(
        str(own))
    edit_run_meta(run, data={**read_run_meta(run).data, "data": str(own)})
    _eval(run, own, tmp_path / "eval-own")
    meta = read_run_meta(run)
    pushed = render_card(meta, "org/router", read_eval(str(tmp_path / "eval-own" / "eval.json"), meta))
    # the eval's data and the training data by what they are, no output directory
    assert "On `label records dataset/ (12 records, sha256 " in pushed and "| routed |" in pushed
    assert str(tmp_path) not in pushed and "| data | local label dataset dataset |" in pushed


# ---- 1: config numbers, and a calibrated threshold that makes the router a constant --------------------------------

@pytest.mark.parametrize(("override", "needle"), [
    ("recover_shares=[1e308]", "recover_shares: each must be a share of the accuracy gap in (0, 1], got [1e+308]"),
    ("recover_shares=[0.8, .nan]", "recover_shares[1]: must be a finite number, got nan"),
    ("recover_shares=[0]", "got [0]"),
    ("reliability_bins=0", "reliability_bins must be >= 1"),
    ("reliability_bins=-3", "got -3"),
])
def test_eval_config_numbers_out_of_range_are_exit_2_before_anything_runs(tmp_path, capsys, override, needle):
    data = _records(tmp_path, _rows("test"), "test.jsonl")
    out = tmp_path / "eval"
    code = cli.main(["eval", "router=top1-score", f"data={data}", f"output_dir={out}", override])
    err = _err_line(capsys)
    assert code == EXIT_USAGE and needle in err and not out.exists()


def test_a_threshold_that_escalates_nothing_is_flagged_on_stderr_in_the_metadata_and_on_the_card(tmp_path, capsys):
    rows = _rows()
    for r in rows:  # the summary path is always right: answering everything has the best reward
        r.update(s_ok=True, s_ok_evidence=True, label="ANSWER")
    run = _top1_run(tmp_path)
    assert cli.main(["calibrate", f"router={run}", f"data={_records(tmp_path, rows)}"]) == 0
    err = capsys.readouterr().err
    assert "tiermem-router calibrate: warning: threshold_logit 1e+09 escalates none of the 6 calibration records" in err
    cal = read_run_meta(run).calibration
    assert cal["achieved"]["escalation_rate"] == 0.0 and "escalates none" in cal["warnings"][0]
    assert "**Warning: threshold_logit 1e+09 escalates none" in (run / "README.md").read_text()
    mixed = _rows()  # a threshold inside the scores: no warning
    assert cli.main(["calibrate", f"router={run}", f"data={_records(tmp_path, mixed)}", "criterion=escalation_rate",
                     "value=0.5"]) == 0
    assert "warning" not in capsys.readouterr().err and read_run_meta(run).calibration["warnings"] == []


# ---- 4: time order of own-format conversations: sorted, counted, reported; zones mixed with none refused -----------

def _own(tmp_path: Path, edit: Any) -> Path:
    import copy

    from tiermem.data.tiermem_format import EXAMPLE_PATH

    doc = copy.deepcopy(json.loads(EXAMPLE_PATH.read_text()))
    doc["conversations"] = doc["conversations"][:1]
    edit(doc["conversations"][0]["turns"])
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(doc))
    return path


def _sessions_swapped(turns: list[dict[str, Any]]) -> None:
    """Session s3 (April) written before s1 (March) and s2; inside s2, its last turn stamped before the rest."""
    s3 = [t for t in turns if t["session"] == "s3"]
    rest = [t for t in turns if t["session"] != "s3"]
    turns[:] = s3 + rest
    turns[len(s3) + 12]["timestamp"] = "2024-03-17T09:00:00Z"  # s2-6, stamped before s2-1..5


def test_turns_and_sessions_out_of_time_order_are_sorted_counted_and_reported(tmp_path):
    from tests.tiermem.data.test_data_rules import _cfg, _label
    from tiermem.data.tiermem_format import load_tiermem

    path = _own(tmp_path, _sessions_swapped)
    (conv,) = load_tiermem(path)
    ids = [t.turn_id for t in conv.turns]
    assert ids[:7] == [f"s1-{i}" for i in range(1, 8)] and ids[7] == "s2-6" and ids[-6:] == [
        f"s3-{i}" for i in range(1, 7)]
    assert len(conv.reordered_turns) == len(ids)  # every position changed: all moved
    out = tmp_path / "run"
    stats = _label(_cfg(out, path, dataset_format="tiermem", max_questions_per_conversation=1))
    assert stats["time_order"]["turns_reordered"] == len(ids)
    assert stats["time_order"]["by_conversation"] == {conv.conv_id: len(ids)}
    assert json.loads((out / "stats.json").read_text())["time_order"]["turns_reordered"] == len(ids)
    assert (f"turns out of time order, sorted by the loader (sessions by first turn, turns by timestamp): {len(ids)} "
            f"({conv.conv_id}: {len(ids)})") in (out / "report.md").read_text()


def test_a_conversation_in_time_order_is_unchanged_and_equal_times_keep_file_order(tmp_path):
    from tiermem.data.tiermem_format import EXAMPLE_PATH, load_tiermem

    for conv in load_tiermem(EXAMPLE_PATH):
        assert conv.reordered_turns == []
    (conv,) = load_tiermem(_own(tmp_path, lambda turns: None))
    assert [t.turn_id for t in conv.turns][:3] == ["s1-1", "s1-2", "s1-3"]  # one timestamp per session


def test_time_zone_aware_timestamps_mixed_with_naive_ones_are_refused_naming_both(tmp_path, capsys):
    def mix(turns: list[dict[str, Any]]) -> None:
        turns[7]["timestamp"] = "2024-03-17 10:05"  # s2-1: no zone, the others have Z

    path = _own(tmp_path, mix)
    code = cli.main(["label", f"output_dir={tmp_path / 'out'}", f"data_path={path}", "dataset_format=tiermem"])
    err = _err_line(capsys)
    assert code == EXIT_DATA and str(path) in err and "TiermemFormatError" in err
    assert ("turn 's1-1' has a time zone ('2024-03-02T18:40:00Z') but turn 's2-1' has none ('2024-03-17 10:05')"
            in err) and not (tmp_path / "out").exists()
