"""Serve-time baseline routers: features, fitting, save/load through the registry, calibration and the CLI."""

import json

import numpy as np
import pytest

from serving.routers import Router, RouterSpec, build
from serving.routers.features import FeatureRouter
from serving.routers.registry import router_class
from serving.routers.top1 import Top1ScoreRouter
from serving.signals import FEATURES, NO_SUMMARY_SCORE, feature_matrix, features, question_form
from tests.helpers.feature_data import _label_dataset, _synthetic
from tiermem.models.logistic import fit_logistic


def test_features_of_a_hand_example():
    summaries = [{"text": "Caroline adopted two dogs in May.", "score": 0.8, "date": "2023-05-08"},
                 {"text": "Melanie paints.", "score": 0.5, "date": None}]
    f = features("When did Caroline adopt the dogs?", summaries)
    assert f["top1"] == 0.8 and f["mean_score"] == pytest.approx(0.65) and f["gap12"] == pytest.approx(0.3)
    # content words of the question: caroline, adopt, dog -> caroline and dog appear ("dogs" -> "dog")
    assert f["overlap"] == pytest.approx(2 / 3) and f["overlap_best"] == pytest.approx(2 / 3)
    assert f["when"] == 1 and f["how_many"] == 0 and f["yes_no"] == 0 and f["has_date"] == 1
    assert f["n_summaries"] == 2
    g = features("How many books did Mel read?", [])
    assert g["how_many"] == 1 and g["top1"] == NO_SUMMARY_SCORE and g["overlap"] == 0 and g["n_summaries"] == 0
    assert question_form("Did Jon run a race?")["yes_no"] == 1
    assert question_form("What are Mel's hobbies?")["list_like"] == 1
    assert question_form("Why did Jon quit?")["why"] == 1
    with pytest.raises(ValueError, match=r"record 3: summaries\[0\]: retrieval 'score'"):
        features("q", [{"text": "no score"}], where="record 3")




def test_fit_logistic_learns_and_ranks():
    from tiermem.stats import auroc

    qs, ss, ys = _synthetic(300, 0)
    model = fit_logistic(feature_matrix(qs, ss), np.array(ys, dtype=float), FEATURES)
    router = FeatureRouter(model)
    tq, ts, ty = _synthetic(200, 1)
    assert auroc(router.score(tq, ts), ty) > 0.85
    d = router.route_batch(tq[:3], ts[:3])
    assert all(x.score is not None and 0 < x.p_escalate < 1 for x in d)
    with pytest.raises(ValueError, match="one class"):
        fit_logistic(np.ones((3, 2)), np.zeros(3), ["a", "b"])


def test_top1_router_escalates_below_the_cutoff():
    r = build(RouterSpec(kind="top1-score", path=None, threshold_logit=-0.5))  # escalate when top1 < 0.5
    s = [[{"text": "a", "score": 0.7}], [{"text": "b", "score": 0.3}], []]
    d = r.route_batch(["q1", "q2", "q3"], s)
    assert [x.action for x in d] == ["ANSWER", "ESCALATE", "ESCALATE"]
    assert [x.score for x in d] == [-0.7, -0.3, 1.0] and d[0].p_escalate is None




def test_fit_save_load_roundtrip_through_the_registry_and_calibration(tmp_path):
    from evaluation.calibrate import main as calibrate_main
    from tiermem_cli.cli import main as cli_main

    data = _label_dataset(tmp_path)
    out = tmp_path / "features"
    assert cli_main(["fit-features", f"data={data}", f"output_dir={out}"]) == 0
    meta = json.loads((out / "tiermem_router.json").read_text())
    assert meta["router_kind"] == "features" and meta["adapter"] is False
    assert meta["metrics"]["validation"]["auroc"] > 0.8 and meta["data"]["train_records"] == 120
    from labeling.dataset import load_split

    rows = load_split(data, "test")
    qs, ss = [r["question"] for r in rows], [r["router_summaries"] for r in rows]
    via = [Router.from_pretrained(out), Router.from_pretrained(out), build(RouterSpec(kind="features", path=str(out))),
           router_class("features").load(out)]
    assert all(isinstance(r, FeatureRouter) for r in via)
    scores = [r.score(qs, ss) for r in via]
    assert all(s == scores[0] for s in scores) and len(set(scores[0])) > 50  # identical, and no ties
    # calibration stores its log-odds threshold in the directory; loading applies it
    assert calibrate_main([f"router={out}", f"data={data}", "criterion=escalation_rate", "value=0.3"]) == 0
    cal = json.loads((out / "tiermem_router.json").read_text())["calibration"]
    loaded = Router.from_pretrained(out)
    assert loaded.threshold_logit == cal["threshold_logit"] != 0.0
    d = loaded.route_batch(qs, ss)
    assert [x.action for x in d] == ["ESCALATE" if s >= cal["threshold_logit"] else "ANSWER" for s in scores[0]]
    # a top1-score directory: made by the same command, calibrated the same way
    top = tmp_path / "top1"
    assert cli_main(["fit-features", "kind=top1-score", f"data={data}", f"output_dir={top}"]) == 0
    assert calibrate_main([f"router={top}", f"data={data}"]) == 0
    t = Router.from_pretrained(top)
    assert isinstance(t, Top1ScoreRouter) and t.threshold_logit == json.loads(
        (top / "tiermem_router.json").read_text())["calibration"]["threshold_logit"]


