"""The demo's main router by its worst domain on out-of-fold scores: served only when at or above the features router
on every domain's train + validation questions, else the features router is served; each domain's paired difference
has its interval; the test split is never read."""

import json

import pytest

from evaluation.calibrate import SCORES_FILE
from tiermem_cli.main_choice import CHOICE_FILE, choice_table, choose_main


def _scores(root, name, score, scores_from="out_of_fold", test_score=9.0):
    rows = []
    for domain in ("locomo", "realmem"):
        for i in range(40):
            y = i % 2 == 0
            rows.append({"conv_id": f"{domain}-c{i % 4}", "qid": f"{domain}-{i}",
                         "split": "validation" if i % 4 == 3 else "train",
                         "domain": domain, "label": "ESCALATE" if y else "ANSWER", "score": score(domain, i, y)})
    for i in range(8):  # the test split: never read, whatever it holds
        rows.append({"conv_id": f"t{i % 2}", "qid": f"t{i}", "split": "test", "domain": "locomo",
                     "label": "ESCALATE" if i % 2 else "ANSWER", "score": test_score * (1 if i % 2 else -1)})
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / SCORES_FILE).write_text(json.dumps({"scores_from": scores_from, "records": rows}))


def test_a_router_below_features_on_one_domain_is_not_served(tmp_path):
    _scores(tmp_path, "features", lambda d, i, y: (1.0 if y else 0.0) if d == "realmem" or i % 3 else 0.5)
    _scores(tmp_path, "reader", lambda d, i, y: (1.0 if y else 0.0) if d == "locomo" or i % 4 else 0.0)  # 0.75
    _scores(tmp_path, "sft", lambda d, i, y: 0.0)  # 0.5 on both
    choice = choose_main(tmp_path, ["reader", "sft"])
    assert choice["candidate"] == "reader" and choice["served"] == "features"
    row = choice["by_router"]["reader"]["locomo"]
    assert row["n"] == 40 and row["auroc"] == 1.0 and row["difference"]["estimate"] == pytest.approx(
        1.0 - row["features_auroc"])
    assert row["difference"]["lo"] <= row["difference"]["estimate"] <= row["difference"]["hi"]
    assert json.loads((tmp_path / CHOICE_FILE).read_text())["served"] == "features"
    assert "| reader | realmem |" in choice_table(choice)


def test_a_router_at_or_above_features_everywhere_is_served(tmp_path):
    _scores(tmp_path, "features", lambda d, i, y: float(i % 5))
    _scores(tmp_path, "reader", lambda d, i, y: (1.0 if y else 0.0))
    choice = choose_main(tmp_path, ["reader"])
    assert choice["served"] == "reader" and choice["worst_domain_auroc"]["reader"] == 1.0


def test_a_router_never_calibrated_is_named(tmp_path):
    _scores(tmp_path, "features", lambda d, i, y: 0.0)
    (tmp_path / "reader").mkdir()
    with pytest.raises(Exception, match=SCORES_FILE):
        choose_main(tmp_path, ["reader"])


def test_a_scores_file_with_a_bad_score_is_named_with_its_record(tmp_path):
    _scores(tmp_path, "features", lambda d, i, y: 0.0)
    _scores(tmp_path, "reader", lambda d, i, y: float("nan") if i == 3 else 0.0)
    with pytest.raises(Exception, match=r"record 3: field 'score' must be a finite number"):
        choose_main(tmp_path, ["reader"])


