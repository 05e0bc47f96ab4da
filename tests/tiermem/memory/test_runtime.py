import json
import sqlite3
from dataclasses import asdict, dataclass

import pytest

from tests.helpers.memory_runtime import CFG, answer_llm, build
from tiermem.data import load_conversations, load_locomo
from tiermem.llm import LLMError, ScriptedLLM
from tiermem.memory.policies import LinkedQuote
from tiermem.memory.runtime import MemoryConfig, MemoryRuntime
from tiermem.memory.summaries import HashingEmbedder


@pytest.fixture
def conv():
    return load_conversations(None)[1]




def test_ingest_links_every_unit_to_raw_turns(tmp_path, conv):
    rt = build(tmp_path, conv)
    stats = rt.manifest["stats"]
    mem = rt.memory
    pages = mem.raw.pages(conv.conv_id)
    assert stats["pages"] == len(pages) > 1 and stats["units"] == len(mem.summaries) > 0
    assert stats["page_tokens_max"] <= 60
    assert [t for p in pages for t in p.turns] == conv.turns
    for unit in mem.summaries.units:
        assert unit.page_ids and unit.turn_ids
        page_turns = {t for pid in unit.page_ids for t in mem.page(pid).turn_ids}
        assert set(unit.turn_ids) <= page_turns


def test_open_or_build_reuses_and_rebuilds_on_config_change(tmp_path, conv):
    llm = ScriptedLLM(lambda m: "- Lena studies marine biology in Lisbon. [D1:3]")
    cfg = MemoryConfig(page_tokens=60, tokenizer="whitespace", embedder="hashing", summarizer="llm")
    first = build(tmp_path, conv, cfg, summarizer_llm=llm)
    n_calls = len(llm.calls)
    assert n_calls == first.manifest["stats"]["pages"] and first.manifest["stats"]["summarizer"]["llm_calls"] == n_calls
    again = build(tmp_path, conv, cfg, summarizer_llm=llm)
    assert again.workdir == first.workdir and len(llm.calls) == n_calls  # reused, no new summarization
    other = build(tmp_path, conv, MemoryConfig(page_tokens=90, tokenizer="whitespace", embedder="hashing",
                                               summarizer="llm"), summarizer_llm=llm)
    assert other.workdir != first.workdir and len(llm.calls) > n_calls
    assert sorted(p.name for p in (tmp_path / "tiers").iterdir()) == sorted([first.workdir.name, other.workdir.name])


def test_failed_ingest_leaves_nothing_behind(tmp_path, conv):
    replies = iter(["- fact one. [D1:1]", LLMError("server down")])
    llm = ScriptedLLM(lambda m: next(replies, LLMError("server down")))
    cfg = MemoryConfig(page_tokens=60, tokenizer="whitespace", embedder="hashing", summarizer="llm")
    with pytest.raises(LLMError, match="server down"):
        build(tmp_path, conv, cfg, summarizer_llm=llm)
    assert not (tmp_path / "tiers").exists() or list((tmp_path / "tiers").iterdir()) == []


def test_incomplete_workdir_and_double_ingest_refused(tmp_path, conv):
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "raw.db").write_bytes(b"")
    with pytest.raises(RuntimeError, match="not a complete memory"):
        MemoryRuntime(tmp_path / "half", CFG)
    rt = build(tmp_path, conv)
    with pytest.raises(RuntimeError, match="already holds"):
        rt.ingest(conv)
    with pytest.raises(RuntimeError, match="same embedder"):
        MemoryRuntime(rt.workdir, MemoryConfig(tokenizer="whitespace"), embedder=HashingEmbedder())


def test_tampered_raw_page_refused_on_open(tmp_path, conv):
    rt = build(tmp_path, conv)
    workdir = rt.workdir
    rt.close()
    db = sqlite3.connect(workdir / "raw.db")
    db.execute("DROP TRIGGER pages_no_update")
    db.execute("UPDATE pages SET turns_json = replace(turns_json, 'Lisbon', 'Paris')")
    db.commit()
    db.close()
    with pytest.raises(RuntimeError, match="integrity check failed"):
        MemoryRuntime(workdir, CFG, embedder=HashingEmbedder())


def test_fixed_policies(tmp_path, conv):
    rt = build(tmp_path, conv, MemoryConfig(**{**CFG.__dict__, "answer_fallback": "none"}))
    rt.llm = answer_llm()
    q = conv.questions[3]  # octopuses
    out = rt.answer(q)
    assert (out.action, out.decided_by, out.answer, out.answer_source) == ("ANSWER", "fixed:summary", "Eleven", "lm")
    assert out.research is None and out.summary.retrieved == out.retrieved and len(out.retrieved) == CFG.top_k
    assert out.cost.llm_calls == 1
    rt.cfg = MemoryConfig(**{**CFG.__dict__, "fixed_policy": "research"})
    out = rt.answer(q)
    assert (out.action, out.decided_by) == ("ESCALATE", "fixed:research")
    assert out.summary is None and out.research.rounds >= 1 and out.cost.pages_read >= 1
    json.dumps(asdict(out))  # records serialize


@dataclass
class Decision:
    action: str
    parsed_ok: bool = True


class FixedRouter:
    def __init__(self, action, parsed_ok=True):
        self.decision = Decision(action, parsed_ok)
        self.seen = []

    def route(self, question, summaries):
        self.seen.append((question, [s.text for s in summaries]))
        return self.decision


