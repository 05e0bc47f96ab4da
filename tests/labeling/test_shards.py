"""Sharded labeling (issue 21, item 1): `label shard=i/n` labels the conversations that hash to shard i,
`label-merge` checks the shards and writes the one dataset. The merged outputs equal a one-process run's, record for
record, for 1, 2, 3 and 8 shards (8: some shards hold no conversation), also after a shard was killed mid-run and
rerun; merge refuses an incomplete, inconsistent or differently configured shard set with a named error.

Fixture: the shipped two-conversation sample, copied to six conversations (conv-0 .. conv-5), so every split and
every shard of 2 and 3 holds conversations."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from labeling.config import LabelConfig
from labeling.merge import merge
from labeling.roles import Roles
from labeling.run import run
from labeling.shards import shard_dir, shard_of
from tests.helpers.label_helpers import SMALL_MEMORY, HashEmbedder, answer_from_prompt
from tests.helpers.label_outputs import lines as _lines
from tests.helpers.label_outputs import outputs as _outputs
from tiermem.data.conversations import SAMPLE_PATH
from tiermem.llm import ScriptedLLM
from tiermem.settings.config import from_dict
from tiermem.settings.errors import EXIT_FAILED, EXIT_RUN_DIR, ConfigError, DataError, RunDirError, RunError, UsageError
from tiermem_cli import cli

GENERATED = {"memory": SMALL_MEMORY, "label_rule": "evidence"}
PAIRS = {"memory": {**SMALL_MEMORY, "max_rounds": 1, "top_k": 2}, "label_rule": "evidence",
         "generate_answers": False, "minimal_pairs": {"enabled": True}, "max_questions_per_conversation": 4}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    sample = json.loads(Path(SAMPLE_PATH).read_text())
    convs = []
    for i in range(6):
        conv = copy.deepcopy(sample[i % 2])
        conv["sample_id"] = f"conv-{i}"
        convs.append(conv)
    path = tmp_path_factory.mktemp("data") / "six.json"
    path.write_text(json.dumps(convs))
    return path


def _cfg(out: Path, data: Path, settings: dict, **extra) -> LabelConfig:
    return from_dict(LabelConfig, {"output_dir": str(out), "data_path": str(data), **settings, **extra})


def _roles(cfg: LabelConfig, responder=answer_from_prompt) -> Roles:
    return Roles({"answerer": ScriptedLLM(responder)}) if cfg.generate_answers else Roles({}, need_answerer=False)


def _label(cfg: LabelConfig, responder=answer_from_prompt) -> dict:
    return run(cfg, _roles(cfg, responder), embedder=HashEmbedder())


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, data) -> dict:
    """A one-process run per settings: the reference every merge must equal."""
    root = tmp_path_factory.mktemp("one")
    ref = {}
    for name, settings in (("generated", GENERATED), ("pairs", PAIRS)):
        stats = _label(_cfg(root / name, data, settings))
        ref[name] = {**_outputs(root / name), "llm": stats["llm"]}
    return ref


def _label_shards(out: Path, data: Path, settings: dict, count: int, **extra) -> None:
    for i in range(count):
        _label(_cfg(out, data, settings, shard=f"{i}/{count}", **extra))


@pytest.mark.parametrize(("settings", "count"), [("generated", 1), ("generated", 2), ("generated", 3),
                                                 ("generated", 8), ("pairs", 3)])
def test_merged_shards_equal_a_one_process_run(tmp_path, data, one_process, settings, count):
    chosen = GENERATED if settings == "generated" else PAIRS
    out = tmp_path / "sharded"
    _label_shards(out, data, chosen, count)
    assert not (out / "dataset").exists()  # a shard writes no dataset
    for i in range(count):
        state = json.loads((shard_dir(out, i, count) / "shard.json").read_text())
        assert state["finished"] and state["conversations"] == [
            f"conv-{j}" for j in range(6) if shard_of(f"conv-{j}", count) == i]
    stats = merge(_cfg(out, data, chosen))
    ref = one_process[settings]
    merged = _outputs(out)
    assert merged["records"] == ref["records"]  # record for record, in the one-process order
    assert merged["rows"] == ref["rows"]  # the DatasetDict, split for split
    assert merged["stats"] == ref["stats"]
    assert stats["llm"] == ref["llm"]  # the shards made exactly the calls one process makes
    assert stats["shards"]["count"] == count and stats["resumed_records"] == 0
    report = (out / "report.md").read_text()
    assert report.startswith("# Labeling report") and f"{stats['records']} questions" in report


def test_a_killed_shard_resumes_and_the_merge_still_equals_one_process(tmp_path, data, one_process):
    out = tmp_path / "sharded"
    cfg = _cfg(out, data, GENERATED)
    calls = 0

    def dies(messages):
        nonlocal calls
        calls += 1
        if calls > 8:
            raise KeyboardInterrupt  # Ctrl-C / a scheduler's SIGINT in the middle of a question
        return answer_from_prompt(messages)

    _label(_cfg(out, data, GENERATED, shard="0/2"))
    with pytest.raises(KeyboardInterrupt):
        _label(_cfg(out, data, GENERATED, shard="1/2"), dies)
    killed = shard_dir(out, 1, 2)
    committed = len(_lines(killed / "records.jsonl"))
    assert 0 < committed < 16 and not json.loads((killed / "shard.json").read_text())["finished"]
    with pytest.raises(RunError, match=r"shard 1/2 .*not finished .*shard=1/2"):
        merge(cfg)
    assert not (out / "dataset").exists()
    state = _label(_cfg(out, data, GENERATED, shard="1/2"))  # the rerun resumes
    assert state["finished"] and state["resumed_records"] == committed
    merge(cfg)
    merged = _outputs(out)
    assert merged["records"] == one_process["generated"]["records"]
    assert merged["rows"] == one_process["generated"]["rows"]
    assert merged["stats"] == one_process["generated"]["stats"]

    # killed between two writes: a records file cut to a prefix (the state still says finished) is caught by the
    # question count, and the rerun labels just the missing questions
    first = shard_dir(out, 0, 2) / "records.jsonl"
    lines = first.read_text().splitlines(keepends=True)
    first.write_text("".join(lines[:3]) + lines[3][:20])  # three whole records and a torn fourth
    with pytest.raises(RunError, match=r"shard 0/2: \d+ question\(s\) of conversation 'conv-\d' have no record"):
        merge(cfg)
    state = _label(_cfg(out, data, GENERATED, shard="0/2"))
    assert state["resumed_records"] == 3
    merge(cfg)
    assert _outputs(out)["records"] == one_process["generated"]["records"]


def test_merge_refuses_a_bad_shard_set_with_a_named_error(tmp_path, data, capsys):
    out = tmp_path / "sharded"
    cfg = _cfg(out, data, GENERATED)
    with pytest.raises(UsageError, match="no shards under"):
        merge(cfg)

    _label(_cfg(out, data, GENERATED, shard="0/2"))  # shard 1 of 2 never ran
    with pytest.raises(RunError, match=r"shard\(s\) 1/2 missing"):
        merge(cfg)
    # through the CLI: one line naming the error, exit code 6 (the config the shard wrote, shard= and all)
    shard_config = shard_dir(out, 0, 2) / "config.yaml"
    assert cli.main(["label-merge", "--config", str(shard_config)]) == EXIT_FAILED
    assert "tiermem-router label-merge: error: RunError: " in capsys.readouterr().err

    _label(_cfg(out, data, GENERATED, shard="1/2", judge_threshold=0.5))  # another fingerprint
    with pytest.raises(UsageError, match=r"shard 1/2 .*other settings .*judge_threshold"):
        merge(cfg)
    shutil.rmtree(shard_dir(out, 1, 2))
    _label(_cfg(out, data, GENERATED, shard="1/2"))
    assert merge(cfg)["records"] == 33  # the set is whole now

    # one conversation in two shards: a record of conv-1 (shard 1) copied into shard 0
    zero, one = shard_dir(out, 0, 2) / "records.jsonl", shard_dir(out, 1, 2) / "records.jsonl"
    saved = zero.read_text()
    stray = next(line for line in one.read_text().splitlines() if json.loads(line)["conv_id"] == "conv-1")
    zero.write_text(saved + stray + "\n")
    with pytest.raises(DataError, match=r"conversation 'conv-1' is in shards 0/2, 1/2"):
        merge(cfg)
    # a conversation in the one shard it does not hash to
    shutil.move(one, one.with_suffix(".bak"))
    one.write_text("".join(line + "\n" for line in one.with_suffix(".bak").read_text().splitlines()
                           if json.loads(line)["conv_id"] != "conv-1"))
    with pytest.raises(DataError, match=r"shard 0/2 holds conversation 'conv-1', which belongs to shard 1/2"):
        merge(cfg)
    shutil.move(one.with_suffix(".bak"), one)
    # a split leak: one conversation's records in two splits
    recs = [json.loads(line) for line in saved.splitlines()]
    recs[0]["split"] = "test" if recs[0]["split"] != "test" else "train"
    zero.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(DataError, match=rf"shard 0/2: conversation '{recs[0]['conv_id']}' has records in splits"):
        merge(cfg)
    zero.write_text(saved)
    # shards of another count next to these
    _label(_cfg(out, data, GENERATED, shard="0/3"))
    with pytest.raises(DataError, match="shards of 2 different counts"):
        merge(cfg)
    shutil.rmtree(shard_dir(out, 0, 3))
    with pytest.raises(UsageError, match="shard=0/3: the shards .* were run with n=2"):
        merge(_cfg(out, data, GENERATED, shard="0/3"))
    assert merge(cfg)["records"] == 33


@pytest.mark.parametrize("spec", ["3", "8/8", "-1/8", "1/0", "a/b", "", "1/2/3"])
def test_shard_is_validated_naming_the_field(tmp_path, spec):
    with pytest.raises(ConfigError, match="shard"):
        from_dict(LabelConfig, {"output_dir": str(tmp_path), "shard": spec})


def test_a_sampling_local_model_is_refused_for_a_sharded_run(tmp_path):
    with pytest.raises(ConfigError, match=r"shard: llm.answerer.temperature=0.7"):
        from_dict(LabelConfig, {"output_dir": str(tmp_path), "shard": "0/2",
                                "llm": {"answerer": {"backend": "local", "temperature": 0.7}}})
    from_dict(LabelConfig, {"output_dir": str(tmp_path), "llm": {"answerer": {"temperature": 0.7}}})  # one process


def test_the_shard_hash_is_stable():
    # sha256 of the id, mod n: the same in every process and on every machine (never Python's salted hash())
    assert [shard_of(f"conv-{i}", 3) for i in range(6)] == [1, 0, 2, 1, 0, 2]
    assert [shard_of(f"conv-{i}", 2) for i in range(6)] == [0, 1, 0, 1, 0, 1]


def test_shard_and_merge_refuse_a_foreign_output_dir(tmp_path, data, capsys):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError, match="not made by tiermem-router label"):
        _label(_cfg(foreign, data, GENERATED, shard="0/2"))
    assert cli.main(["label-merge", f"output_dir={foreign}", f"data_path={data}"]) == EXIT_RUN_DIR
    assert f"RunDirError: {foreign}" in capsys.readouterr().err
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
