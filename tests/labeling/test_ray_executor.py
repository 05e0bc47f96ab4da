"""`tiermem-router label executor=ray shards=N` (issue 36): one Ray task per shard running the stage's own shard code,
then the merge. The slow tests run a local Ray cluster (2 CPUs, 127.0.0.1) over the sample shipped in the package:
the dataset equals a one-process run's record for record, also when a worker is SIGKILLed mid-shard (Ray reruns the
task, which resumes from the shard's committed records), and a shard that fails for good leaves the other's outputs
and a merge refusal naming it. The default suite (no Ray) checks the config and the error naming the extra."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
from pathlib import Path

import pytest
import yaml

from labeling.config import LabelConfig
from labeling.shards import shard_dir, shard_of
from tests.helpers.label_outputs import lines, outputs
from tiermem.data.conversations import load_conversations
from tiermem.runs.rundir import LOCK
from tiermem.settings.config import from_dict
from tiermem.settings.errors import ConfigError, RunError
from tiermem_cli import cli

# model-free: whitespace pages, hashed embeddings, no answers (the evidence rule); minimal pairs on
GENERATOR_FREE = {"label_rule": "evidence", "generate_answers": False, "llm": {"answerer": None},
                  "memory": {"tokenizer": "whitespace", "page_tokens": 120, "max_rounds": 1, "embedder": "hashing"},
                  "minimal_pairs": {"enabled": True}, "split": {"ratios": [0.5, 0.5, 0.0]}}


def _answering(base_url: str) -> dict:
    """Answers from an OpenAI-compatible endpoint (the labeling tests' scripted answerer behind fake_openai)."""
    return {"label_rule": "evidence", "split": {"ratios": [0.5, 0.5, 0.0]},
            "memory": {"tokenizer": "whitespace", "page_tokens": 120, "max_rounds": 2, "embedder": "hashing"},
            "llm": {"answerer": {"backend": "openai", "model": "fake", "base_url": base_url,
                                 "api_key_env": "FAKE_KEY", "structured": "none"}}}


def _config(tmp_path: Path, settings: dict) -> Path:
    path = tmp_path / "label.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


def _label(config: Path, out: Path, *extra: str) -> int:
    return cli.main(["label", "--config", str(config), f"output_dir={out}", *extra])


# ---- default suite: no Ray needed ------------------------------------------------------------------------------


def test_executor_ray_without_ray_is_a_named_error_naming_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, installed or not
    out = tmp_path / "out"
    rc = _label(_config(tmp_path, GENERATOR_FREE), out, "executor=ray", "shards=2")
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "error: MissingExtraError: executor=ray needs Ray, the optional extra [ray]" in err
    assert "pip install -e '.[ray]'" in err
    assert not out.exists()  # refused before anything was written


@pytest.mark.parametrize(("overrides", "message"), [
    ({"executor": "dask"}, "executor must be one of process|ray"),
    ({"shards": 2}, "shards=2 runs every shard as a Ray task: it needs executor=ray"),
    ({"executor": "ray"}, "executor=ray needs shards=N"),
    ({"executor": "ray", "shards": 0}, "shards must be >= 1"),
    ({"executor": "ray", "shards": 2, "shard": "0/2"}, "leave shard= out"),
    ({"executor": "ray", "shards": 2, "ray_cpus_per_task": 0}, "ray_cpus_per_task must be > 0"),
    ({"executor": "ray", "shards": 2, "ray_max_retries": -1}, "ray_max_retries must be >= 0"),
    ({"executor": "ray", "shards": 2, "llm": {"answerer": {"temperature": 0.7}}},
     "shards: llm.answerer.temperature=0.7 samples a local model"),
])
def test_executor_settings_are_checked(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        from_dict(LabelConfig, {"output_dir": "unused", **overrides})


def test_executor_keys_are_not_part_of_the_resume_fingerprint():
    from labeling.resume import resume_fingerprint

    plain = from_dict(LabelConfig, {"output_dir": "a"})
    on_ray = from_dict(LabelConfig, {"output_dir": "a", "executor": "ray", "shards": 4, "ray_address": "auto",
                                     "ray_cpus_per_task": 2, "ray_max_retries": 0})
    assert resume_fingerprint(plain) == resume_fingerprint(on_ray)


def test_the_merge_names_every_incomplete_shard_at_once(tmp_path):
    """What a Ray run leaves when shards fail for good: one refusal lists them all, before anything is written."""
    from labeling.merge import merge
    from labeling.run import run
    from labeling.shards import write_state

    out = tmp_path / "out"
    for index in (0, 1):
        run(from_dict(LabelConfig, {**GENERATOR_FREE, "output_dir": str(out), "shard": f"{index}/3"}))
    killed = shard_dir(out, 1, 3) / "shard.json"
    write_state(killed, {**json.loads(killed.read_text()), "finished": False})  # as a kill mid-shard leaves it
    with pytest.raises(RunError) as refused:
        merge(from_dict(LabelConfig, {**GENERATOR_FREE, "output_dir": str(out), "executor": "ray", "shards": 3}))
    message = str(refused.value)
    assert "shard(s) 2/3 missing (of 3)" in message
    assert f"shard 1/3 ({shard_dir(out, 1, 3)}): not finished" in message and "shard 0/3" not in message
    assert not (out / "dataset").exists()


# ---- slow: a local Ray cluster ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="the [ray] extra is not installed (make test-all installs it)")
    # one node, this machine (Ray itself turns 127.0.0.1 into the host's own address: workers must reach it)
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        assert len(ray.nodes()) == 1
        yield ray
    finally:
        ray.shutdown()


def _one_process(tmp_path: Path, config: Path) -> dict:
    out = tmp_path / "one"
    assert _label(config, out) == 0
    return outputs(out)


@pytest.mark.slow
def test_ray_shards_equal_the_one_process_run(tmp_path, ray_cluster, capsys):
    config = _config(tmp_path, GENERATOR_FREE)
    reference = _one_process(tmp_path, config)
    capsys.readouterr()
    out = tmp_path / "ray"
    assert _label(config, out, "executor=ray", "shards=2") == 0
    printed = capsys.readouterr().out
    for i in range(2):
        assert f"shard {i}/2 done [" in printed
    assert f"merged 2 shards: {reference['stats']['records']} questions (0 errors); rule evidence:" in printed
    assert outputs(out) == reference  # records, dataset rows and stats, record for record
    states = [json.loads((shard_dir(out, i, 2) / "shard.json").read_text()) for i in range(2)]
    assert all(s["finished"] for s in states) and sorted(len(s["conversations"]) for s in states) == [1, 1]


@pytest.mark.slow
def test_ray_address_joins_a_running_cluster(tmp_path, ray_cluster):
    """ray_address=<host:port>: the command (a process of its own) joins the cluster this test process started."""
    import subprocess

    config = _config(tmp_path, GENERATOR_FREE)
    reference = _one_process(tmp_path, config)
    address = ray_cluster.get_runtime_context().gcs_address
    out = tmp_path / "joined"
    done = subprocess.run([sys.executable, "-m", "tiermem_cli.cli", "label", "--config", str(config),
                           f"output_dir={out}", "executor=ray", "shards=2", f"ray_address={address}"],
                          capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"Connecting to existing Ray cluster at address: {address}" in done.stderr
    assert "shard 0/2 done [" in done.stdout and "merged 2 shards" in done.stdout
    assert outputs(out) == reference


def _killing_responder(out: Path, count: int, index: int):
    """The scripted answerer, which on the first request of shard `index` made after that shard committed a record
    SIGKILLs the shard's process (the holder of the shard directory's lock, waiting on this very reply)."""
    from tests.helpers.label_helpers import answer_from_prompt

    questions = [q.question for c in load_conversations(None) if shard_of(c.conv_id, count) == index
                 for q in c.questions]
    here = shard_dir(out, count=count, index=index)
    killed: list[int] = []
    lock = threading.Lock()

    def respond(messages):
        text = "\n".join(str(m["content"]) for m in messages)
        with lock:
            records = here / "records.jsonl"
            if not killed and any(q in text for q in questions) and records.is_file() and lines(records):
                pid = json.loads((here / LOCK).read_text())["pid"]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        return answer_from_prompt(messages)

    return respond, killed


@pytest.mark.slow
def test_a_worker_killed_mid_shard_is_retried_and_resumes_to_the_same_dataset(tmp_path, ray_cluster, monkeypatch,
                                                                              capsys):
    from tests.helpers.fake_openai import fake_openai

    monkeypatch.setenv("FAKE_KEY", "x")
    out = tmp_path / "ray"
    respond, killed = _killing_responder(out, count=2, index=0)
    with fake_openai(respond) as base_url:
        config = _config(tmp_path, _answering(base_url))
        reference = _one_process(tmp_path, config)  # its records lie elsewhere: nothing is killed
        capsys.readouterr()
        assert _label(config, out, "executor=ray", "shards=2") == 0
    printed = capsys.readouterr().out
    assert len(killed) == 1 and killed[0] != os.getpid()
    state = json.loads((shard_dir(out, 0, 2) / "shard.json").read_text())
    assert state["finished"] and state["resumed_records"] >= 1  # the retry went on from the committed records
    assert f"{state['resumed_records']} resumed from its committed records" in printed
    assert outputs(out) == reference


@pytest.mark.slow
def test_a_shard_failing_for_good_keeps_the_others_and_the_merge_names_it(tmp_path, ray_cluster, monkeypatch, capsys):
    from tests.helpers.fake_openai import fake_openai

    monkeypatch.setenv("FAKE_KEY", "x")
    out = tmp_path / "ray"
    respond, killed = _killing_responder(out, count=2, index=0)
    with fake_openai(respond) as base_url:
        config = _config(tmp_path, _answering(base_url))
        reference = _one_process(tmp_path, config)
        capsys.readouterr()
        rc = _label(config, out, "executor=ray", "shards=2", "ray_max_retries=0")
        printed = capsys.readouterr()
        assert rc == RunError.exit_code and len(killed) == 1, printed.err
        assert "shard 1/2 done [" in printed.out and "shard 0/2 failed [" in printed.err
        assert "error: RunError:" in printed.err and "not finished" in printed.err
        assert "Ray gave up on shard 0/2: WorkerCrashedError" in printed.err
        assert not (out / "dataset").exists()
        other = json.loads((shard_dir(out, 1, 2) / "shard.json").read_text())
        assert other["finished"] and len(lines(shard_dir(out, 1, 2) / "records.jsonl")) == other["records"]
        # the same command again: shard 0 resumes where it was killed, shard 1 has nothing left to do
        assert _label(config, out, "executor=ray", "shards=2") == 0
    assert json.loads((shard_dir(out, 1, 2) / "shard.json").read_text())["resumed_records"] == other["records"]
    assert json.loads((shard_dir(out, 0, 2) / "shard.json").read_text())["resumed_records"] >= 1
    assert outputs(out) == reference
