import dataclasses
import re

import pytest

from tiermem.data import load_conversations
from tiermem.memory import MemoryConfig
from tiermem.settings.config import ConfigError, parse_config
from tiermem_cli.ingest import DEFAULT_CONFIG, IngestConfig, main, pick


def test_configs_validate():
    cfg = parse_config(IngestConfig, DEFAULT_CONFIG)
    assert cfg.memory.summarizer == "extractive" and cfg.llm.backend == "local"
    for path in sorted((DEFAULT_CONFIG.parents[1] / "memory").glob("*.yaml")):
        parse_config(MemoryConfig, path)
    with pytest.raises(ConfigError, match="unknown key"):
        parse_config(IngestConfig, DEFAULT_CONFIG, ["memory.pagesize=3"])
    with pytest.raises(ConfigError, match="max_rounds"):
        parse_config(IngestConfig, DEFAULT_CONFIG, ["memory.max_rounds=7"])


def test_pick_question():
    convs = load_conversations(None)
    conv, q = pick(convs, "", "")
    assert (conv.conv_id, q.qid) == ("sample-1", "sample-1:q000")
    assert pick(convs, "sample-2", 3)[1].qid == "sample-2:q003"
    assert pick(convs, "sample-2", "sample-2:q001")[1].question.startswith("When did Marcus")
    bad = [(("nope", ""), "not found"), (("sample-1", 99), "out of range"), (("sample-1", "x"), "not found")]
    for args, msg in bad:
        with pytest.raises(ValueError, match=msg):
            pick(convs, *args)


def test_missing_data_file_is_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.json"):
        main([f"data={tmp_path / 'missing.json'}", f"workdir={tmp_path / 'mem'}"])


@pytest.mark.slow
def test_ingest_cli_end_to_end(tmp_path, capsys):
    rc = main([f"workdir={tmp_path / 'mem'}", f"llm.cache_path={tmp_path / 'cache.sqlite'}", "question=3",
               "memory.fixed_policy=research", "memory.answerer=llm"])  # the LM path (the reader's: test_extractive)
    out = capsys.readouterr().out
    assert rc == 0 and "raw pages" in out and "summary units" in out and "route: ESCALATE by fixed:research" in out


def test_pick_takes_free_questions():
    convs = load_conversations(None)
    assert pick(convs, "sample-1", "What did Tomas adopt?") == (convs[0], "What did Tomas adopt?")
    assert pick(convs, "", "  where does he volunteer ") == (convs[0], "where does he volunteer")
    assert pick(convs, "", "why?")[1] == "why?"
    bare = [dataclasses.replace(convs[0], questions=[])]
    assert pick(bare, "", "Who is Pepper?")[1] == "Who is Pepper?"  # no questions in the file: still askable
    with pytest.raises(ValueError, match="no questions in the file; ask one in words"):
        pick(bare, "", "")


def _ask(tmp_path, question, *extra, base_url=None):
    """`ask` against a fake endpoint (its own, or `base_url`: the cache key includes the endpoint)."""
    from tests.helpers.fake_openai import fake_openai
    from tiermem.data.tiermem_format import EXAMPLE_PATH

    if base_url is None:
        with fake_openai() as url:
            return _ask(tmp_path, question, *extra, base_url=url)
    return main([f"data={EXAMPLE_PATH}", f"question={question}", f"workdir={tmp_path / 'mem'}",
                 "llm.backend=openai", "llm.model=fake", f"llm.base_url={base_url}", "memory.embedder=hashing",
                 "memory.tokenizer=whitespace", "memory.page_tokens=120",
                 f"llm.cache_path={tmp_path / 'cache.sqlite'}", *extra])


def test_free_question_is_routed_answered_and_says_it_has_no_gold(tmp_path, capsys):
    rc = _ask(tmp_path, "What did Tomas adopt?", "memory.fixed_policy=research")
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "question (free text): What did Tomas adopt?" in out
    assert "gold answer: none: a question of your own has no gold answer or evidence" in out
    assert "route: ESCALATE by fixed:research" in out
    pages = next(line for line in out.splitlines() if line.startswith("pages read: "))
    assert "tomas-assistant" in pages  # raw page ids of the conversation it researched
    assert re.search(r"cost: \d+ in / \d+ out tokens, [1-9]\d* LLM call\(s\)", out)

    rc = _ask(tmp_path, "Where does Tomas volunteer?", "memory.fixed_policy=summary")
    out = capsys.readouterr().out
    assert rc == 0 and "route: ANSWER by fixed:summary" in out and "pages read: none (answered from the 5" in out


def test_free_question_with_a_trained_router(tmp_path, capsys):
    from tests.helpers.router_fixtures import make_router_run

    rc = _ask(tmp_path, "When did Tomas adopt Pepper?", f"router={make_router_run()}")
    out = capsys.readouterr().out
    assert rc == 0, out
    assert re.search(r"route: (ANSWER|ESCALATE) by router \(router \d+ ms, parsed_ok=True\)", out)
    assert "gold answer: none" in out and "+ router" in out


def test_known_question_shows_its_gold(tmp_path, capsys):
    assert _ask(tmp_path, "q2", "memory.fixed_policy=summary") == 0
    out = capsys.readouterr().out
    assert "question q2 [category temporal]: When did Tomas adopt Pepper?" in out
    assert "gold answer: 16 March 2024   (evidence s2-1)" in out


