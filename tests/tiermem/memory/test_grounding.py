import json

import pytest

from tests.helpers.memory_runtime import CFG, answer_llm, build
from tiermem.data import load_conversations
from tiermem.data.tiermem_format import EXAMPLE_PATH
from tiermem.llm import ScriptedLLM
from tiermem.memory.grounding import best_sentence, ground, page_candidates, summary_candidates, unusable_reason
from tiermem.memory.policies import INTEGRATE_SCHEMA, PLAN_SCHEMA, parse_facts_reply, research_policy
from tiermem.memory.runtime import MemoryConfig

READ = "I start volunteering at the Riverside animal shelter on Saturday mornings. 2 March 2024"
Q = "Where does Tomas volunteer?"


@pytest.mark.parametrize(("reply", "reason"), [
    ("", "empty"),
    ("  ...  ", "empty"),
    ("(17 March 2024) Tomas:", "fragment"),  # the excerpt format copied, nothing after it (issue 27)
    ("[s1-1] (2024-03-02T18:40:00Z) Tomas:", "fragment"),
    ("[1] [2] [3] [4] [5]", "fragment"),  # the notes' markers
    ("D19:3", "fragment"),  # a turn id
    ("(25 February 2022) Tomas: Hey! Long time no see!", "copied excerpt"),  # a line of the notes, not an answer
    ("[1] Tomas: I start volunteering at the Riverside animal shelter", "copied excerpt"),
    ("assistant: Done: a reminder every Friday", "copied excerpt"),
    ("Tomas volunteers", "echo"),  # only the question's own words
    ("At the zoo in Madrid", "not in what was read"),
    ("not mentioned", "not in what was read"),
    ("the Riverside animal shelter", None),
    ("The answer is: the Riverside shelter", None),  # a preamble and a list marker are only stripped
    ("1. the Riverside shelter", None),
    ("Riverside: the animal shelter", None),  # not a speaker's name: an answer that happens to hold a colon
    ("Yes", None),
    ("No, it's not likely.", None),  # a yes/no answer, although "likely" is the question's word
])
def test_unusable_reason(reply, reason):
    q = Q if "likely" not in reply else "Is it likely that Tomas volunteers?"
    assert unusable_reason(reply, q, READ, ["Tomas", "Priya"]) == reason


@pytest.fixture
def example():
    return load_conversations(str(EXAMPLE_PATH))[0]  # tomas-assistant


def _research_cfg(**kw):
    return MemoryConfig(**{**CFG.__dict__, "fixed_policy": "research", "page_tokens": 400, **kw})


def test_a_fragment_falls_back_to_the_quote_with_date_and_speaker(tmp_path, example):
    rt = build(tmp_path, example, _research_cfg())
    rt.llm = answer_llm(answer="(17 March 2024) Tomas:")  # what the packaged 135M model replied (issue 27)
    out = rt.answer(example.questions[0])  # Where does Tomas volunteer? gold: Riverside animal shelter
    assert out.error is None and out.action == "ESCALATE"
    assert (out.answer_source, out.fallback_reason, out.lm_answer) == ("extractive", "fragment",
                                                                       "(17 March 2024) Tomas:")
    assert out.answer == 'Tomas (2 March 2024): "I start volunteering at the Riverside animal shelter on Saturday ' \
                         'mornings."'
    ev = out.evidence
    assert (ev.speaker, ev.date, ev.turn_id, ev.source) == ("Tomas", "2 March 2024", "s1-1", "page")
    assert ev.page_id in out.research.pages_read and ev.quote in " ".join(t.text for t in example.turns)
    assert out.extractive_answer == out.answer


def test_a_usable_answer_is_kept_with_the_quote_it_rests_on(tmp_path, example):
    rt = build(tmp_path, example, _research_cfg())
    rt.llm = answer_llm(answer="a grain-free diet")
    out = rt.answer(example.questions[3])  # What diet does the vet recommend for Pepper?
    assert (out.answer, out.answer_source, out.fallback_reason) == ("a grain-free diet", "lm", None)
    assert "grain-free diet" in out.evidence.quote and out.evidence.turn_id == "s3-1"
    assert "grain-free diet" in out.extractive_answer  # computed too (the live eval judges it on its own)