def _only(root, name, keep):
    """Keep only the validation records `keep(record)` holds of a router's scores file."""
    path = root / name / SCORES_FILE
    doc = json.loads(path.read_text())
    doc["records"] = [r for r in doc["records"] if keep(r)]
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("case", ["no overlap", "one domain only", "missing some questions"])
def test_routers_scored_on_other_questions_than_features_are_no_choice_and_the_reason_is_said(tmp_path, case):
    _scores(tmp_path, "features", lambda d, i, y: float(i % 5))
    _scores(tmp_path, "reader", lambda d, i, y: (1.0 if y else 0.0))  # perfect wherever it was scored
    keep = {"no overlap": lambda r: False, "one domain only": lambda r: r["domain"] == "locomo",
            "missing some questions": lambda r: not r["qid"].endswith("-7")}[case]
    _only(tmp_path, "reader", keep)
    if case == "no overlap":
        _scores(tmp_path / "x", "reader", lambda d, i, y: 1.0 if y else 0.0)
        path = tmp_path / "reader" / SCORES_FILE
        doc = json.loads((tmp_path / "x" / "reader" / SCORES_FILE).read_text())
        for r in doc["records"]:
            r["qid"] = "other-" + r["qid"]
        path.write_text(json.dumps(doc))
    choice = choose_main(tmp_path, ["reader"])
    assert choice["served"] == "features" and choice["candidate"] is None
    assert choice["reason"].startswith("no choice: reader did not score the same questions")
    assert json.loads((tmp_path / CHOICE_FILE).read_text())["served"] == "features"


def test_a_router_missing_a_domain_never_wins_the_worst_domain_choice(tmp_path):
    _scores(tmp_path, "features", lambda d, i, y: 0.0)
    _scores(tmp_path, "sft", lambda d, i, y: (1.0 if y else 0.0) if i % 3 else 0.5)  # good on both domains
    _scores(tmp_path, "reader", lambda d, i, y: (1.0 if y else 0.0))
    _only(tmp_path, "reader", lambda r: r["domain"] == "locomo")  # perfect, on one domain only
    choice = choose_main(tmp_path, ["reader", "sft"])
    assert choice["candidate"] is None and "reader did not score" in choice["reason"]


def test_a_question_scored_twice_is_named(tmp_path):
    _scores(tmp_path, "features", lambda d, i, y: 0.0)
    _scores(tmp_path, "reader", lambda d, i, y: 0.0)
    path = tmp_path / "reader" / SCORES_FILE
    doc = json.loads(path.read_text())
    doc["records"].append({**doc["records"][0], "score": 5.0})
    path.write_text(json.dumps(doc))
    with pytest.raises(Exception, match=r"record 88: question \(conv_id='locomo-c0', qid='locomo-0'\) is scored "
                                        "twice"):
        choose_main(tmp_path, ["reader"])


def test_the_choice_cannot_read_the_test_split(tmp_path):
    """Test records that would make the reader perfect, or hopeless, change nothing: not the choice, not a count."""
    _scores(tmp_path, "features", lambda d, i, y: (1.0 if y else 0.0) if i % 3 else 0.5)
    choices = []
    for test_score in (9.0, -9.0, float("nan")):
        _scores(tmp_path, "reader", lambda d, i, y: (1.0 if y else 0.0) if i % 5 else 0.5, test_score=test_score)
        choice = choose_main(tmp_path, ["reader"])
        choices.append(json.dumps(choice, sort_keys=True))
        assert {row["n"] for row in choice["by_router"]["reader"].values()} == {40}
    assert len(set(choices)) == 1


def test_a_router_calibrated_on_one_split_is_not_a_candidate_and_is_named(tmp_path):
    _scores(tmp_path, "features", lambda d, i, y: float(i % 5))
    _scores(tmp_path, "reader", lambda d, i, y: float(i % 7))
    _scores(tmp_path, "sft", lambda d, i, y: 1.0 if y else 0.0, scores_from="split")  # perfect, on one split
    choice = choose_main(tmp_path, ["reader", "sft"])
    assert "sft" not in choice["by_router"] and choice["candidate"] == "reader"
    assert choice["not_candidates"] == {"sft": "calibrated on one split: no out-of-fold scores"}
    assert "| sft | not a candidate" in choice_table(choice)
    _scores(tmp_path, "features", lambda d, i, y: float(i % 5), scores_from="split")
    choice = choose_main(tmp_path, ["reader", "sft"])
    assert choice["served"] == "features" and "the features router has no out-of-fold scores" in choice["reason"]