def test_loading_the_wrong_kind_fails_clearly(tmp_path):
    from tiermem.settings.errors import RouterLoadError

    Top1ScoreRouter().save(tmp_path / "t")
    with pytest.raises(RouterLoadError, match="router_kind 'top1-score', not 'features'"):
        FeatureRouter.load(tmp_path / "t")
    (tmp_path / "f").mkdir()
    Top1ScoreRouter().save(tmp_path / "f")
    meta = json.loads((tmp_path / "f" / "tiermem_router.json").read_text())
    meta["router_kind"] = "features"
    (tmp_path / "f" / "tiermem_router.json").write_text(json.dumps(meta))
    with pytest.raises(RouterLoadError, match="feature_model.json not found"):
        Router.from_pretrained(tmp_path / "f")
    from serving.routers.local import LocalRouter

    with pytest.raises(RouterLoadError, match="holds a 'top1-score' router"):
        LocalRouter.from_pretrained(tmp_path / "t")


def test_served_through_the_http_endpoint_with_retrieval_scores():
    from fastapi.testclient import TestClient

    from serving.server import RequestError, ServeConfig, create_app, validate_route_request

    cfg = ServeConfig()
    _, clean, t = validate_route_request({"question": "q", "summaries": [{"text": "a", "score": 0.4}],
                                          "threshold_prob": 0.5}, cfg)
    assert clean == [{"text": "a", "date": None, "score": 0.4}] and t == 0.0  # probability 0.5 = log-odds 0
    assert validate_route_request({"question": "q", "summaries": [], "threshold_logit": -2.5}, cfg)[2] == -2.5
    with pytest.raises(RequestError, match="not both"):
        validate_route_request({"question": "q", "summaries": [], "threshold_prob": 0.5, "threshold_logit": 1}, cfg)
    with pytest.raises(RequestError, match=r"summaries\[0\].score"):
        validate_route_request({"question": "q", "summaries": [{"text": "a", "score": "high"}]}, cfg)
    client = TestClient(create_app(Top1ScoreRouter(threshold_logit=-0.5), cfg))
    health = client.get("/health").json()
    assert health["router"] == "top1-score" and health["threshold_logit"] == -0.5
    low = client.post("/route", json={"question": "q", "summaries": [{"text": "a", "score": 0.3}]}).json()
    high = client.post("/route", json={"question": "q", "summaries": [{"text": "a", "score": 0.7}]}).json()
    assert (low["action"], high["action"]) == ("ESCALATE", "ANSWER") and low["score"] == -0.3


def test_the_features_router_keeps_out_of_fold_scores_and_calibrates_on_them(tmp_path):
    """Issue 65: every question of train + validation is scored by a model fitted on the other conversations; the
    threshold and the demo's main-router choice read those, not one validation conversation."""
    from evaluation.calibrate import SCORES_FILE
    from evaluation.calibrate import main as calibrate_main
    from labeling.dataset import load_split
    from tiermem_cli.cli import main as cli_main

    data = _label_dataset(tmp_path)
    out = tmp_path / "features"
    assert cli_main(["fit-features", f"data={data}", f"output_dir={out}"]) == 0
    oof = json.loads((out / "oof_scores.json").read_text())
    rows = [r for s in ("train", "validation") for r in load_split(data, s)]
    assert oof["n"] == len(rows) and {r["split"] for r in oof["records"]} == {"train", "validation"}
    held = rows[0]["conv_id"]  # its score comes from a model that never saw its conversation
    fit_rows = [r for r in rows if r["conv_id"] != held and r["label"] in ("ANSWER", "ESCALATE")]
    x = feature_matrix([r["question"] for r in fit_rows], [r["router_summaries"] for r in fit_rows])
    model = fit_logistic(x, np.array([r["label"] == "ESCALATE" for r in fit_rows], dtype=float), FEATURES)
    want = model.log_odds(feature_matrix([rows[0]["question"]], [rows[0]["router_summaries"]]))[0]
    assert oof["records"][0]["score"] == pytest.approx(want)
    assert calibrate_main([f"router={out}", f"data={data}", "criterion=escalation_rate", "value=0.3"]) == 0
    scores = json.loads((out / SCORES_FILE).read_text())
    assert scores["scores_from"] == "out_of_fold" and "test" not in {r["split"] for r in scores["records"]}


def test_no_out_of_fold_scores_where_a_fold_has_nothing_to_fit_and_calibrate_scores_its_split(tmp_path, capsys):
    """A dataset without a validation split, or whose other conversations hold one label: the router is fitted as
    before, without oof_scores.json, and the reason is printed (never a traceback, never scores of a fold unfitted)."""
    from tiermem_cli.cli import main as cli_main

    data = _label_dataset(tmp_path)
    out = tmp_path / "features"
    assert cli_main(["fit-features", f"data={data}", f"output_dir={out}", "cv_splits=[train,nosuch]"]) == 0
    assert "no out-of-fold scores" in capsys.readouterr().out and not (out / "oof_scores.json").exists()
    meta = json.loads((out / "tiermem_router.json").read_text())
    assert "oof_scores" not in (meta.get("extra") or {}) and "oof_scores" not in meta
