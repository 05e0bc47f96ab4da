"""Run directories: every stage that writes a directory claims it (a foreign run directory is refused with exit
code 4 and left byte for byte as it was), and a claimed directory is locked while its stage writes it (a second run
on it is refused at once, naming the holder)."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from labeling.roles import Roles
from labeling.run import run
from tests.helpers.label_helpers import HashEmbedder, _label_cfg, answer_from_prompt
from tiermem.llm import ScriptedLLM
from tiermem.runs.rundir import (
    LOCK,
    MARKER,
    claim_output_dir,
    claim_run_to_update,
    claimed_output_dir,
    launch_run_dir,
    read_marker,
    release_output_dir,
)
from tiermem.settings.errors import EXIT_RUN_DIR, EXIT_USAGE, RunDirError
from tiermem_cli import cli

ROOT = Path(__file__).resolve().parents[3]

# ------------------------------------------------------------------------------------------ the stage table

# CLI stage -> argv that points its output directory at `d` (every other input names something that does not
# exist: the stage must refuse the directory before it would read any of them).
WRITES: dict[str, list[Callable[[Path], list[str]]]] = {
    "label": [lambda d: [f"output_dir={d}", "data_path=", "memory.tokenizer=whitespace"],
              lambda d: [f"output_dir={d}", "shard=0/2", "data_path=", "memory.tokenizer=whitespace"]],
    "label-merge": [lambda d: [f"output_dir={d}", "data_path=", "memory.tokenizer=whitespace"]],
    "audit": [lambda d: [f"output_dir={d}", "data=/nonexistent/label"]],
    "sft": [lambda d: [f"output_dir={d}", "data=/nonexistent/dataset"]],
    "grpo": [lambda d: [f"output_dir={d}", "router=/nonexistent/sft", "data=/nonexistent/dataset"]],
    "fit-features": [lambda d: [f"output_dir={d}", "data=/nonexistent/dataset"],
                     lambda d: ["kind=top1-score", f"output_dir={d}", "data=/nonexistent/dataset"]],
    "unit-reader": [lambda d: [f"output_dir={d}", "data=/nonexistent/dataset"]],
    "reader-pretrain": [lambda d: [f"output_dir={d}", "data=/nonexistent/squad.json"]],
    "eval": [lambda d: [f"output_dir={d}", "data=/nonexistent/dataset", "router.kind=none", "compare=[]"]],
    "ingest": [lambda d: [f"workdir={d}", "data=/nonexistent/conversations.json"]],  # the tier cache root
    "ask": [lambda d: [f"workdir={d}", "question=What did Tomas adopt?"]],
    "demo": [lambda d: [f"root={d}", "stages=[label]"]],  # the root over its steps' runs (each claims its own)
}
# Stages that change a run another stage made: they name the run kinds they accept and refuse the rest.
UPDATES: dict[str, Callable[[Path], list[str]]] = {
    "calibrate": lambda d: [f"router={d}", "data=/nonexistent/dataset"],  # the threshold, into a router run
    "push": lambda d: [f"router={d}", "repo_id=org/name"],  # the card and adapter config, into an LM router run
    # ask's floor, into a reader-pretrain or unit-reader run
    "answer-floor": lambda d: [f"reader={d}", "data=/nonexistent/locomo.json", "molweni=/nonexistent/molweni.json"],
}
# Stages that write no directory at all, with the reason.
READ_ONLY: dict[str, str] = {
    "serve": "serves a router over HTTP: reads its run directory, writes no file",
}
# The marker each writing stage leaves, for the foreign directories that would be its own.
OWN_MARKER = {"label-merge": "label", "fit-features": "fit-features", "ingest": "tiers", "ask": "tiers"}


def _router_meta(stage: str) -> str:
    return json.dumps({"contract_version": "tiermem-router-contract/2", "base_model": "packaged:x", "stage": stage})


def _sft_run(d: Path) -> None:
    (d / MARKER).write_text(json.dumps({"stage": "sft", "created": "2026-01-01T00:00:00Z"}))
    (d / "tiermem_router.json").write_text(_router_meta("sft"))
    (d / "adapter_model.safetensors").write_bytes(b"\x00weights\xff" * 64)


def _unmarked_sft_run(d: Path) -> None:  # an SFT run's files without a marker: not a run directory at all
    (d / "tiermem_router.json").write_text(_router_meta("sft"))
    (d / "adapter_config.json").write_text("{}")


def _label_run(d: Path) -> None:
    (d / MARKER).write_text(json.dumps({"stage": "label", "created": "2026-01-01T00:00:00Z"}))
    (d / "resume_fingerprint.json").write_text("{}")
    (d / "records.jsonl").write_text('{"conv_id": "c", "qid": "q"}\n')


def _unrelated(d: Path) -> None:  # somebody's directory: one file and a subdirectory
    (d / "notes.txt").write_text("mine")
    (d / "photos").mkdir()
    (d / "photos" / "a.jpg").write_bytes(b"\xff\xd8jpeg")


FOREIGN: dict[str, tuple[str | None, Callable[[Path], None]]] = {  # name -> (stage it belongs to, maker)
    "sft run": ("sft", _sft_run),
    "unmarked sft run": (None, _unmarked_sft_run),
    "label run": ("label", _label_run),
    "unrelated directory": (None, _unrelated),
}


def _snapshot(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(d.rglob("*"))}


LOADERS = [("tiermem.models.specs", "load_causal_lm"), ("tiermem.models.specs", "load_embedder"),
           ("tiermem.models.specs", "resolve_model"),
           ("labeling.dataset", "load_split"), ("labeling.dataset", "load_dataset_dict"),
           ("tiermem.data.conversations", "load_conversations"), ("serving.routers.spec", "build"),
           ("tiermem.llm", "build_llm"), ("router_train.lm.grpo", "load_policy")]


def _poison_loaders(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every loader of a model, a dataset, conversations, an LLM or tiers fails the test if it is called: the
    refusal must come before any of them (and so costs nothing)."""
    for target, _ in cli.STAGES.values():
        importlib.import_module(target.split(":")[0])
    from serving.routers import Router
    from tiermem.memory.runtime import MemoryRuntime

    def loaded(*a, **k):
        raise AssertionError("something was loaded before the output directory was checked")

    originals = [getattr(importlib.import_module(module), name) for module, name in LOADERS]
    for mod in list(sys.modules.values()):  # the module itself and every `from x import loader` copy
        if getattr(mod, "__name__", "").split(".")[0] not in {"tiermem", "labeling", "serving", "router_train",
                                                             "evaluation", "tiermem_cli", "benchmarks"}:
            continue
        for attr, value in list(vars(mod).items()):
            if any(value is fn for fn in originals):
                monkeypatch.setattr(mod, attr, loaded)
    monkeypatch.setattr(MemoryRuntime, "open_or_build", classmethod(loaded))
    monkeypatch.setattr(Router, "from_pretrained", classmethod(loaded))
    monkeypatch.setattr(Roles, "from_config", classmethod(loaded))


