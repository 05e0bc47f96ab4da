"""Calibrate on the CV's out-of-fold scores (tiermem/runs/oof_scores.py) when the router keeps them, over every
train + validation conversation, else on the validation split; the result and the card say which."""

from __future__ import annotations

import numpy as np
import pytest

from evaluation.calibrate import CalibrateConfig
from tests.evaluation.test_operating_points import _replayable
from tests.helpers.router_fixtures import edit_run_meta
from tiermem.runs.oof_scores import OOF_SCORES_FILE, loco, read_oof_scores, write_oof_scores
from tiermem.runs.run_meta import read_run_meta
from tiermem.settings.errors import DataError
from tiermem_cli import cli

FLAGS = [(True, True), (False, True), (True, False), (False, True), (True, True), (False, True)]


def test_loco_scores_each_conversation_by_a_fit_on_the_others_labeled_records():
    records = [{"conv_id": c, "label": label} for c, label in
               [("a", "ANSWER"), ("a", "ESCALATE"), ("b", None), ("b", "ANSWER"), ("c", "ESCALATE")]]
    seen = []

    def score_held(fit, held):
        seen.append((fit.tolist(), held.tolist()))
        return [10.0 * len(seen) + i for i in range(int(held.sum()))]

    assert loco(records, score_held) == [10.0, 11.0, 20.0, 21.0, 30.0]
    # a: fit on b's labeled record and c's; b: on a's and c's (its unlabeled record scored, never fitted on)
    assert seen[0] == ([False, False, False, True, True], [True, True, False, False, False])
    assert seen[1] == ([True, True, False, False, True], [False, False, True, True, False])
    with pytest.raises(DataError, match="non-finite"):
        loco(records, lambda fit, held: np.full(int(held.sum()), np.nan))


@pytest.fixture()
def run(tmp_path):
    """A features router (fast to fit) given out-of-fold scores over its train + validation records, as the unit
    reader's stage writes them."""
    from datasets import Dataset, DatasetDict

    splits = {"train": [_replayable(i, "c1" if i < 3 else "c2", *FLAGS[i]) for i in range(6)],
              "validation": [_replayable(i, "c3", *FLAGS[i - 6]) for i in range(6, 12)],
              "test": [_replayable(i, "c4", *FLAGS[i - 12]) for i in range(12, 18)]}
    data = tmp_path / "dataset"
    DatasetDict({k: Dataset.from_list(v) for k, v in splits.items()}).save_to_disk(str(data))
    router = tmp_path / "router"
    assert cli.main(["fit-features", f"data={data}", f"output_dir={router}"]) == 0
    cv = splits["train"] + splits["validation"]
    kept = write_oof_scores(router, cv, [i - 5.5 for i in range(len(cv))],
                            {"dataset": str(data), "splits": ["train", "validation"], "method": "test folds",
                             "settings": {"pooling": "max"}})
    meta = read_run_meta(router)
    edit_run_meta(router, extra={**(meta.extra or {}), "oof_scores": kept})
    return data, router


def test_calibrate_uses_the_routers_out_of_fold_scores_over_train_and_validation(run):
    data, router = run
    kept = kept_file(router)
    assert kept["n"] == 12 and {"qid", "conv_id", "s_ok", "cost_research_input_tokens"} <= set(kept["records"][0])
    assert cli.main(["calibrate", f"router={router}", f"data={data}", "criterion=escalation_rate", "value=0.25"]) == 0
    cal = read_run_meta(router).calibration
    assert cal["scores_from"] == "out_of_fold" and cal["n_calibration"] == 12
    assert cal["split"] == "train, validation (out-of-fold)"
    assert cal["scored_on"] == "out-of-fold CV scores over 3 conversation(s) of train, validation"
    # scores -5.5 .. 5.5: escalating at least a quarter of 12 is the 3rd largest, 3.5
    assert cal["threshold_logit"] == 3.5 and cal["achieved"]["escalation_rate"] == 0.25
    card = (router / "README.md").read_text()
    assert "out-of-fold CV scores over 3 conversation(s)" in card and "not one validation split" in card

    # scores_from=split: the router scores the validation split itself
    assert cli.main(["calibrate", f"router={router}", f"data={data}", "scores_from=split"]) == 0
    cal = read_run_meta(router).calibration
    assert (cal["scores_from"], cal["split"], cal["n_calibration"]) == ("split", "validation", 6)
    assert "out-of-fold" not in (router / "README.md").read_text()


def test_other_data_falls_back_to_the_split_and_a_changed_file_is_refused(run, tmp_path, capsys):
    import shutil

    data, router = run
    other = tmp_path / "copy"
    shutil.copytree(data, other)
    assert cli.main(["calibrate", f"router={router}", f"data={other}"]) == 0
    cal = read_run_meta(router).calibration
    assert cal["scores_from"] == "split" and "not " + str(other) in cal["notes"][0]

    path = router / OOF_SCORES_FILE
    path.write_text(path.read_text().replace('"score": -5.5', '"score": 9.5'))
    assert cli.main(["calibrate", f"router={router}", f"data={data}"]) != 0
    assert "sha256 differs" in capsys.readouterr().err
    with pytest.raises(ValueError, match="scores_from must be one of"):
        CalibrateConfig(scores_from="out_of_fold")


def test_a_router_without_out_of_fold_scores(run, capsys):
    data, router = run
    meta = read_run_meta(router)
    edit_run_meta(router, extra={k: v for k, v in (meta.extra or {}).items() if k != "oof_scores"})
    assert cli.main(["calibrate", f"router={router}", f"data={data}"]) == 0  # auto: the validation split
    assert read_run_meta(router).calibration["scores_from"] == "split"


def kept_file(router):
    return read_oof_scores(router, read_run_meta(router).extra["oof_scores"])


def test_out_of_fold_records_keep_what_replay_reads_of_a_question_asked_before_its_evidence(tmp_path):
    """A RealMem request asked before its evidence was said has no path costs; replay skips it by its drop_reason,
    which the out-of-fold file must carry (it once did not, and calibration refused the record's null cost)."""
    from evaluation.metrics import replayable_records
    from labeling.question import LATE_EVIDENCE
    from tests.helpers.records import rec

    late = {**rec("q9", "c1", None, None, None, "train"), "drop_reason": LATE_EVIDENCE,
            "cost_summary_input_tokens": None, "cost_research_input_tokens": None, "source": "realmem"}
    records = [rec("q1", "c1", True, True, "ANSWER", "train"), late]
    write_oof_scores(tmp_path, records, [0.1, 0.2], {"dataset": "d", "splits": ["train"]})
    import json

    stored = json.loads((tmp_path / OOF_SCORES_FILE).read_text())["records"]
    assert stored[1]["drop_reason"] == LATE_EVIDENCE and stored[1]["source"] == "realmem"
    kept, _ = replayable_records(stored, "label_rule", True)
    assert [r["qid"] for r in kept] == ["q1"]