def test_relative_dates_in_the_extractive_answer_are_resolved(tmp_path, example):
    rt = build(tmp_path, example, _research_cfg())
    rt.llm = answer_llm(answer="")
    out = rt.answer(example.questions[1])  # When did Tomas adopt Pepper? gold: 16 March 2024
    assert out.answer_source == "extractive" and out.fallback_reason == "empty"
    assert "yesterday (16 March 2024) I adopted a dog" in out.answer
    assert "yesterday I adopted" in out.evidence.quote  # the quote itself stays verbatim


def test_fallback_none_keeps_the_reply_but_still_shows_the_quote(tmp_path, example):
    rt = build(tmp_path, example, _research_cfg(answer_fallback="none"))
    rt.llm = answer_llm(answer="Tomas:")
    out = rt.answer(example.questions[0])
    assert (out.answer, out.answer_source, out.fallback_reason) == ("Tomas:", "lm", "fragment")
    assert out.evidence.turn_id == "s1-1"


def test_the_summary_path_quotes_a_summary_unit_with_its_speaker(tmp_path, example):
    rt = build(tmp_path, example, MemoryConfig(**{**CFG.__dict__, "page_tokens": 400}))
    rt.llm = answer_llm(answer="not mentioned")
    out = rt.answer(example.questions[0])
    assert out.action == "ANSWER" and out.answer_source == "extractive"
    ev = out.evidence
    assert ev.source == "summary" and ev.speaker == "Tomas" and ev.unit_id in {u.unit_id for u in out.retrieved}
    assert not ev.quote.startswith("Tomas: ") and "volunteering" in ev.quote


def test_best_sentence_prefers_the_answers_words_and_none_without_overlap(example):
    from tiermem.memory.raw_store import paginate, whitespace_tokens

    cands = page_candidates(paginate(example.conv_id, example.turns, whitespace_tokens, 400))
    assert best_sentence("What is the capital of Peru?", cands) is None
    plain = best_sentence("What does Pepper do?", cands)
    with_answer = best_sentence("What does Pepper do?", cands, "gets anxious in cars")
    assert "anxious" in with_answer.evidence.quote and plain is not None
    g = ground("What is the capital of Peru?", "", cands)
    assert (g.answer, g.source, g.reason, g.evidence) == ("", "lm", "empty", None)  # nothing to quote: flagged


def test_similarity_breaks_the_ties_shared_words_leave(example):
    from tiermem.memory.grounding import MIN_SIMILARITY, with_similarity
    from tiermem.memory.raw_store import paginate, whitespace_tokens

    cands = page_candidates(paginate(example.conv_id, example.turns, whitespace_tokens, 400))
    q = "What breed is Pepper?"  # shares only "Pepper" with every sentence about the dog
    assert "border collie" not in best_sentence(q, cands).evidence.quote  # lexical alone: the shortest one
    sims = [0.7 if "border collie" in c.evidence.quote else 0.2 for c in cands]
    assert "border collie" in best_sentence(q, with_similarity(cands, sims)).evidence.quote
    # a paraphrase sharing no word counts only when similar enough
    sims = [MIN_SIMILARITY if "Sintra" in c.evidence.quote else 0.0 for c in cands]
    assert "Sintra" in best_sentence("Which mountains?", with_similarity(cands, sims)).evidence.quote
    assert best_sentence("Which mountains?", with_similarity(cands, [x * 0.9 for x in sims])) is None


def test_summary_candidates_without_speakers_keep_the_text():
    from tiermem.memory.summaries import RetrievedUnit

    unit = RetrievedUnit("u1", "Lena: I dive.", 1.0, ["p1"], ["t1"], "1 May 2023")
    assert summary_candidates([unit])[0].evidence.quote == "Lena: I dive."
    assert summary_candidates([unit], {"t1": "Lena"})[0].evidence.quote == "I dive."