def test_every_cli_stage_is_classified():
    unclassified = set(cli.STAGES) - set(WRITES) - set(UPDATES) - set(READ_ONLY)
    assert not unclassified, (
        f"new CLI stage(s) {sorted(unclassified)}: add each to WRITES (it claims its output directory through "
        "tiermem.runs.rundir.claim_output_dir), UPDATES (it changes another stage's run through claim_run_to_update) "
        "or READ_ONLY (with the reason it writes nothing) in tests/tiermem/runs/test_rundir.py")
    assert not (set(WRITES) | set(UPDATES) | set(READ_ONLY)) - set(cli.STAGES), "a classified stage no longer exists"


def _cases() -> list[tuple[str, int, str]]:
    cases = []
    for stage, argvs in WRITES.items():
        own = OWN_MARKER.get(stage, stage)
        cases += [(stage, i, name) for i in range(len(argvs)) for name, (kind, _) in FOREIGN.items() if kind != own]
    cases += [(stage, -1, name) for stage in UPDATES for name, (kind, _) in FOREIGN.items() if kind != "sft"]
    return cases


@pytest.mark.parametrize(("stage", "variant", "foreign"), _cases())
def test_stage_refuses_a_foreign_run_directory_and_leaves_it_unchanged(tmp_path, monkeypatch, capsys, stage,
                                                                       variant, foreign):
    monkeypatch.chdir(ROOT)  # the stages' default configs are repo-relative
    _poison_loaders(monkeypatch)
    d = tmp_path / "foreign"
    d.mkdir()
    FOREIGN[foreign][1](d)
    before = _snapshot(d)
    argv = UPDATES[stage](d) if variant < 0 else WRITES[stage][variant](d)
    code = cli.main([stage, *argv])
    err = capsys.readouterr().err
    assert code == EXIT_RUN_DIR, err
    assert f"tiermem-router {stage}: error: RunDirError: {d}" in err
    assert _snapshot(d) == before


