"""The unit reader's targets from careful-reading judgments: which number each unit trains towards under each target
source, where its span target lies in the text the reader reads, and the stage's CV comparing the settings."""

from __future__ import annotations

import json
import random

import pytest

from router_train.reader.targets import NO_ANSWER, pairs, span_target, span_token_targets, unit_target
from serving.routers.unit_reader import unit_text
from tests.helpers.records import rec
from tests.helpers.tiny_bert import tiny_bert


def unit(text: str, recall: float | None, verdict: str | None = None, span: str | None = None, rank: int = 1,
         date: str | None = "8 May 2023") -> dict:
    return {"unit_id": f"u{rank}", "rank": rank, "text": text, "score": 0.5, "date": date, "page_ids": [],
            "speakers": [], "answer_recall": recall, "gold_in_pages": 0, "s_ok": recall == 1.0,
            "verdict": verdict, "span": span}


def test_each_source_gives_the_unit_its_own_number():
    lexical_yes_judged_no = unit("Ana: a friend gave me a pot, that's when I started", 1.0, "no")
    assert unit_target(lexical_yes_judged_no, "recall", "lexical") == 1.0
    assert unit_target(lexical_yes_judged_no, "recall", "judged") == 0.0
    assert unit_target(lexical_yes_judged_no, "recall", "both") == 0.5
    partial = unit("Leo: the project was huge", 0.0, "partial", "the project")
    assert unit_target(partial, "s_ok", "judged") == 0.5 and unit_target(partial, "s_ok", "lexical") == 0.0
    unjudged = unit("Other talk.", 0.25)
    assert {unit_target(unjudged, "recall", s) for s in ("lexical", "judged", "both")} == {0.25}
    no_gold = unit("Other talk.", None, "yes", "Other")
    assert unit_target(no_gold, "recall", "lexical") is None and unit_target(no_gold, "recall", "both") == 1.0


def test_the_span_target_points_at_the_quoted_words_in_what_the_reader_reads():
    u = unit("Mia: I joined the climbing gym last Monday.", 1.0, "yes", "last Monday")
    start, end = span_target(u)
    assert unit_text(u)[start:end] == "last Monday"
    assert span_target(unit("Mia: nothing here.", 0.0, "no")) == NO_ANSWER
    assert span_target(unit("Mia: nothing here.", 0.0)) is None  # unjudged: no span target, the margin trains
    assert span_target(unit("Mia: nothing here.", 1.0, "yes", "not in the text")) is None
    undated = unit("Mia: I joined the gym.", 1.0, "yes", "the gym", date=None)
    s, e = span_target(undated)
    assert unit_text(undated)[s:e] == "the gym"


def test_pairs_carry_judged_targets_and_spans_and_deeper_units_stay_lexical():
    r = {"qid": "q1", "question": "When did Mia join the gym?",
         "router_summaries": [{"text": "a"}, {"text": "b"}],
         "unit_targets": [unit("Mia: I joined the gym last Monday.", 0.0, "yes", "last Monday"),
                          unit("Mia: I started a diet.", 1.0, "no", rank=2),
                          unit("Mia went climbing.", 0.0, rank=3), unit("Mia ran.", 0.0, rank=4)]}
    got = pairs([r], "recall", deep_negatives=1, source="judged", spans=True)
    assert [p[2] for p in got] == [1.0, 0.0, 0.0]  # one deeper negative kept, its target lexical
    assert got[1][3] == NO_ANSWER and got[2][3] is None
    assert [p[3] for p in pairs([r], "recall", 1, "judged", spans=False)] == [None] * 3
    assert [p[2] for p in pairs([r], "recall", 1, "lexical")] == [0.0, 1.0, 0.0]


def test_the_head_distils_the_teachers_confidence_where_one_was_recorded():
    from router_train.reader.targets import head_targets

    rows = [{"label": "ESCALATE", "teacher": json.dumps({"action": "ANSWER", "confidence": 5})},
            {"label": "ANSWER", "teacher": json.dumps({"action": "ESCALATE", "confidence": 1})},
            {"label": "ANSWER", "teacher": None}]
    assert head_targets(rows, "label") == [1.0, 0.0, 0.0]
    assert head_targets(rows, "teacher") == pytest.approx([0.05, 0.59, 0.0])


def test_span_token_targets_cover_exactly_the_quoted_words(tmp_path):
    from tiermem.models.cross_encoder import CrossEncoder

    reader = CrossEncoder.load(tiny_bert(tmp_path / "tiny"), span_head=True)
    u = unit("Mia: I joined the climbing gym last Monday.", 1.0, "yes", "climbing gym")
    train = [("When?", unit_text(u), 1.0, span_target(u)), ("When?", "x", 0.0, NO_ANSWER), ("When?", "y", 0.0, None)]
    got = span_token_targets(reader, train)
    enc = reader.encode(["When?"], [unit_text(u)])
    s, e = got[0]
    assert reader.tokenizer.decode(enc["input_ids"][0][s: e + 1]) == "climbing gym"
    assert got[1:] == [(0, 0), (-100, -100)]