def test_ask_shows_the_quote_and_says_when_the_cost_is_cached(tmp_path, capsys):
    from tests.helpers.fake_openai import fake_openai

    with fake_openai() as url:  # one endpoint for both runs: another one would not answer from this one's cache
        _ask_cached(tmp_path, capsys, url)


def _ask_cached(tmp_path, capsys, url):
    assert _ask(tmp_path, "q1", "memory.fixed_policy=research", base_url=url) == 0  # Where does Tomas volunteer?
    first = capsys.readouterr().out
    assert re.search(r"^quote: \".+\" \((Tomas|assistant), \d+ \w+ 2024; turn s\d-\d\)$", first, re.MULTILINE)
    fresh = next(line for line in first.splitlines() if line.startswith("cost: "))
    assert "cached" not in fresh and re.match(r"cost: \d+ in / \d+ out tokens, [1-9] LLM call\(s\), [\d.]+ s$", fresh)
    assert _ask(tmp_path, "q1", "memory.fixed_policy=research", base_url=url) == 0  # the same calls: from the cache
    again = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("cost: "))
    tokens_calls = fresh.removeprefix("cost: ").split(", ")[:2]  # "<in> in / <out> out tokens", "<n> LLM call(s)"
    assert again.startswith("cost: cached: answered from the response cache in ")
    assert f"the original calls cost {', '.join(tokens_calls)}" in again


def test_cost_line_for_a_partly_cached_and_a_fresh_answer():
    from tiermem.memory.policies import PathCost
    from tiermem.memory.runtime import RuntimeAnswer
    from tiermem_cli.ingest import cost_line

    out = RuntimeAnswer("q", "a", "ESCALATE", "router", [], PathCost(100, 20, 3, 12.5, cached_calls=2), 0.1,
                        router_s=0.25, elapsed_s=4.0)
    assert cost_line(out, True) == ("cost: 100 in / 20 out tokens, 3 LLM call(s), 12.50 s (2 of the 3 calls from the "
                                    "response cache, priced at their original cost; this run took 4.00 s) + router "
                                    "0.25 s")
    out.cost.cached_calls = 0
    assert cost_line(out, False) == "cost: 100 in / 20 out tokens, 3 LLM call(s), 12.50 s"


def test_an_unusable_reply_is_replaced_by_the_quote(tmp_path, capsys):
    from tests.helpers.fake_openai import fake_openai
    from tiermem.data.tiermem_format import EXAMPLE_PATH

    def fragment(messages):  # the packaged model's reply in issue 27, to every call
        return "(17 March 2024) Tomas:"

    with fake_openai(fragment) as base_url:
        rc = main([f"data={EXAMPLE_PATH}", "question=q1", f"workdir={tmp_path / 'mem'}", "llm.backend=openai",
                   "llm.model=fake", f"llm.base_url={base_url}", "memory.embedder=hashing",
                   "memory.tokenizer=whitespace", "memory.page_tokens=120", "memory.fixed_policy=research",
                   f"llm.cache_path={tmp_path / 'cache.sqlite'}"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "answer: Tomas (2 March 2024): \"I start volunteering at the Riverside animal shelter" in out
    assert "extractive: the model's reply '(17 March 2024) Tomas:' was unusable (fragment)" in out
    assert "1 parse failure(s)" in out  # the fake server ignores the schema: the failure is still counted


def _extractive_args(tmp_path, reader):
    from tiermem.data.tiermem_format import EXAMPLE_PATH

    return [f"data={EXAMPLE_PATH}", f"workdir={tmp_path / 'mem'}", "memory.embedder=hashing",
            "memory.tokenizer=whitespace", "memory.page_tokens=120", f"memory.reader={reader}",
            "memory.answerer=extractive", "memory.fixed_policy=research"]


def test_several_questions_in_one_ask(tmp_path, capsys):
    from tests.helpers.tiny_bert import tiny_reader

    reader = tiny_reader(tmp_path / "reader")
    listed = tmp_path / "questions.txt"
    listed.write_text("# asked together\nq1\n\nWhere does Tomas volunteer?\n")
    rc = main([*_extractive_args(tmp_path, reader), f"questions={listed}"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "--- question 1 of 2 ---" in out and "--- question 2 of 2 ---" in out
    assert "question q1 [category" in out and "question (free text): Where does Tomas volunteer?" in out
    assert out.count("tiers: ") == 1 and out.count("cost: ") == 2  # tiers opened once, two answers
    with pytest.raises(ValueError, match="no such file"):
        main([*_extractive_args(tmp_path, reader), f"questions={tmp_path / 'absent.txt'}"])


def test_a_cold_extractive_ask_loads_no_language_model(tmp_path):
    import json
    import subprocess
    import sys

    from tests.helpers.tiny_bert import tiny_reader

    reader = tiny_reader(tmp_path / "reader")
    script = ("import json, sys; from tiermem_cli.ingest import main; rc = main(json.loads(sys.argv[1])); "
              "lm = [m for m in sys.modules if m in ('tiermem.llm.local', 'tiermem.llm.constrained') "
              "or m.startswith('transformers.models.llama')]; print('LM-MODULES', lm); sys.exit(rc)")
    args = [*_extractive_args(tmp_path, reader), "question=q1"]
    done = subprocess.run([sys.executable, "-c", script, json.dumps(args)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "LM-MODULES []" in done.stdout