def test_bench_refuses_a_foreign_output_directory(tmp_path, capsys):
    from benchmarks import run as bench

    d = tmp_path / "foreign"
    d.mkdir()
    _sft_run(d)
    before = _snapshot(d)
    assert bench.main([f"output_dir={d}", "router.enabled=false", "server.enabled=false",
                       "labeling.enabled=false", "training.enabled=false"]) == EXIT_RUN_DIR
    assert f"RunDirError: {d}" in capsys.readouterr().err and _snapshot(d) == before


def test_fit_features_in_a_copy_of_an_sft_run_keeps_its_tiermem_router_json(tmp_path, capsys):
    """The reported reproduction: `cp -a runs/sft /tmp/x && tiermem-router fit-features ... output_dir=/tmp/x`."""
    data = tmp_path / "records.jsonl"
    data.write_text(json.dumps({"question": "q?", "router_summaries": [{"text": "t", "score": 0.5}],
                                "label": "ESCALATE", "split": "train"}) + "\n")
    for kind in ("features", "top1-score"):
        d = tmp_path / f"sft-copy-{kind}"
        d.mkdir()
        _sft_run(d)
        before = _snapshot(d)
        assert cli.main(["fit-features", f"kind={kind}", f"data={data}", f"output_dir={d}"]) == EXIT_RUN_DIR
        assert "is a 'sft' run directory" in capsys.readouterr().err
        assert _snapshot(d) == before


def test_updating_stages_accept_only_router_runs(tmp_path):
    sft = tmp_path / "sft"
    sft.mkdir()
    _sft_run(sft)
    assert claim_run_to_update(sft, "calibrate") == sft
    release_output_dir(sft)
    assert json.loads((sft / MARKER).read_text())["stage"] == "sft"  # the owner's marker is kept
    unmarked = tmp_path / "unmarked"
    unmarked.mkdir()
    _unmarked_sft_run(unmarked)
    with pytest.raises(RunDirError, match="was not made by tiermem-router \\(no run marker\\); calibrate only updates"):
        claim_run_to_update(unmarked, "calibrate")
    label = tmp_path / "label"
    label.mkdir()
    _label_run(label)
    with pytest.raises(RunDirError, match="is a 'label' run directory; calibrate only updates"):
        claim_run_to_update(label, "calibrate")
    with pytest.raises(RunDirError, match="not a run directory"):
        claim_run_to_update(tmp_path / "missing", "push", ("sft", "grpo"))


# --------------------------------------------------------------------------------------------- the lock

HOLDER = """
import sys, time
from tiermem.runs.rundir import claim_output_dir
claim_output_dir(sys.argv[1], sys.argv[2])
print("held", flush=True)
time.sleep(float(sys.argv[3]))
"""


def _hold(path: Path, stage: str, seconds: float) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), stage, str(seconds)], stdout=subprocess.PIPE,
                            env=env, cwd=ROOT)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"held"
    return proc