def _records(split: str, n: int, seed: int) -> list[dict]:
    """The lexical rule says a date unit answers; the careful reading says only the one that names the event does."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        name = rng.choice(["Caroline", "Melanie", "Jon", "Gina"])
        escalate = rng.random() < 0.5
        right = unit(f"{name}: I started pottery on Monday.", 1.0, "yes", "on Monday")
        wrong = unit(f"{name}: I started a diet on Monday.", 1.0, "no", rank=2)
        units = [dict(wrong, rank=1), dict(unit("Other talk.", 0.0, "no"), rank=2)] if escalate else [right, wrong]
        row = rec(f"{split}{i}", f"{split}-c{i % 3}", not escalate, True, "ESCALATE" if escalate else "ANSWER", split)
        teacher = {"action": "ESCALATE" if escalate else "ANSWER", "confidence": 1 + i % 5, "parsed_ok": True}
        row.update(question=f"When did {name} start pottery?", augmentation=None, unit_targets=units,
                   teacher=json.dumps(teacher),
                   router_summaries=[{k: u[k] for k in ("unit_id", "text", "score", "date", "page_ids")}
                                     for u in units])
        rows.append(row)
    return rows


@pytest.mark.slow
def test_cv_compares_every_target_setting_and_trains_the_chosen_one(tmp_path):

    from datasets import Dataset, DatasetDict

    from router_train.reader.unit_reader import main
    from tiermem.models.cross_encoder import CrossEncoder
    from tiermem.runs.oof_scores import read_oof_scores

    base = tmp_path / "base"
    CrossEncoder.load(tiny_bert(tmp_path / "tiny"), span_head=True).save(base)
    data = tmp_path / "dataset"
    DatasetDict({s: Dataset.from_list(_records(s, n, k)) for k, (s, n) in
                 enumerate([("train", 18), ("validation", 12), ("test", 6)])}).save_to_disk(str(data))
    out = tmp_path / "reader"
    assert main([f"data={data}", f"output_dir={out}", f"base={base}", "max_epochs=1", "poolings=[max]",
                 "text_weights=[1.0]", "learning_rate=3e-3", "finetune_layers=[1]",
                 "target_sources=[lexical,judged]", "span_targets=[true]", "head_targets=[label,teacher]"]) == 0
    meta = json.loads((out / "tiermem_router.json").read_text())
    settings = {g["targets"] for g in meta["metrics"]["cv_by_finetuning"]}
    assert settings == {"lexical+spans", "judged+spans"}  # finetune_layers=[1]: no zero-shot row
    assert meta["metrics"]["chosen"]["targets"] in settings
    assert {g["head_target"] for g in meta["metrics"]["cv_by_finetuning"]} == {"label", "teacher"}
    assert read_oof_scores(out, meta["oof_scores"])["settings"]["targets"] == meta["metrics"]["chosen"]["targets"]


def test_deep_positives_keeps_the_deeper_units_that_state_the_most_and_every_router_unit():
    """Issue 65: a long history's restated facts give a question a dozen deeper partial matches; the cap keeps the
    highest targets (ties: the higher rank), every router unit and the near misses, in rank order."""
    r = {"qid": "q1", "question": "Where does Mia climb?", "router_summaries": [{"text": "a"}, {"text": "b"}],
         "unit_targets": [unit("Mia: the gym.", 0.5), unit("Mia: hills.", 0.0, rank=2),
                          unit("Mia climbs at Boulder Hall.", 0.5, rank=3), unit("Mia ran.", 0.0, rank=4),
                          unit("Mia climbs, Boulder Hall, Tuesdays.", 1.0, rank=5),
                          unit("Boulder Hall is new.", 0.25, rank=6), unit("Mia climbs.", 0.5, rank=7)]}
    every = pairs([r], "recall", deep_negatives=1)
    assert [p[1].split(": ", 1)[-1] for p in every][2:] == [
        "Mia climbs at Boulder Hall.", "Mia ran.", "Mia climbs, Boulder Hall, Tuesdays.", "Boulder Hall is new.",
        "Mia climbs."]
    assert every == pairs([r], "recall", deep_negatives=1, deep_positives=None)
    two = pairs([r], "recall", deep_negatives=1, deep_positives=2)
    assert [p[2] for p in two] == [0.5, 0.0, 0.5, 0.0, 1.0]  # the 0.25 and the later 0.5 left out
    assert [p[2] for p in pairs([r], "recall", deep_negatives=0, deep_positives=0)] == [0.5, 0.0]
