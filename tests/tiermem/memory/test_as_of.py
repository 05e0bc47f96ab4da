"""Memory as of a question: a later turn, and a unit made from one, never reach it through either path."""

import dataclasses

import pytest

from tests.helpers.memory_runtime import CFG, build
from tests.helpers.realmem_fixture import edited, write
from tiermem.data.realmem import load_realmem
from tiermem.memory.extractive import research_pages
from tiermem.memory.policies import first_round_pages
from tiermem.settings.errors import StoreError

SMALL_PAGES = dataclasses.replace(CFG, page_tokens=40)


@pytest.fixture
def conv(tmp_path):
    return load_realmem(write(tmp_path / "rm"))[0]


def _later(conv, turn_id):
    ids = [t.turn_id for t in conv.turns]
    return set(ids[ids.index(turn_id):])


def test_imported_units_are_tier_one_linked_to_their_source_pages(tmp_path, conv):
    runtime = build(tmp_path, conv, SMALL_PAGES)
    memory = runtime.memory
    assert memory.tier1 == "imported" and runtime.manifest["tier1"] == "imported"
    assert [u.unit_id for u in memory.summaries.units] == [u.unit_id for u in conv.summaries]
    for unit in memory.summaries.units:
        pages = {t.turn_id for p in memory.raw.get_many(unit.page_ids) for t in p.turns}
        assert set(unit.turn_ids) <= pages and unit.origin == "imported"
    extractive = build(tmp_path / "ext", conv, dataclasses.replace(SMALL_PAGES, summaries="extractive"))
    assert extractive.memory.tier1 == "built" and extractive.workdir != runtime.workdir
    assert {u.origin for u in extractive.memory.summaries.units} == {"extractive"}


@pytest.mark.parametrize("summaries", ["imported", "extractive"])
def test_a_later_turn_and_a_unit_made_from_one_never_reach_an_earlier_question(tmp_path, conv, summaries):
    runtime = build(tmp_path, conv, dataclasses.replace(SMALL_PAGES, summaries=summaries))
    q1 = conv.questions[0]  # asked at S2:3; its answer's fact is in S1:3, the guide (S2:1) before it too
    later = _later(conv, q1.asked_before)
    view = runtime.memory_for(q1)
    for query in ("Which room did I book at the lodge?", "ski pass price 480 yuan", "guide Aigerim Hemu"):
        units = view.search_summaries(query, 50)
        assert units and not {t for u in units for t in u.turn_ids} & later
        assert not {h.turn.turn_id for h in view.search_turns(query, 50)} & later
        for page_id in view.search_pages(query, 50):
            assert not {t.turn_id for t in view.page(page_id).turns} & later
        pages = first_round_pages(view, query, units, pages_per_round=50, keyword_k=50, turn_k=50)
        read = {t.turn_id for p in view.raw.get_many(pages) for t in p.turns}
        assert read and not read & later
        assert not {t.turn_id for p in view.all_pages() for t in p.turns} & later
    full = runtime.memory.search_summaries("ski pass price 480 yuan", 50)
    assert {t for u in full for t in u.turn_ids} & later  # the whole history does hold them


def test_no_unit_a_request_sees_states_what_is_first_said_after_it(tmp_path):
    """A point whose snapshot is an earlier turn of the other speaker (the user decides after the request): the
    request's memory holds no unit that states the decision, though the whole history does."""
    from tests.tiermem.data.test_realmem import _chosen_later

    conv = load_realmem(write(tmp_path / "rm", edited(_chosen_later)))[0]
    request = next(q for q in conv.questions if q.qid == "Q-0009")
    view = build(tmp_path, conv, SMALL_PAGES).memory_for(request)
    for query in ("Which lodge should I pick near Kanas?", "User has chosen the Kanas lodge."):
        assert "User has chosen the Kanas lodge." not in {u.text for u in view.search_summaries(query, 50)}
    full = build(tmp_path, conv, SMALL_PAGES).memory.search_summaries("chosen Kanas lodge", 50)
    assert "User has chosen the Kanas lodge." in {u.text for u in full}


def test_a_page_the_question_falls_in_is_read_cut_and_a_later_page_is_refused(tmp_path, conv):
    q1 = conv.questions[0]
    later = _later(conv, q1.asked_before)
    large = build(tmp_path, conv, dataclasses.replace(CFG, page_tokens=400))  # the question's turn mid-page
    page_id = next(p.page_id for p in large.memory.all_pages() if "S2:2" in {t.turn_id for t in p.turns})
    assert {t.turn_id for t in large.memory.page(page_id).turns} & later
    assert [t.turn_id for t in large.memory_for(q1).page(page_id).turns][-1] == "S2:2"
    small = build(tmp_path / "small", conv, SMALL_PAGES)
    wholly_later = [p for p in small.memory.all_pages() if {t.turn_id for t in p.turns} <= later]
    assert wholly_later
    with pytest.raises(StoreError, match="after the question"):
        small.memory_for(q1).page(wholly_later[0].page_id)


def test_the_runtime_answers_a_question_as_of_its_turn(tmp_path, conv):
    runtime = build(tmp_path, conv, dataclasses.replace(SMALL_PAGES, answerer="extractive"))
    q1 = conv.questions[0]
    later = _later(conv, q1.asked_before)
    view = runtime.memory_for(q1)
    retrieved = view.search_summaries(q1.question, runtime.cfg.top_k)
    assert not {t for u in retrieved for t in u.turn_ids} & later
    pages = research_pages(view, q1.question, q1.date, retrieved, runtime.cfg)
    assert not {t.turn_id for p in view.raw.get_many(pages) for t in p.turns} & later


def test_research_follows_imported_provenance_first(tmp_path, conv):
    runtime = build(tmp_path, conv, SMALL_PAGES)
    view = runtime.memory_for(conv.questions[1])
    units = view.search_summaries("guide", 1)
    pages = first_round_pages(view, "guide", units, pages_per_round=2, keyword_k=3, turn_k=5)
    assert pages[: len(units[0].page_ids)] == units[0].page_ids
