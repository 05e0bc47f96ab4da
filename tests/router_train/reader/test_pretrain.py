"""Reading pre-training: SQuAD 2.0 loading (file and hub shapes), exact sentence targets, the cached checkpoint
reused on a second run, and config values out of range named. A tiny random BERT stands in for MiniLM."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from router_train.reader.reading_data import (
    heldout_split,
    load_reading_data,
    load_squad_hub,
    question_pairs,
    sentence_spans,
)
from tests.helpers.tiny_bert import tiny_bert
from tiermem.settings.errors import ConfigError, DataError

FIXTURE = Path(__file__).parents[2] / "helpers" / "fixtures" / "reading" / "squad2_small.json"


def _by_question(questions):
    return {q.question: q for q in questions}


def test_the_squad_file_loads_answerable_and_unanswerable_questions():
    questions, sha = load_reading_data(str(FIXTURE))
    assert len(questions) == 17 and sum(q.answerable for q in questions) == 11 and len(sha) == 64
    q = _by_question(questions)
    assert q["Who first mapped Lake Orvik?"].answers == ((q["Who first mapped Lake Orvik?"].context.index(
        "Ida Brenner"), "Ida Brenner"),)
    assert not q["Who first drained Lake Orvik?"].answerable and q["Who first drained Lake Orvik?"].article == \
        "Lake_Orvik"


def test_sentence_targets_are_exact():
    questions, _ = load_reading_data(str(FIXTURE))
    q = _by_question(questions)
    context = q["Who first mapped Lake Orvik?"].context
    assert [context[s:e] for s, e in sentence_spans(context)] == [
        "Lake Orvik is a glacial lake in the north of the valley.", "It was first mapped by Ida Brenner in 1871.",
        "The lake freezes every winter, and the ice is often thick enough for sledges.",
        "Fishing boats leave from the harbour of Tessdal."]
    # answerable: the sentence holding the span is the one positive; the negatives share the most content words
    # with the question (ties: paragraph order)
    # the positive carries its answer span as offsets into the sentence; negatives point at no answer (None)
    got = question_pairs(q["Where do the fishing boats leave from?"], negatives=1)
    assert got == [
        ("Where do the fishing boats leave from?", "Lake Orvik is a glacial lake in the north of the valley.", 0.0,
         None),
        ("Where do the fishing boats leave from?", "Fishing boats leave from the harbour of Tessdal.", 1.0, (25, 47))]
    text, span = got[1][1], got[1][3]
    assert text[span[0]: span[1]] == q["Where do the fishing boats leave from?"].answers[0][1]
    got = question_pairs(q["What did merchants pay for salt with?"], negatives=1)  # unanswerable: every sentence
    assert [p[2] for p in got] == [0.0] * 4 and len({p[1] for p in got}) == 4 and {p[3] for p in got} == {None}
    # two gold spans in one sentence: one positive pair
    two = question_pairs(q["Why did the night train service end?"], negatives=2)
    assert [p[1] for p in two if p[2] == 1.0] == ["The service ended in 1989 when the new line opened."]
    assert len(two) == 3


def test_whole_articles_are_held_out():
    questions, _ = load_reading_data(str(FIXTURE))
    train, held, titles = heldout_split(questions, 1, seed=0)
    assert len(titles) == 1 and {q.article for q in held} == set(titles)
    assert not {q.article for q in train} & set(titles) and len(train) + len(held) == len(questions)
    with pytest.raises(DataError, match="leaves none to train on"):
        heldout_split(questions, 3, seed=0)


def test_a_malformed_record_names_file_article_and_field(tmp_path):
    doc = json.loads(FIXTURE.read_text())
    doc["data"][1]["paragraphs"][0]["qas"][2]["answers"] = [{"text": "Varn", "answer_start": 3}]
    doc["data"][1]["paragraphs"][0]["qas"][2]["is_impossible"] = False
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(DataError, match=r"bad\.json data\[1\] \(Copper_trade\) paragraphs\[0\] qas\[2\] answers\[0\]"):
        load_reading_data(str(bad))
    with pytest.raises(DataError, match="no such file"):
        load_reading_data(str(tmp_path / "missing.json"))


def test_the_hub_shape_loads_through_datasets(monkeypatch):
    rows = [{"id": "a1", "title": "T", "context": "Ada built a boat. It sank.", "question": "Who built a boat?",
             "answers": {"text": ["Ada"], "answer_start": [0]}},
            {"id": "a2", "title": "T", "context": "Ada built a boat. It sank.", "question": "Who sank the boat?",
             "answers": {"text": [], "answer_start": []}}]
    fake = types.SimpleNamespace(load_dataset=lambda name, split: rows if (name, split) == ("org/squad_v2",
                                                                                          "validation") else None)
    monkeypatch.setitem(sys.modules, "datasets", fake)
    got = load_squad_hub("org/squad_v2", "validation")
    assert [q.answerable for q in got] == [True, False] and got[0].answers == ((0, "Ada"),)
    questions, sha = load_reading_data("hf:org/squad_v2")
    assert len(questions) == 2 and len(sha) == 64


@pytest.mark.parametrize("override, key", [("heldout_articles=0", "heldout_articles"), ("learning_rate=.nan",
                                           "learning_rate"), ("max_length=4096", "max_length"),
                                           ("batch_size=0", "batch_size"), ("warmup_share=1.5", "warmup_share")])
def test_a_config_value_out_of_range_is_named(override, key):
    from router_train.reader.pretrain import ReaderPretrainConfig
    from tiermem.settings.config import parse_config

    with pytest.raises(ConfigError, match=key):
        parse_config(ReaderPretrainConfig, None, [override])


def test_a_second_run_is_a_cache_hit_that_says_so(tmp_path, monkeypatch, capsys):
    from router_train.reader.pretrain import PRETRAIN_FILE, main

    monkeypatch.setenv("TIERMEM_CACHE", str(tmp_path / "cache"))
    base = tiny_bert(tmp_path / "tiny")
    args = [f"data={FIXTURE}", f"base={base}", "chat_data=[]", "heldout_articles=1", "epochs=2", "batch_size=8",
            "log_every=1", "learning_rate=1e-3"]
    assert main([*args, f"output_dir={tmp_path / 'a'}"]) == 0
    first = capsys.readouterr()
    assert "cache hit" not in first.err and "reader-pretrain: epoch 2/2" in first.err
    meta = json.loads((tmp_path / "a" / PRETRAIN_FILE).read_text())
    assert meta["data_sha256"] == load_reading_data(str(FIXTURE))[1] and meta["config"]["epochs"] == 2
    assert 0.0 <= meta["heldout"]["pair_auroc"] <= 1.0 and meta["train_pairs"] > 0
    # the extractive answerer's floor, calibrated on the held-out articles, is stored with the checkpoint
    from tiermem.memory.extractive import load_floor

    floor = meta["heldout"]["answer_floor"]
    assert floor["questions"] == meta["heldout"]["questions"] and load_floor(tmp_path / "a") == floor["floor"]

    assert main([*args, f"output_dir={tmp_path / 'b'}"]) == 0
    second = capsys.readouterr()
    assert "cache hit" in second.err and "epoch" not in second.err and json.loads(second.out)["cache_hit"]
    weights = "model.safetensors"
    assert (tmp_path / "a" / weights).read_bytes() == (tmp_path / "b" / weights).read_bytes()

    # an entry changed after it was built (its floor deleted) fails its digest check: a miss that rebuilds it
    # (issue 41), the same seeded weights and floor
    entry = next(p for p in (tmp_path / "cache" / "readers").iterdir() if (p / PRETRAIN_FILE).is_file())
    old = json.loads((entry / PRETRAIN_FILE).read_text())
    del old["heldout"]["answer_floor"]
    (entry / PRETRAIN_FILE).write_text(json.dumps(old))
    assert main([*args, f"output_dir={tmp_path / 'd'}"]) == 0
    assert "failed its check" in capsys.readouterr().err
    gained = json.loads((tmp_path / "d" / PRETRAIN_FILE).read_text())["heldout"]["answer_floor"]
    assert gained["floor"] == pytest.approx(floor["floor"], abs=1e-3)
    assert (tmp_path / "d" / weights).read_bytes() == (tmp_path / "a" / weights).read_bytes()

    assert main([*args, "epochs=1", f"output_dir={tmp_path / 'c'}"]) == 0  # another setting: another key
    assert "cache hit" not in capsys.readouterr().err


def test_the_card_of_a_unit_reader_names_the_hub_base_of_its_pretraining_and_what_cv_chose(tmp_path):
    """A unit reader started from a pre-trained checkpoint: its card names the hub base of the pre-training (no local
    path) and what CV chose."""
    from serving.model_card import render_card
    from tests.helpers.unit_reader_run import tiny_unit_reader
    from tiermem.runs.run_meta import read_run_meta
    from tiermem.runs.rundir import claimed_output_dir

    router = tiny_unit_reader(tmp_path / "tiny-bert")
    steps = [{"finetune_layers": 0, "epochs": 0, "mean": 0.7274, "text_alone_auroc": 0.7095},
             {"finetune_layers": 2, "epochs": 1, "mean": 0.7385, "text_alone_auroc": 0.7205}]
    pretrain = {"base": "packaged:all-minilm-l6-v2", "data": "squad2_dev_half.json", "train_pairs": 25175,
                "heldout": {"pair_auroc": 0.8836, "question_auroc": 0.7229}, "epochs": 1}
    with claimed_output_dir(tmp_path / "reader", "unit-reader") as out:
        router.save(out, data={"dataset": "runs/label/dataset", "train_split": "train", "train_records": 12},
                    metrics={"chosen": {**steps[1], "pooling": "max", "text_weight": 2.0, "min": 0.69, "max": 0.81},
                             "cv_by_finetuning": steps, "validation": {"n": 12, "auroc": 0.75}},
                    extra={"reader_base": str(tmp_path / "reader_pretrain"), "reader_pretrain": pretrain,
                           "config": {"score_batch_size": 16}})
    card = str(render_card(read_run_meta(tmp_path / "reader"), repo_id="me/reader"))
    assert "| chosen.finetune_layers | 2 |" in card and "| validation.auroc | 0.75 |" in card
    assert "base_model: sentence-transformers/all-MiniLM-L6-v2" in card and str(tmp_path) not in card
