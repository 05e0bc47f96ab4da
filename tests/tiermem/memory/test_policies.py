import json

import pytest

from tiermem.data import Turn, load_conversations
from tiermem.llm import LLMError, ScriptedLLM
from tiermem.memory.policies import (
    ANSWER_SYSTEM,
    INTEGRATE_SYSTEM,
    PLAN_SYSTEM,
    Search,
    parse_facts_reply,
    parse_plan_reply,
    research_policy,
    summary_policy,
)
from tiermem.memory.raw_store import Page, RawPageStore, paginate, whitespace_tokens
from tiermem.memory.summaries import ExtractiveSummarizer, HashingEmbedder, SummaryIndex
from tiermem.memory.text import link_quote
from tiermem.memory.tiers import TwoTierMemory


@pytest.fixture
def memory(tmp_path):
    conv = load_conversations(None)[1]  # Lena and Marcus
    pages = paginate(conv.conv_id, conv.turns, whitespace_tokens, 40)
    raw = RawPageStore(tmp_path / "raw.db")
    raw.append(pages)
    index = SummaryIndex(tmp_path / "t1", HashingEmbedder())
    index.add(ExtractiveSummarizer(keep_ratio=0.5).summarize_pages(pages))
    mem = TwoTierMemory.open(conv.conv_id, raw, index)
    yield mem
    mem.close()


def role(messages):
    system = messages[0]["content"]
    return {ANSWER_SYSTEM: "answer", INTEGRATE_SYSTEM: "integrate", PLAN_SYSTEM: "plan"}[system]


def scripted(integrate="{\"facts\": []}", plan="DONE", answer="Eleven"):
    """A ScriptedLLM that answers by role; each role's reply may be a string or a callable(messages)."""

    def respond(messages):
        reply = {"integrate": integrate, "plan": plan, "answer": answer}[role(messages)]
        return reply(messages) if callable(reply) else reply

    return ScriptedLLM(respond)


def calls_by_role(llm):
    return [role(m) for m in llm.calls]


def test_summary_policy_returns_ranked_units_and_costs(memory):
    q = "How many octopuses did Lena count on one dive?"
    llm = ScriptedLLM(["Answer: Eleven\nbecause the notes say so"])
    res = summary_policy(memory, q, llm, k=4)
    assert res.answer == "Eleven" and res.error is None
    assert res.retrieved == memory.search_summaries(q, 4)  # verbatim, rank order
    assert [r.score for r in res.retrieved] == sorted((r.score for r in res.retrieved), reverse=True)
    prompt = llm.calls[0][1]["content"]
    positions = [prompt.index(r.text) for r in res.retrieved]
    assert positions == sorted(positions) and q in prompt
    assert res.cost.llm_calls == 1 and res.cost.input_tokens == sum(len(m["content"].split()) for m in llm.calls[0])
    assert res.cost.output_tokens == 7 and res.cost.pages_read == 0 and res.cost.rounds == 0


def test_summary_policy_records_llm_error(memory):
    res = summary_policy(memory, "Where is Lena?", ScriptedLLM(lambda m: LLMError("endpoint down")))
    assert res.answer is None and "endpoint down" in res.error and len(res.retrieved) == 5


def test_research_is_bounded_to_three_rounds(memory):
    counter = iter(range(100))
    words = ["bookshelf oak", "paella grandmother", "octopuses dive", "rocking chair fair", "Lisbon flight"]
    plan = lambda m: json.dumps({"searches": [{"type": "keyword", "query": words[next(counter) % 5]}]})  # noqa: E731
    llm = scripted(plan=plan)
    res = research_policy(memory, "What did Marcus build?", llm, [], max_rounds=3, pages_per_round=1, keyword_k=2)
    assert res.rounds == 3 and res.stop_reason == "max_rounds"
    assert calls_by_role(llm) == ["integrate", "plan", "integrate", "plan", "integrate", "answer"]
    assert res.cost.pages_read == 3 == len(set(res.pages_read)) and res.cost.llm_calls == 6
    assert res.answer == "Eleven" and res.parse_failures == 0


def test_research_dedups_queries_and_pages(memory):
    plan = json.dumps({"searches": [{"type": "keyword", "query": "octopus dive"},
                                    {"type": "keyword", "query": "Octopus,  dive!"},
                                    {"type": "summary", "query": "octopus dive"}]})
    llm = scripted(plan=plan)
    res = research_policy(memory, "How many octopuses?", llm, memory.search_summaries("octopuses", 3),
                          pages_per_round=1)
    assert res.searches == [Search("keyword", "octopus dive"), Search("summary", "octopus dive")]
    assert len(res.pages_read) == len(set(res.pages_read)) == res.cost.pages_read
    # later plans repeat the same searches: nothing new is searched again
    assert sum(1 for m in llm.calls if role(m) == "plan") == res.rounds - (res.stop_reason == "max_rounds")


def test_research_stops_on_done(memory):
    llm = scripted(plan="DONE.")
    res = research_policy(memory, "Where is Lena studying?", llm, memory.search_summaries("Lena Lisbon", 2))
    assert res.rounds == 1 and res.stop_reason == "done" and calls_by_role(llm) == ["integrate", "plan", "answer"]