def test_a_second_process_is_refused_at_once_and_the_lock_dies_with_the_first(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    holder = _hold(out, "label", 120)
    try:
        _poison_loaders(monkeypatch)  # refused before the conversations, the LLMs or the embedder load
        before = _snapshot(out)
        started = time.monotonic()
        code = cli.main(["label", f"output_dir={out}", "data_path=", "memory.tokenizer=whitespace"])
        elapsed = time.monotonic() - started
        err = capsys.readouterr().err
        assert code == EXIT_RUN_DIR, err
        assert f"{out}: is in use by pid {holder.pid} (stage label)" in err
        assert elapsed < 10 and _snapshot(out) == before  # at once, and nothing written
        with pytest.raises(RunDirError, match=rf"in use by pid {holder.pid} \(stage label\)"):
            claim_run_to_update(out, "calibrate", ("label",))  # an updating stage waits its turn too
    finally:
        holder.kill()  # SIGKILL: no cleanup runs, the kernel drops the lock with the process
        holder.wait()
    with claimed_output_dir(out, "label") as claimed:  # claimable again
        assert claimed == out
    finished = _hold(out, "label", 0)  # a holder that ends normally releases it too
    finished.wait()
    with claimed_output_dir(out, "label"):
        pass
    assert sorted(p.name for p in out.iterdir()) == sorted([MARKER, LOCK])


def test_two_label_runs_on_one_directory_in_one_process(tmp_path):
    """The reported reproduction: both runs 'succeeded' and every record was written twice."""
    out = tmp_path / "run"
    entered, go_on = threading.Event(), threading.Event()

    def slow(messages):
        entered.set()
        go_on.wait(60)
        return answer_from_prompt(messages)

    from tiermem.llm import ScriptedLLM

    result: dict = {}

    def first() -> None:
        try:
            result["stats"] = run(_label_cfg(out), Roles({"answerer": ScriptedLLM(slow)}), embedder=HashEmbedder())
        except BaseException as exc:  # reported by the assertions below
            result["error"] = exc

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert entered.wait(60), result
        with pytest.raises(RunDirError, match=rf"{out}: is in use by pid {os.getpid()} \(stage label\)"):
            run(_label_cfg(out), Roles({"answerer": ScriptedLLM(answer_from_prompt)}), embedder=HashEmbedder())
    finally:
        go_on.set()
        thread.join(120)
    assert "error" not in result, result.get("error")
    keys = [(r["conv_id"], r["qid"]) for r in map(json.loads, (out / "records.jsonl").read_text().splitlines())]
    assert len(keys) == len(set(keys)) == result["stats"]["records"]  # each record once
    stats = run(_label_cfg(out), Roles({"answerer": ScriptedLLM(answer_from_prompt)}), embedder=HashEmbedder())
    assert stats["resumed_records"] == len(keys)  # released when the first run ended: a rerun resumes


def test_nested_claims_from_one_thread_are_counted_and_other_threads_are_refused(tmp_path):
    out = tmp_path / "sft"
    claim_output_dir(out, "sft")
    try:
        assert claim_output_dir(out, "sft") == out  # a helper of the same stage claims it again: counted
        release_output_dir(out)
        errors: list[BaseException] = []

        def other() -> None:
            try:
                claim_run_to_update(out, "calibrate")
            except RunDirError as exc:
                errors.append(exc)

        t = threading.Thread(target=other)
        t.start()
        t.join(30)
        assert errors and f"is in use by pid {os.getpid()} (stage sft)" in str(errors[0])
    finally:
        release_output_dir(out)
    with claimed_output_dir(out, "sft"):  # fully released
        pass


def test_other_ranks_of_a_distributed_launch_share_rank_0s_claim(tmp_path, monkeypatch):
    from router_train.lm.router_run import is_launch_leader

    out = tmp_path / "sft"
    with claimed_output_dir(out, "sft"):  # rank 0
        monkeypatch.setenv("RANK", "1")
        assert not is_launch_leader()
        errors: list[BaseException] = []

        def rank_1() -> None:
            try:
                with launch_run_dir(out, "sft", leader=is_launch_leader()):
                    pass
            except BaseException as exc:  # reported below
                errors.append(exc)

        t = threading.Thread(target=rank_1)
        t.start()
        t.join(30)
        assert not errors, errors
        with pytest.raises(RunDirError, match="is a 'sft' run directory"):  # the marker rules still hold
            claim_output_dir(out, "grpo", lock=False)
    monkeypatch.setenv("RANK", "0")
    assert is_launch_leader()


def test_label_with_empty_output_dir_keeps_the_current_directory(tmp_path, monkeypatch, capsys):
    """The reported reproduction: `cd x && tiermem-router label output_dir=` deleted x/dataset/keep.txt."""
    (tmp_path / "dataset").mkdir()
    (tmp_path / "dataset" / "keep.txt").write_text("keep")
    (tmp_path / "report.md").write_text("mine")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["label", "output_dir=", "data_path=", "memory.tokenizer=whitespace"]) == EXIT_USAGE
    assert (tmp_path / "dataset" / "keep.txt").read_text() == "keep"
    assert (tmp_path / "report.md").read_text() == "mine"


