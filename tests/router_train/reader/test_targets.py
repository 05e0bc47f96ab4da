"""The unit reader's lexical targets: which number each unit trains towards and which deeper units a question
keeps."""

from __future__ import annotations

from router_train.reader.targets import pairs, unit_target


def unit(text: str, recall: float | None, verdict: str | None = None, span: str | None = None, rank: int = 1,
         date: str | None = "8 May 2023") -> dict:
    return {"unit_id": f"u{rank}", "rank": rank, "text": text, "score": 0.5, "date": date, "page_ids": [],
            "speakers": [], "answer_recall": recall, "gold_in_pages": 0, "s_ok": recall == 1.0,
            "verdict": verdict, "span": span}


def test_each_unit_trains_towards_its_lexical_number_whatever_a_judgment_said():
    assert unit_target(unit("Ana: a friend gave me a pot, that's when I started", 1.0, "no")) == 1.0
    assert unit_target(unit("Leo: the project was huge", 0.0, "partial", "the project")) == 0.0
    assert unit_target(unit("Other talk.", 0.25)) == 0.25
    assert unit_target(unit("Other talk.", None, "yes", "Other")) is None  # no scorable gold token


def test_pairs_keep_router_units_and_the_nearest_deeper_negatives():
    r = {"qid": "q1", "question": "When did Mia join the gym?",
         "router_summaries": [{"text": "a"}, {"text": "b"}],
         "unit_targets": [unit("Mia: I joined the gym last Monday.", 0.0, "yes", "last Monday"),
                          unit("Mia: I started a diet.", 1.0, "no", rank=2),
                          unit("Mia went climbing.", 0.0, rank=3), unit("Mia ran.", 0.0, rank=4)]}
    assert [p[2] for p in pairs([r], 1)] == [0.0, 1.0, 0.0]


def test_deep_positives_keeps_the_deeper_units_that_state_the_most_and_every_router_unit():
    """Issue 65: a long history's restated facts give a question a dozen deeper partial matches; the cap keeps the
    highest targets (ties: the higher rank), every router unit and the near misses, in rank order."""
    r = {"qid": "q1", "question": "Where does Mia climb?", "router_summaries": [{"text": "a"}, {"text": "b"}],
         "unit_targets": [unit("Mia: the gym.", 0.5), unit("Mia: hills.", 0.0, rank=2),
                          unit("Mia climbs at Boulder Hall.", 0.5, rank=3), unit("Mia ran.", 0.0, rank=4),
                          unit("Mia climbs, Boulder Hall, Tuesdays.", 1.0, rank=5),
                          unit("Boulder Hall is new.", 0.25, rank=6), unit("Mia climbs.", 0.5, rank=7)]}
    every = pairs([r], deep_negatives=1)
    assert [p[1].split(": ", 1)[-1] for p in every][2:] == [
        "Mia climbs at Boulder Hall.", "Mia ran.", "Mia climbs, Boulder Hall, Tuesdays.", "Boulder Hall is new.",
        "Mia climbs."]
    assert every == pairs([r], deep_negatives=1, deep_positives=None)
    two = pairs([r], deep_negatives=1, deep_positives=2)
    assert [p[2] for p in two] == [0.5, 0.0, 0.5, 0.0, 1.0]  # the 0.25 and the later 0.5 left out
    assert [p[2] for p in pairs([r], deep_negatives=0, deep_positives=0)] == [0.5, 0.0]
