"""Research that finds the turn (issue 40): turns ranked by BM25 and the turn embeddings fused, the best few dozen
scored by the reader, and the pages of the best-scored turns read first, within the same bound."""

import dataclasses

import numpy as np
import pytest

from tests.helpers.memory_runtime import CFG, build
from tiermem.data.records import Conversation, Turn
from tiermem.memory.extractive import AnswerReader
from tiermem.memory.memory_config import MemoryConfig
from tiermem.memory.policies import first_round_pages
from tiermem.memory.runtime import MemoryRuntime
from tiermem.memory.turns import TURN_VECTORS, TurnIndex, pages_by_turns, rescore
from tiermem.settings.errors import StoreError

ANSWER = "The one I race is painted orange, like a traffic cone."


def _conversation() -> Conversation:
    """Pages of kayak talk that outscore, by words, the one page whose turn answers what colour Ada's kayak is."""
    turns, n = [], 0

    def say(speaker: str, text: str, day: int) -> None:
        nonlocal n
        turns.append(Turn(f"D{day}:{n}", speaker, text, f"{day} May 2024 10:00", f"S{day}"))
        n += 1

    for day in range(1, 7):
        say("Ada", "Kayak club again today, Ada kayak kayak: the kayak race and kayak colour talk at the kayak shed.",
            day)
        say("Ben", "Kayak kayak kayak. What colour kayak did the club buy for the kayak race? Kayak colour matters.",
            day)
        say("Ada", "The kayak club kayak is blue; the colour of the kayak shed is green; kayak kayak.", day)
    say("Ben", "How did the weekend go? Anything new in the boat department?", 9)
    say("Ada", ANSWER, 9)
    say("Ben", "Nice. Did you eat anything good after the trip?", 9)
    return Conversation("ada-kayak", turns, [], "test")


class ReaderStub:
    """A cross-encoder stand-in: the turn that answers scores 5, anything else -3."""

    def __init__(self):
        self.batches = []

    def logits(self, questions, texts):
        self.batches.append(list(texts))
        return [5.0 if "orange" in t else -3.0 for t in texts]


Q = "What colour is the kayak Ada races?"
CFG1 = dataclasses.replace(CFG, answerer="extractive", fixed_policy="research", pages_per_round=1, max_rounds=1,
                           keyword_k=1, top_k=1)


def _answer_page(rt):
    return next(p.page_id for p in rt.memory.raw.pages(rt.memory.conv_id) if any(t.text == ANSWER for t in p.turns))


def test_the_answering_turn_is_read_within_the_bound(tmp_path):
    rt = build(tmp_path, _conversation(), CFG1, answer_reader=AnswerReader(ReaderStub(), 0.0, "stub"))
    target = _answer_page(rt)
    retrieved = rt.memory.search_summaries(Q, 1)
    before = first_round_pages(rt.memory, Q, retrieved, pages_per_round=1, keyword_k=1, turn_k=0)
    assert target not in before[:1]  # pages by words alone: the kayak talk, not the answer
    hits = rt.memory.search_turns(Q, 36)
    assert any(h.turn.text == ANSWER for h in hits)  # among the candidate turns (BM25 + embedding)
    out = rt.answer(Q)
    assert out.research.pages_read == [target] and out.cost.pages_read == 1  # the bound: 1 round of 1 page
    assert out.evidence.quote == ANSWER and out.reading.logit == 5.0
    rt.close()


def test_without_a_reader_the_fused_turns_still_add_their_pages(tmp_path):
    rt = build(tmp_path, _conversation(), CFG1)
    hits = rt.memory.search_turns(Q, 36)
    assert pages_by_turns(hits)  # page order by summed fused score
    pages = first_round_pages(rt.memory, Q, [], pages_per_round=1, keyword_k=1)
    assert set(pages_by_turns(hits)) <= set(pages)
    ranked = rescore(hits, Q, ReaderStub())
    assert ranked[0].turn.text == ANSWER and ranked[0].logit == 5.0
    rt.close()


def test_turn_vectors_are_stored_at_ingest_and_checked(tmp_path):
    rt = build(tmp_path, _conversation(), CFG1)
    workdir = rt.workdir
    assert (workdir / TURN_VECTORS).is_file() and rt.memory.turns.vectors is not None
    assert rt.memory.turns.vectors.shape[0] == len(rt.memory.turns.rows)
    rt.close()
    vectors = np.load(workdir / TURN_VECTORS)
    np.save(workdir / TURN_VECTORS, vectors * 0)
    with pytest.raises(StoreError, match="turn vectors"):
        MemoryRuntime(workdir, CFG1, embedder=rt.embedder, count_tokens=rt.count_tokens)


def test_bm25_alone_ranks_when_no_vectors():
    from tiermem.memory.raw_store import paginate, whitespace_tokens

    pages = paginate("c", _conversation().turns, whitespace_tokens, 60)
    index = TurnIndex(pages)
    hits = index.rank("orange traffic cone", None, 3)
    assert hits[0].turn.text == ANSWER
    with pytest.raises(ValueError, match="turn vectors"):
        TurnIndex(pages, np.zeros((1, 4), dtype=np.float32))


def test_turn_k_is_a_checked_setting():
    from tiermem.settings.errors import ConfigError

    with pytest.raises(ConfigError, match="turn_k"):
        MemoryConfig(turn_k=-1)


def test_a_conversation_within_the_bound_is_read_whole_without_asking_the_reader(tmp_path):
    stub = ReaderStub()
    cfg = dataclasses.replace(CFG1, max_rounds=3, pages_per_round=3, page_tokens=400)
    rt = build(tmp_path, _conversation(), cfg, answer_reader=AnswerReader(stub, 0.0, "stub"))
    pages = {p.page_id for p in rt.memory.raw.pages(rt.memory.conv_id)}
    assert len(pages) <= 9
    out = rt.answer(Q)
    assert set(out.research.pages_read) == pages and len(stub.batches) == 1  # the sentences only
    rt.close()