# ---------------------------------------------------------------------------------------------- structured steps


class _RecordingLLM(ScriptedLLM):
    def __init__(self, responder):
        super().__init__(responder)
        self.schemas = []

    def _complete_many(self, batch, params):
        self.schemas += [params.json_schema] * len(batch)
        return super()._complete_many(batch, params)


def _responder(messages):
    system = messages[0]["content"]
    if system.startswith("You collect"):
        return json.dumps({"facts": [{"fact": "Tomas volunteers at the Riverside animal shelter.",
                                      "quote": "I start volunteering at the Riverside animal shelter"}]})
    if system.startswith("You plan"):
        return '{"searches": []}'
    return "the Riverside animal shelter"


def test_research_steps_send_their_schemas(tmp_path, example):
    rt = build(tmp_path, example, _research_cfg())
    llm = _RecordingLLM(_responder)
    q = example.questions[0]
    r = research_policy(rt.memory, q, llm, rt.memory_for(q).search_summaries(q.question, rt.cfg.top_k), 3)
    assert (r.stop_reason, r.parse_failures, len(r.linked)) == ("done", 0, 1)
    assert llm.schemas == [INTEGRATE_SCHEMA, PLAN_SCHEMA, None]  # the answer itself is free text
    rt.llm = _RecordingLLM(_responder)
    rt.answer(example.questions[0])  # the runtime's research path sends them too
    assert rt.llm.schemas == [INTEGRATE_SCHEMA, PLAN_SCHEMA, None]


def test_a_reply_cut_off_by_max_tokens_keeps_its_whole_facts():
    whole = '{"fact": "Pepper is a border collie", "quote": "a border collie called Pepper"}'
    assert [f.fact for f in parse_facts_reply('{"facts": [' + whole + ', {"fact": "Pep')] == [
        "Pepper is a border collie"]
    assert parse_facts_reply('{"facts": [{"fact": "Pep') is None  # no whole fact: still a failure
    assert parse_facts_reply("[s1-1] (2024-03-02) Tomas: Hi!") is None


def test_an_answer_must_rest_on_the_sentences_matching_the_question(example):
    from tiermem.memory.raw_store import paginate, whitespace_tokens

    cands = page_candidates(paginate(example.conv_id, example.turns, whitespace_tokens, 400))
    diet = "What diet does the vet recommend for Pepper?"
    g = ground(diet, "Piper is a three-year-old border collie", cands)  # true of Pepper, not of the diet
    assert (g.source, g.reason) == ("extractive", "unsupported") and "grain-free diet" in g.answer
    assert ground(diet, "a grain-free diet", cands).source == "lm"
    when = "When did Tomas adopt Pepper?"
    g = ground(when, "a three-year-old border collie named Pepper", cands)
    assert (g.source, g.reason) == ("extractive", "no time") and "yesterday (16 March 2024)" in g.answer
    assert ground(when, "16 March 2024", cands).source == "lm"  # the resolved "yesterday" supports it
    assert ground("Where does Tomas volunteer?", "16 March 2024", cands).reason == "unsupported"


def test_a_speakers_name_alone_does_not_make_a_greeting_the_quote():
    from tiermem.data.records import Turn
    from tiermem.memory.raw_store import paginate, whitespace_tokens

    turns = [Turn("t1", "John", "Hey James!", "2022-07-22T10:00:00Z", "s1"),
             Turn("t2", "James", "Doctors say John has health problems: obesity runs in his family.",
                  "2022-07-22T10:00:00Z", "s1")]
    cands = page_candidates(paginate("c", turns, whitespace_tokens, 400))
    assert best_sentence("What are James's worries?", cands) is None  # only the name is shared
    assert "obesity" in best_sentence("What are John's health problems?", cands).evidence.quote