def test_research_stops_when_no_new_page(memory):
    q = "octopuses record dive"
    (only,) = memory.search_pages(q, 1)
    llm = scripted(plan=json.dumps({"searches": [{"type": "keyword", "query": "octopuses record"}]}))
    res = research_policy(memory, q, llm, [], keyword_k=1, pages_per_round=5, turn_k=0)
    assert memory.search_pages("octopuses record", 1) == [only]
    assert res.pages_read == [only] and res.rounds == 1 and res.stop_reason == "no_new_pages"


def test_unparseable_integrate_ends_loop_counted(memory):
    llm = scripted(integrate="Sure! Lena counted some octopuses.")
    res = research_policy(memory, "How many octopuses?", llm, memory.search_summaries("octopuses", 2))
    assert res.parse_failures == 1 and res.stop_reason == "integrate_unparseable" and res.rounds == 1
    assert calls_by_role(llm) == ["integrate", "answer"] and res.answer == "Eleven" and res.error is None


def test_unparseable_plan_ends_loop_counted(memory):
    llm = scripted(plan="Let me think about what to search next")
    res = research_policy(memory, "How many octopuses?", llm, memory.search_summaries("octopuses", 2))
    assert res.parse_failures == 1 and res.stop_reason == "plan_unparseable"
    assert calls_by_role(llm) == ["integrate", "plan", "answer"]


def test_llm_error_is_recorded_not_answered(memory):
    llm = scripted(plan=lambda m: LLMError("rate limited"))
    res = research_policy(memory, "How many octopuses?", llm, memory.search_summaries("octopuses", 2))
    assert res.answer is None and "rate limited" in res.error and res.stop_reason == "llm_error"
    assert res.rounds == 1 and res.cost.llm_calls == 1


def test_quotes_are_linked_deterministically_and_only_linked_facts_answer(memory):
    facts = {"facts": [
        {"fact": "Lena saw eleven octopuses on one dive.", "quote": "ELEVEN on one dive - a record for our team"},
        {"fact": "Lena went on her first research dive in October 2023.",
         "quote": "my first research dive, counting octopuses last week"},
        {"fact": "Lena owns a submarine.", "quote": "I bought a yellow submarine"},
    ]}
    # round 1 reads the octopus pages but not D3:3's; the planned search finds it and the fact links in round 2
    plan = json.dumps({"searches": [{"type": "keyword", "query": "record team"}]})
    llm = scripted(integrate=json.dumps(facts), plan=plan)
    retrieved = memory.search_summaries("eleven dive record team", 1)
    res = research_policy(memory, "How many octopuses did Lena count?", llm, retrieved, keyword_k=1, turn_k=0)
    assert res.rounds == 2 and res.stop_reason == "no_new_pages"
    by_fact = {q.fact: q for q in res.quotes}
    exact = by_fact["Lena saw eleven octopuses on one dive."]
    assert (exact.turn_id, exact.method, exact.round) == ("D3:3", "exact", 2)
    overlap = by_fact["Lena went on her first research dive in October 2023."]
    assert (overlap.turn_id, overlap.method) == ("D3:1", "overlap")
    assert by_fact["Lena owns a submarine."].page_id is None
    assert len(res.linked) == 2 and all(q.page_id in res.pages_read for q in res.linked)
    answer_prompt = llm.calls[-1][1]["content"]
    assert "eleven octopuses" in answer_prompt and "submarine" not in answer_prompt
    assert "Eleven on one dive, a record for our team." in answer_prompt  # the raw turn, as a snippet


def _page(*texts):
    turns = tuple(Turn(f"D1:{i}", "Ada", t, "1:00 pm on 1 May, 2023", "session_1") for i, t in enumerate(texts, 1))
    return Page("c:p0000", "c", 0, turns, 0)


def test_link_quote_rules():
    page = _page("I moved to Lisbon in August, it's lovely!", "The red kayak cost 300 dollars.")
    assert link_quote("it’s LOVELY", [page]).turn_id == "D1:1"
    assert link_quote("Ada: I moved to Lisbon", [page]).method == "exact"
    # overlap: 2 of 4 content words (red, kayak | yellow, canoe) is exactly half -> linked
    assert link_quote("red kayak yellow canoe", [page]) .turn_id == "D1:2"
    assert link_quote("red boat yellow canoe", [page]) is None  # 1 of 4
    assert link_quote("", [page], fact="The kayak cost 300 dollars").turn_id == "D1:2"
    assert link_quote("", [page], fact="") is None


def test_reply_parsers():
    assert parse_facts_reply('```json\n{"facts": [{"fact": "A", "quote": "b"}]}\n```')[0].quote == "b"
    assert [f.fact for f in parse_facts_reply('[{"fact": "A"}, "B", {"nofact": 1}]')] == ["A", "B"]
    assert parse_facts_reply('{"facts": []}') == [] and parse_facts_reply("None") == []
    assert parse_facts_reply("no json here") is None and parse_facts_reply('{"facts": "x"}') is None
    assert parse_plan_reply("DONE") == [] and parse_plan_reply('{"done": true}') == []
    assert parse_plan_reply('{"searches": []}') == []
    assert parse_plan_reply('Plan: {"searches": [{"type": "semantic", "query": "x"}, {"query": "y"}]}') == [
        Search("summary", "x"), Search("keyword", "y")]
    assert parse_plan_reply("search for the kayak") is None