def test_router_decides_the_path(tmp_path, conv):
    rt = build(tmp_path, conv)
    rt.llm = answer_llm()
    q = conv.questions[0]
    router = FixedRouter("ANSWER")
    out = rt.answer(q, router)
    assert out.action == "ANSWER" and out.decided_by == "router" and out.router_parsed_ok
    assert router.seen == [(q.question, [u.text for u in out.retrieved])]  # the router sees the retrieved units
    out = rt.answer(q, FixedRouter("ESCALATE"))
    assert out.action == "ESCALATE" and out.research is not None
    out = rt.answer(q, FixedRouter("maybe?"))  # unreadable -> escalate, flagged
    assert out.action == "ESCALATE" and out.router_parsed_ok is False
    out = rt.answer(q, FixedRouter("ESCALATE", parsed_ok=False))
    assert out.router_parsed_ok is False


def test_llm_error_is_an_error_not_an_answer(tmp_path, conv):
    rt = build(tmp_path, conv)
    rt.llm = ScriptedLLM(lambda m: LLMError("quota exceeded"))
    out = rt.answer(conv.questions[0])
    assert out.answer is None and "quota exceeded" in out.error
    assert out.answer_source is None and out.evidence is None and out.extractive_answer is None  # no quote as answer


def test_verified_write_back(tmp_path, conv):
    cfg = MemoryConfig(**{**CFG.__dict__, "fixed_policy": "research", "write_back": True})
    rt = build(tmp_path, conv, cfg)
    facts = {"facts": [
        {"fact": "Lena counted a record eleven octopuses on a research dive.", "quote": "Eleven on one dive"},
        {"fact": "Lena has a pet parrot.", "quote": "my parrot Kiwi"},  # links nowhere: never written back
    ]}
    rt.llm = answer_llm(integrate=json.dumps(facts))
    before = len(rt.memory.summaries)
    out = rt.answer("How many octopuses did Lena see on one dive?")
    assert [w.action for w in out.writeback] == ["add"]
    added = rt.memory.summaries.get(out.writeback[0].unit_id)
    assert added.origin == "writeback" and added.turn_ids == ["D3:3"]
    assert added.page_ids == [p.page_id for p in rt.memory.raw.pages() if "D3:3" in p.turn_ids]
    assert added.date == "15 October 2023" and len(rt.memory.summaries) == before + 1
    # persisted, and retrievable next time
    workdir = rt.workdir
    rt.close()
    reopened = MemoryRuntime(workdir, cfg, embedder=HashingEmbedder())
    assert reopened.memory.summaries.get(added.unit_id).text == added.text
    hits = reopened.memory.search_summaries("record eleven octopuses research dive", cfg.top_k)
    assert hits[0].unit_id == added.unit_id


def test_write_back_skip_update_add(tmp_path, conv):
    cfg = MemoryConfig(**{**CFG.__dict__, "writeback_skip_similarity": 0.95, "writeback_update_similarity": 0.6})
    rt = build(tmp_path, conv, cfg)
    page = next(p for p in rt.memory.raw.pages() if "D3:3" in p.turn_ids)
    fact = "Lena counted eleven octopuses on one dive"
    first = rt.write_back([LinkedQuote(fact, "Eleven on one dive", page.page_id, "D3:3", "exact", 1)])
    assert first[0].action == "add"
    again = rt.write_back([LinkedQuote(fact, "Eleven on one dive", page.page_id, "D3:3", "exact", 1)])
    assert again[0].action == "skip" and again[0].unit_id == first[0].unit_id
    variant = "Lena counted eleven octopuses on one dive, a team record"
    upd = rt.write_back([LinkedQuote(variant, "a record for our team", page.page_id, "D3:3", "exact", 1)])
    assert upd[0].action == "update" and upd[0].unit_id == first[0].unit_id
    unit = rt.memory.summaries.get(first[0].unit_id)
    assert unit.text == variant and unit.origin == "writeback-update" and unit.page_ids == [page.page_id]
    unlinked = rt.write_back([LinkedQuote("Lena likes jazz", "jazz", None, None, None, 1)])
    assert unlinked == []


@pytest.mark.filterwarnings("ignore:.*dropping unknown evidence")
def test_dev_conversation_ingest(tmp_path, locomo_path):
    conv = next(c for c in load_locomo(locomo_path) if c.conv_id == "conv-26")
    cfg = MemoryConfig(tokenizer="whitespace", embedder="hashing")
    rt = MemoryRuntime.open_or_build(tmp_path, conv, cfg)
    pages = rt.memory.raw.pages()
    assert all(p.token_count <= 1000 for p in pages) and sum(len(p.turns) for p in pages) == len(conv.turns)
    owner = {t.turn_id for p in pages for t in p.turns}
    assert all(e in owner for q in conv.questions for e in q.evidence)


def test_serving_routers_plug_in(tmp_path, conv):
    from serving.routers.fixed import AlwaysAnswer, AlwaysEscalate

    rt = build(tmp_path, conv)
    rt.llm = answer_llm()
    assert rt.answer(conv.questions[0], AlwaysAnswer()).action == "ANSWER"
    out = rt.answer(conv.questions[0], AlwaysEscalate())
    assert out.action == "ESCALATE" and out.decided_by == "router" and out.router_parsed_ok and out.research