def test_label_refuses_a_directory_it_did_not_make(tmp_path):
    foreign = tmp_path / "home"
    (foreign / "dataset").mkdir(parents=True)
    (foreign / "dataset" / "keep.txt").write_text("keep")
    (foreign / "stats.json").write_text("{}")
    dead = ScriptedLLM(lambda m: "x")
    with pytest.raises(RunDirError, match="not made by tiermem-router label"):
        run(_label_cfg(foreign), Roles({"answerer": dead}), embedder=HashEmbedder())
    assert (foreign / "dataset" / "keep.txt").read_text() == "keep" and (foreign / "stats.json").read_text() == "{}"
    assert sorted(p.name for p in foreign.iterdir()) == ["dataset", "stats.json"]  # nothing added either


def test_label_reruns_in_its_own_directory_and_cli_maps_the_refusal(tmp_path, capsys):
    out = tmp_path / "run"
    roles = Roles({"answerer": ScriptedLLM(answer_from_prompt)})
    run(_label_cfg(out), roles, embedder=HashEmbedder())
    assert json.loads((out / MARKER).read_text())["stage"] == "label"
    run(_label_cfg(out), roles, embedder=HashEmbedder())  # its own run: resumed, outputs rewritten
    assert (out / "dataset").is_dir()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    assert cli.main(["label", f"output_dir={other}", "data_path=", "memory.tokenizer=whitespace"]) == EXIT_RUN_DIR
    assert "RunDirError" in capsys.readouterr().err


def test_claim_output_dir_rules(tmp_path):
    with pytest.raises(RunDirError, match="empty"):
        claim_output_dir("", "label")
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirError, match="is a file"):
        claim_output_dir(tmp_path / "file", "eval")
    sft = claim_output_dir(tmp_path / "sft", "sft")
    (sft / "adapter_model.safetensors").write_text("w")
    assert claim_output_dir(sft, "sft") == sft  # a rerun of the same stage
    with pytest.raises(RunDirError, match="is a 'sft' run directory"):
        claim_output_dir(sft, "grpo")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert claim_output_dir(empty, "eval") == empty and (empty / MARKER).is_file()
    # shards claim their common directory at once (lock=False): one's marker, still a temporary file before its
    # rename, is no foreign file to the other
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / f".{MARKER}.k2j4x.tmp").write_text("{")
    assert claim_output_dir(shared, "label", lock=False) == shared and read_marker(shared)["stage"] == "label"
    unmarked = tmp_path / "unmarked"  # a label run's files without a marker: a run only by its marker
    unmarked.mkdir()
    (unmarked / "resume_fingerprint.json").write_text("{}")
    (unmarked / "records.jsonl").write_text("")
    with pytest.raises(RunDirError, match=f"not made by tiermem-router label \\(no {MARKER}\\)"):
        claim_output_dir(unmarked, "label")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / MARKER).write_text("not json")
    with pytest.raises(RunDirError, match="unreadable run marker"):
        claim_output_dir(tmp_path / "bad", "label")


def test_training_and_eval_refuse_foreign_directories_before_loading_anything(tmp_path, monkeypatch):
    from evaluation import evaluate
    from router_train.lm import grpo, sft

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("keep")

    def no_model(*a, **k):
        raise AssertionError("a model was loaded before the output directory was checked")

    monkeypatch.setattr("tiermem.models.specs.load_causal_lm", no_model)
    with pytest.raises(RunDirError):
        sft.train(sft.SFTRecipeConfig(output_dir=str(foreign), data=str(tmp_path / "ds")))
    monkeypatch.setattr(grpo, "load_policy", no_model)
    with pytest.raises(RunDirError):
        grpo.train(grpo.GRPORecipeConfig(output_dir=str(foreign), router=str(tmp_path / "sft"),
                                         data=str(tmp_path / "ds")))
    with pytest.raises(RunDirError):
        evaluate.write_outputs({"meta": {}}, [], foreign)
    assert sorted(p.name for p in foreign.iterdir()) == ["keep.txt"]
