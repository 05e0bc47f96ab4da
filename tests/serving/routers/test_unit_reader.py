"""The unit reader router: trained by its stage on per-unit targets with cross-validation over conversations, and
one scorer for the stage's metrics, eval, calibrate and serve. A tiny random BERT stands in for MiniLM (the
packaged tokenizer, 2 layers of width 32), so the whole stage runs in seconds."""

from __future__ import annotations

import json
import random

import pytest

from router_train.reader.targets import pairs
from router_train.reader.unit_cv import choose
from router_train.reader.unit_reader import UnitReaderConfig
from serving.routers.unit_reader import POOLINGS, pooled
from tests.helpers.records import rec
from tests.helpers.tiny_bert import tiny_bert as _tiny_bert
from tiermem.stats import auroc


def _records(split, n, seed, deep):
    """Questions whose answer-bearing unit ("X likes the thing") is among the router's units are ANSWER."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        name, thing = rng.choice(["Caroline", "Melanie", "Jon", "Gina"]), rng.choice(["guitar", "garden", "bakery"])
        escalate = rng.random() < 0.45
        stated = {"text": f"{name} likes the {thing}.", "recall": 1.0}
        miss = {"text": f"{name} talked about the weather.", "recall": 0.0}
        units = [miss, {"text": "Other talk.", "recall": 0.0}] if escalate else [stated, miss]
        deeper = [stated, {"text": f"{name} went out.", "recall": 0.0}] if deep else []
        summaries = [{"unit_id": f"u{j}", "text": u["text"], "score": rng.uniform(0.3, 0.8), "date": None,
                      "page_ids": []} for j, u in enumerate(units)]
        targets = [{"unit_id": f"u{j}", "rank": j + 1, "text": u["text"], "score": 0.5, "date": None, "page_ids": [],
                    "answer_recall": u["recall"], "gold_in_pages": 0, "s_ok": u["recall"] == 1.0}
                   for j, u in enumerate(units + deeper)]
        row = rec(f"{split}{i}", f"{split}-c{i % 3}", not escalate, True, "ESCALATE" if escalate else "ANSWER", split)
        row.update(question=f"What does {name} like?", router_summaries=summaries, unit_targets=targets,
                   augmentation=None)
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from datasets import Dataset, DatasetDict

    from router_train.reader.unit_reader import main

    tmp = tmp_path_factory.mktemp("reader")
    splits = {"train": _records("train", 36, 0, True), "validation": _records("validation", 18, 1, False),
              "test": _records("test", 24, 2, False)}
    data = tmp / "dataset"
    DatasetDict({k: Dataset.from_list(v) for k, v in splits.items()}).save_to_disk(str(data))
    out = tmp / "reader"
    assert main([f"data={data}", f"output_dir={out}", f"base={_tiny_bert(tmp / 'tiny')}", "max_epochs=2",
                 "poolings=[max,all]", "text_weights=[0.0,1.0]", "learning_rate=3e-3", "batch_size=32"]) == 0
    return data, out, splits


def test_the_stage_chooses_by_cross_validation_over_conversations(trained):
    _, out, splits = trained
    meta = json.loads((out / "tiermem_router.json").read_text())
    cv = meta["metrics"]["cv"]
    # the default 4 grouped folds over train + validation (3 + 3 conversations): validation held out whole (its
    # reader is the final one), each train conversation a fold; the default candidates: the base as it is
    # (zero-shot, scored once) and its top 2 layers fine-tuned per fold
    assert set(cv["folds"]) == {"zero-shot", "2 layer(s), lexical, held out validation-c0+validation-c1+validation-c2",
                                *(f"2 layer(s), lexical, held out train-c{i}" for i in range(3))}
    # (zero-shot + 2 layers x 2 epochs) x poolings x text weights
    assert len(meta["cv_grid"]) == (1 + 2) * 2 * 2
    assert {(g["finetune_layers"], g["epochs"]) for g in meta["metrics"]["cv_by_finetuning"]} == {(0, 0), (2, 1),
                                                                                                  (2, 2)}
    assert meta["metrics"]["chosen"] == choose({"grid": meta["cv_grid"]})
    assert meta["router_kind"] == "unit-reader" and meta["pooling"] in POOLINGS


def test_one_scorer_for_the_stage_eval_calibrate_and_serve(trained, tmp_path):
    from fastapi.testclient import TestClient

    from evaluation.calibrate import main as calibrate_main
    from evaluation.evaluate import main as eval_main
    from serving.routers import RouterSpec, build
    from serving.server import ServeConfig, create_app

    data, out, splits = trained
    router = build(RouterSpec(path=str(out)))
    validation = [r for r in splits["validation"]]
    scores = router.score([r["question"] for r in validation], [r["router_summaries"] for r in validation])
    labels = [r["label"] == "ESCALATE" for r in validation]
    meta = json.loads((out / "tiermem_router.json").read_text())
    assert meta["metrics"]["validation"]["auroc"] == auroc(scores, labels)  # the stage's metric, same scorer

    decisions = router.route_batch([r["question"] for r in validation], [r["router_summaries"] for r in validation])
    assert [d.score for d in decisions] == scores  # eval and calibrate read route_batch's scores
    for d in decisions:  # the parts add up to the score (eval's "what carries the decision")
        assert abs(sum(d.score_parts.values()) + router.head.bias - d.score) < 1e-9

    assert calibrate_main([f"router={out}", f"data={data}", "criterion=escalation_rate", "value=0.5"]) == 0
    report_dir = tmp_path / "eval"
    assert eval_main([f"data={data}", "split=test", f"router={out}", f"output_dir={report_dir}",
                      "bootstrap.n_boot=0", "compare=[]"]) == 0
    report = json.loads((report_dir / "eval.json").read_text())
    assert "text" in report["score_parts"]["routed"]  # eval reports the text part alone and the score without it
    # and what reading adds: the pre-trained reader as it is beside the fine-tuned one (when CV fine-tuned)
    reading, chosen = report["reading"]["routed"], meta["metrics"]["chosen"]
    expected = ["zero-shot (pre-trained only)", "fine-tuned on the conversations"] if chosen["finetune_layers"] \
        else ["zero-shot (pre-trained only)"]
    assert list(reading["rows"]) == expected and reading["n_labeled"] == len(splits["test"])
    assert all(0 <= row[p]["estimate"] <= 1 for row in reading["rows"].values() for p in ("text_alone", "full"))
    assert "What reading adds" in (report_dir / "eval.md").read_text()

    served = build(RouterSpec(path=str(out)))
    client = TestClient(create_app(served, ServeConfig()))
    r = validation[0]
    body = client.post("/route", json={"question": r["question"], "summaries": r["router_summaries"]}).json()
    # one question's 2 pairs in their own batch: the same function, float32 batching effects only
    assert body["score"] == pytest.approx(scores[0], rel=1e-5, abs=1e-6)


def test_pairs_keep_router_units_deeper_positives_and_the_top_near_misses():
    row = _records("train", 1, 3, True)[0]
    row["unit_targets"] += [dict(row["unit_targets"][-1], unit_id=f"n{i}", rank=5 + i) for i in range(4)]
    got = pairs([row], deep_negatives=2)
    k = len(row["router_summaries"])
    deeper = row["unit_targets"][k:]
    kept_negatives = [u for u in deeper if u["answer_recall"] == 0.0][:2]
    expected = row["unit_targets"][:k] + [u for u in deeper if u["answer_recall"] > 0] + kept_negatives
    assert sorted(p[1] for p in got) == sorted(u["text"] for u in expected)


def test_pooling_features():
    assert pooled([1.0, 3.0, -2.0], "max2") == [3.0, 1.0]
    softor = pooled([0.0, 0.0], "softor")[0]
    assert softor == pytest.approx(1.0986, abs=1e-3)  # 1 - 0.5 * 0.5 = 0.75 -> log(3)
    with pytest.raises(ValueError):
        UnitReaderConfig(poolings=["median"])


def test_a_qid_repeated_in_every_conversation_reads_its_own_logits(tmp_path):
    """The tiermem format reuses q1, q2 in every conversation: out-of-fold logits are keyed by (conversation,
    question), so the CV table is the same as with ids unique across conversations."""
    from router_train.reader.unit_cv import cross_validate

    cfg = UnitReaderConfig(base=str(_tiny_bert(tmp_path / "tiny")), max_epochs=1, poolings=["max"],
                           text_weights=[1.0], finetune_layers=[0, 1], learning_rate=3e-3)
    unique = _records("train", 24, 5, True)
    repeated = [dict(r, qid=f"q{i // 3}") for i, r in enumerate(unique)]  # q0, q1, ... in each conversation
    assert len({r["qid"] for r in repeated}) < len(repeated)
    convs = {"train-c0", "train-c1"}
    table_unique, table_repeated = cross_validate(cfg, unique, convs)[1], cross_validate(cfg, repeated, convs)[1]
    keys = ("finetune_layers", "epochs", "mean", "text_alone_auroc")
    assert [[g[k] for k in keys] for g in table_unique["grid"]] == [[g[k] for k in keys]
                                                                      for g in table_repeated["grid"]]


def test_records_without_a_split_are_refused_before_training(tmp_path, capsys):
    """A records file without `split` is every split at once: training and validating on the same rows."""
    from router_train.reader.unit_reader import main

    data = tmp_path / "records.jsonl"
    rows = [{k: v for k, v in r.items() if k != "split"} for r in _records("train", 12, 0, True)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main([f"data={data}", f"output_dir={tmp_path / 'out'}", f"base={tmp_path / 'never-read'}"]) == 3
    err = capsys.readouterr().err
    assert "is in split 'train' and in 'validation'" in err and str(data) in err
    assert not (tmp_path / "out" / "tiermem_router.json").exists()


def test_reading_says_why_a_row_is_missing(trained):
    """The zero-shot row needs the run's base checkpoint; when it is gone eval says so instead of guessing."""
    from evaluation.reading import FINE_TUNED, ZERO_SHOT, reading_steps
    from serving.routers import RouterSpec, build

    _, out, splits = trained
    router = build(RouterSpec(path=str(out)))
    router.meta.extra["reader_base"] = "/nonexistent/reader_pretrain"
    got = reading_steps(router, splits["test"], n_boot=0)
    if router.meta.extra.get("zero_shot"):  # CV fine-tuned the reader: its zero-shot row cannot be built here
        assert list(got["rows"]) == [FINE_TUNED] and "/nonexistent/reader_pretrain" in got["note"]
    else:  # CV chose the base as it is: the one row is the router itself
        assert list(got["rows"]) == [ZERO_SHOT] and "chose the pre-trained reader" in got["note"]
    assert got["rows"][next(iter(got["rows"]))]["full"]["lo"] is None  # n_boot 0: no interval


def test_the_stage_keeps_out_of_fold_scores_that_calibrate_uses(trained, capsys):
    from evaluation.calibrate import main as calibrate_main
    from tiermem.runs.oof_scores import read_oof_scores

    data, out, splits = trained
    meta = json.loads((out / "tiermem_router.json").read_text())
    kept = read_oof_scores(out, meta["oof_scores"])
    cv = splits["train"] + splits["validation"]  # every CV record, each scored by a head fitted on the others
    assert [(r["conv_id"], r["qid"]) for r in kept["records"]] == [(r["conv_id"], r["qid"]) for r in cv]
    chosen = meta["metrics"]["chosen"]
    assert kept["settings"] == {k: chosen[k] for k in ("finetune_layers", "epochs", "targets", "head_target",
                                                        "text_scores", "pooling", "text_weight")}
    assert meta["oof_scores"]["n_conversations"] == 6 and kept["splits"] == ["train", "validation"]
    capsys.readouterr()
    assert calibrate_main([f"router={out}", f"data={data}", "write=false"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["scores_from"] == "out_of_fold" and result["n_calibration"] == len(cv)
