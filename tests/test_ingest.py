import pytest

from tiermem.config import ConfigError, parse_config
from tiermem.data import load_conversations
from tiermem.ingest import DEFAULT_CONFIG, IngestConfig, main, pick
from tiermem.memory import MemoryConfig


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
        main([f"data={tmp_path / 'missing.json'}"])


@pytest.mark.slow
def test_ingest_cli_end_to_end(tmp_path, capsys):
    rc = main([f"workdir={tmp_path / 'mem'}", f"llm.cache_path={tmp_path / 'cache.sqlite'}", "question=3",
               "memory.fixed_policy=research"])
    out = capsys.readouterr().out
    assert rc == 0 and "raw pages" in out and "summary units" in out and "route: ESCALATE by fixed:research" in out
