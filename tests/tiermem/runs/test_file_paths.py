"""A file a stage reads or writes by path (`judgments`, `loss.trunk_cache`, `trunk_from`) is checked before anything
runs: a regular file, or where the stage writes it a new path in an existing folder; a FIFO, a directory or a
missing folder is a named error naming the key, never a hang nor a traceback after training."""

from __future__ import annotations

import os
import threading

import pytest

from router_train.lm import grpo, sft
from router_train.lm.objectives import LossConfig
from tests.labeling.test_judgments import _label_live, _scripted_coverage
from tiermem.settings.errors import ConfigError, MissingFileError


def _in_thread(fn, fifo):
    """fn() in a thread; a call still blocked after 60 s (on the FIFO) is released by a writer and reported."""
    out: dict = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001  re-raised in the test's thread
            out["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout=60)
    if t.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # EOF for the blocked reader
        t.join(timeout=60)
        pytest.fail("the stage blocked on the FIFO")
    if "error" in out:
        raise out["error"]
    return out.get("value")


def test_the_path_checker_names_the_key(tmp_path):
    from tiermem.runs.safe_io import check_file_path

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    assert check_file_path(tmp_path / "file", "k") == tmp_path / "file"
    assert check_file_path(tmp_path / "new", "k", may_be_new=True) == tmp_path / "new"
    with pytest.raises(ConfigError, match="k=.*fifo: not a regular file"):
        check_file_path(tmp_path / "fifo", "k", may_be_new=True)
    with pytest.raises(ConfigError, match="k=.*dir: a directory, not a file"):
        check_file_path(tmp_path / "dir", "k")
    with pytest.raises(ConfigError, match="k=.*: its folder .*nowhere does not exist"):
        check_file_path(tmp_path / "nowhere" / "new", "k", may_be_new=True)
    with pytest.raises(MissingFileError, match="k=.*new: no such file"):
        check_file_path(tmp_path / "new", "k")
    with pytest.raises(ConfigError, match="cannot be read"):
        check_file_path(tmp_path / "file" / "below", "k", may_be_new=True)


def test_label_judgments_a_fifo_directory_or_missing_folder_is_named_before_anything_runs(tmp_path):
    fifo = tmp_path / "judgments.fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="judgments=.*judgments.fifo: not a regular file"):
        _in_thread(lambda: _label_live(tmp_path / "run_fifo", fifo, _scripted_coverage("yes")), fifo)
    (tmp_path / "dir.jsonl").mkdir()
    with pytest.raises(ConfigError, match="judgments=.*dir.jsonl: a directory, not a file"):
        _label_live(tmp_path / "run_dir", tmp_path / "dir.jsonl", _scripted_coverage("yes"))
    with pytest.raises(ConfigError, match="judgments=.*: its folder .*missing does not exist"):
        _label_live(tmp_path / "run_new", tmp_path / "missing" / "j.jsonl", _scripted_coverage("yes"))
    for name in ("run_fifo", "run_dir", "run_new"):
        assert not (tmp_path / name / "records.jsonl").exists()


def test_eval_judgments_a_fifo_is_named(tmp_path):
    from evaluation import evaluate as E
    from tests.helpers.router_fixtures import build_label_dataset

    fifo = tmp_path / "j.fifo"
    os.mkfifo(fifo)
    build_label_dataset(tmp_path / "dataset")
    cfg = E.EvalConfig(data=str(tmp_path / "dataset"), output_dir=str(tmp_path / "eval"), judgments=str(fifo),
                       router=E.as_router_spec("always-escalate"))
    with pytest.raises(ConfigError, match="judgments=.*j.fifo: not a regular file"):
        _in_thread(lambda: E.run(cfg), fifo)


def test_a_trunk_cache_or_trunk_from_that_is_no_file_is_named_before_any_model_loads(tmp_path, monkeypatch):
    from router_train.lm import router_run

    def no_model(*_a, **_k):
        raise AssertionError("a model was loaded")

    for module in (sft, router_run, grpo):
        for name in ("start_model", "load_policy"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, no_model)
    (tmp_path / "cache_dir").mkdir()
    for cache, needle in ((tmp_path / "cache_dir", "a directory, not a file"),
                          (tmp_path / "missing" / "t.pt", "its folder .*missing does not exist")):
        cfg = sft.SFTRecipeConfig(output_dir=str(tmp_path / "sft"), loss=LossConfig(kind="decision",
                                                                                    trunk_cache=str(cache)))
        with pytest.raises(ConfigError, match=f"loss.trunk_cache=.*{needle}"):
            sft.train(cfg)
    with pytest.raises(ConfigError, match="trunk_from=.*cache_dir: a directory, not a file"):
        grpo.train(grpo.GRPORecipeConfig(output_dir=str(tmp_path / "grpo"), trunk_from=str(tmp_path / "cache_dir")))
    assert not (tmp_path / "sft").exists() and not (tmp_path / "grpo").exists()
