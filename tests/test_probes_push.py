"""Probe table (docs/probes.md), pushing routers, with our own inputs: every router kind
pushes with a card of its kind, nothing pushed names a local path, non-finite calibration targets and endpoint-blind
cache keys, push errors with exit codes, write-back ids from a stored counter, stages from any directory. Class 2
(writes through links) is tests/tiermem/runs/test_safe_writes.py; the unit reader's push -> pull -> route round trip
through the local hub is tests/serving/test_hub_score_routers.py (slow)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from tests.helpers.hub_client import TOKEN, _env, _run
from tests.helpers.records import rec
from tiermem.runs.run_meta import RunMeta, meta_json, read_run_meta

# ---- 1: every router kind pushes, with a card that describes it ------------------------------------------------


def _dataset(root: Path) -> Path:
    """A label DatasetDict whose records carry retrieval scores (what score routers read)."""
    from datasets import Dataset, DatasetDict

    rows = {}
    for split, n in (("train", 8), ("validation", 8), ("test", 12)):
        rows[split] = []
        for i in range(n):
            answer = i % 2 == 0
            row = rec(f"{split}{i}", f"{split}-c{i % 4}", answer, True, "ANSWER" if answer else "ESCALATE", split,
                      summary=f"Caroline moved on day {i}." if answer else "They talked about the weather.")
            row["router_summaries"][0]["score"] = 0.8 if answer else 0.35 + 0.01 * i
            rows[split].append(row)
    path = root / "label" / "dataset"
    DatasetDict({k: Dataset.from_list(v) for k, v in rows.items()}).save_to_disk(str(path))
    return path


@pytest.fixture(scope="module")
def reader_run(tmp_path_factory):
    from tests.helpers.unit_reader_run import unit_reader_run

    root = tmp_path_factory.mktemp("round4")
    data = _dataset(root)
    return unit_reader_run(root, data=str(data)), data


def _card(meta: RunMeta, repo_id: str | None = "acme/reader", report: dict | None = None) -> tuple[dict, str]:
    from huggingface_hub import ModelCard

    from serving.model_card import render_card

    card = ModelCard(render_card(meta, repo_id, report))
    return card.data.to_dict(), card.text


def test_a_unit_reader_card_describes_a_score_router_and_is_written_with_the_run(reader_run):
    run, _ = reader_run
    meta = read_run_meta(run)
    assert (run / "README.md").is_file()  # the stage's save writes the card of its kind
    for data, text in (_card(meta, None), _card(meta)):
        assert data["pipeline_tag"] == "text-classification" and data["library_name"] == "transformers"
        assert "unit-reader" in data["tags"] and "merged" not in data["tags"] and "lora" not in data["tags"]
        assert data.get("base_model") == "sentence-transformers/all-MiniLM-L6-v2"  # the reader's base, by hub id
        assert "merged weights" not in text and '"action"' not in text and "none (unit-reader" not in text
        assert "cross-encoder" in text and "generates no text" in text and '"score": 0.71' in text
        assert "Unparseable outputs" not in text  # an LM router's limitation, not this one's


def test_a_features_and_a_top1_card_name_their_kind(tmp_path):
    import numpy as np

    from serving.routers.features import FeatureRouter
    from serving.routers.top1 import Top1ScoreRouter
    from serving.signals import FEATURES
    from tiermem.models.logistic import fit_logistic

    x = np.tile(np.linspace(0, 1, 4)[:, None], (1, len(FEATURES))) + np.eye(4, len(FEATURES)) * 0.1
    FeatureRouter(fit_logistic(x, np.array([0, 1, 0, 1]), FEATURES)).save(tmp_path / "features")
    Top1ScoreRouter().save(tmp_path / "top1")
    for kind, name in (("features", "feature_model.json"), ("top1-score", "top-1 retrieval score")):
        data, text = _card(read_run_meta(tmp_path / ("features" if kind == "features" else "top1")))
        assert kind in data["tags"] and "pipeline_tag" not in data and "merged" not in data["tags"]
        assert name in text and "merged weights" not in text and '"action"' not in text


def test_the_pushed_card_of_a_unit_reader_shows_its_eval_with_intervals(reader_run, tmp_path):
    """The demo's main router is the unit reader: push puts its eval.json on the card with the bootstrap intervals,
    as for the LM routers."""
    from evaluation.evaluate import main as eval_main
    from serving.hub import read_eval

    run, data = reader_run
    out = tmp_path / "eval"
    assert eval_main([f"data={data}", "split=test", "router.kind=unit-reader", f"router.path={run}",
                      "router.name=reader", f"output_dir={out}", "bootstrap.n_boot=40", "compare=[]"]) == 0
    meta = read_run_meta(run)
    text = _card(meta, report=read_eval(str(out / "eval.json"), meta))[1]
    evaluation = text.split("## Evaluation", 1)[1].split("## How to use", 1)[0]
    assert "Not on this card" not in evaluation and "12 questions" in evaluation
    assert re.search(r"\| routed \| [0-9.]+ \[[0-9.]+, [0-9.]+\]", evaluation)  # accuracy with its interval


def test_push_accepts_every_router_kind_it_can_load(reader_run, tmp_path, monkeypatch):
    """No more `push only updates sft / grpo runs`: the refusal now comes at the token, after the run was taken."""
    from serving.hub import PushConfig, push
    from serving.routers.top1 import Top1ScoreRouter
    from tiermem.runs.rundir import claimed_output_dir
    from tiermem.settings.errors import HubError

    with claimed_output_dir(tmp_path / "top1", "fit-features") as top1:
        Top1ScoreRouter().save(top1)
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    for run in (reader_run[0], top1):
        with pytest.raises(HubError, match="no hub token"):
            push(PushConfig(router=str(run), repo_id="acme/router"))


# ---- 5: nothing pushed names a path of this machine ------------------------------------------------------------


def _leaky_meta(home: Path) -> RunMeta:
    base, data, out = home / "models" / "my-base", home / "runs" / "label" / "dataset", home / "runs" / "sft"
    return RunMeta(contract_version="tiermem-router-contract/1", base_model=str(base), stage="sft",
                   training={"output_dir": str(out), "data": str(data), "learning_rate": 1e-4,
                             "router": str(home / "runs" / "prev")},
                   data={"data": str(data), "train_records": 8},
                   calibration={"threshold_logit": 0.5, "criterion": "max_reward", "data": str(data),
                                "split": "validation"},
                   extra={"config": {"output_dir": str(out), "base": str(base)}, "note": f"trained in {home}/x"})


def test_pushed_metadata_card_and_adapter_config_hold_no_local_path(tmp_path):
    from serving.model_card import render_card
    from serving.portable import portable_adapter_config, portable_meta

    home = tmp_path / "home" / "alice"
    meta = _leaky_meta(home)
    pushed = portable_meta(meta)
    texts = {"tiermem_router.json": meta_json(pushed), "README.md": str(render_card(meta, "acme/router")),
             "adapter_config.json": portable_adapter_config(json.dumps(
                 {"base_model_name_or_path": str(home / "models" / "my-base"), "r": 8}), pushed.base_model)}
    for name, text in texts.items():
        assert str(tmp_path) not in text and "/home/alice" not in text, name
    assert pushed.base_model == "local directory my-base" and pushed.calibration["threshold_logit"] == 0.5
    assert json.loads(texts["adapter_config.json"])["base_model_name_or_path"] == "local directory my-base"
    assert "output_dir" not in pushed.training
    assert portable_meta(pushed) == pushed  # idempotent: a pushed router pushed again reads the same


def test_a_pushed_lm_router_with_a_local_base_is_loaded_with_the_base_named_here(tmp_path):
    import shutil

    from serving.portable import portable_meta
    from serving.routers.local import LocalRouter
    from tests.helpers.router_fixtures import make_router_run
    from tiermem.runs.run_meta import RunMetaFile
    from tiermem.settings.errors import RouterLoadError

    run = tmp_path / "pulled"
    shutil.copytree(make_router_run(), run)
    base = read_run_meta(run).base_model
    RunMetaFile.new(run, portable_meta(read_run_meta(run))).save()  # what a pull of it holds
    with pytest.raises(RouterLoadError, match="router.base_model=PATH"):
        LocalRouter.load(run)
    assert LocalRouter.load(run, base_model=base).route("When?", []).action in ("ANSWER", "ESCALATE")


# ---- 12: non-finite calibration targets; cache keys that know the endpoint -------------------------------------


@pytest.mark.parametrize("override", ["value=.nan", "value=.inf", "value=-.inf", "budget_share=.nan",
                                      "risk_grid=[.nan,1.0,10]"])
def test_calibrate_refuses_a_non_finite_target(override, capsys):
    from evaluation.calibrate import main

    criterion = "token_budget" if override.startswith("budget") else (
        "risk_control" if override.startswith("risk") else "escalation_rate")
    assert main(["router=always-escalate", f"criterion={criterion}", override]) == 2
    assert "finite" in capsys.readouterr().err


def test_the_response_cache_key_includes_the_endpoint(monkeypatch):
    from tiermem.llm.base import CallParams
    from tiermem.llm.remote import OpenAIChatLLM

    messages, params = [{"role": "user", "content": "hi"}], CallParams(8, 0.0)
    a = OpenAIChatLLM("router", base_url="http://127.0.0.1:8000/v1")
    b = OpenAIChatLLM("router", base_url="http://127.0.0.1:8001/v1")
    same = OpenAIChatLLM("router", base_url="http://user:secret@127.0.0.1:8000/v1/")
    assert a._key(messages, params) != b._key(messages, params)
    assert a._key(messages, params) == same._key(messages, params)  # credentials and a trailing / change nothing
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    official = OpenAIChatLLM("router")  # no endpoint given: the key is what it was, so existing caches still hit
    blob = json.dumps(["openai", "router", messages, params.key()], sort_keys=True, ensure_ascii=False)
    assert official._key(messages, params) == hashlib.sha256(blob.encode()).hexdigest()


# ---- 17: push errors are named, with their exit codes -----------------------------------------------------------


@pytest.mark.parametrize("repo_id", ["../x", "a/b c", "me/.git", "me/" + "x" * 200, "a/b..c", "org/name.git"])
def test_push_refuses_an_invalid_repo_id_before_reading_anything(repo_id, capsys, tmp_path):
    from serving.hub import main

    assert main([f"router={tmp_path / 'nowhere'}", f"repo_id={repo_id}"]) == 2
    err = capsys.readouterr().err
    assert "is not a valid hub repo id" in err or "must be org/name" in err
    assert "Traceback" not in err


@pytest.fixture()
def top1_run(tmp_path):
    from serving.routers.top1 import Top1ScoreRouter
    from tiermem.runs.rundir import claimed_output_dir

    with claimed_output_dir(tmp_path / "top1", "fit-features") as out:
        Top1ScoreRouter().save(out)
    return out


def test_push_to_an_unreachable_hub_exits_7_naming_hf_endpoint(top1_run, tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**_env(f"http://127.0.0.1:{port}", tmp_path / "hf"), "HF_HUB_ETAG_TIMEOUT": "2",
           "HF_HUB_DOWNLOAD_TIMEOUT": "2"}
    proc = _run(["-m", "serving.hub", f"router={top1_run}", "repo_id=acme/router"], env)
    assert proc.returncode == 7, proc.stderr[-2000:]
    assert "cannot be reached" in proc.stderr and "HF_ENDPOINT" in proc.stderr and "Traceback" not in proc.stderr


def test_push_in_offline_mode_exits_2_naming_hf_hub_offline(top1_run, tmp_path):
    env = {**_env("http://127.0.0.1:9", tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    proc = _run(["-m", "serving.hub", f"router={top1_run}", "repo_id=acme/router"], env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "HF_HUB_OFFLINE" in proc.stderr and "Traceback" not in proc.stderr
    assert TOKEN not in proc.stderr


# ---- 18: write-back ids from a counter stored with the tier -----------------------------------------------------


def test_write_back_ids_never_collide_after_an_update(tmp_path):
    from tests.helpers.memory_runtime import CFG, build
    from tiermem.data import load_conversations
    from tiermem.memory.policies import LinkedQuote
    from tiermem.memory.runtime import MemoryConfig

    conv = load_conversations(None)[1]
    cfg = MemoryConfig(**{**CFG.__dict__, "writeback_skip_similarity": 0.97, "writeback_update_similarity": 0.6})
    rt = build(tmp_path, conv, cfg)
    page = rt.memory.raw.pages()[0]
    turn = page.turn_ids[0]

    def write(fact: str):
        return rt.write_back([LinkedQuote(fact, fact, page.page_id, turn, "exact", 1)])[0]

    first = write("Zora keeps three tortoises named Ada, Bo and Cy in the garden")
    assert first.action == "add"
    updated = write("Zora keeps three tortoises named Ada, Bo and Cy in the garden shed")
    assert updated.action == "update" and updated.unit_id == first.unit_id  # its origin is now writeback-update
    second = write("The lighthouse keeper repaints the stairs every October")
    assert second.action == "add" and second.unit_id != first.unit_id  # was: duplicate summary unit id(s)
    rt.close()
    rt = build(tmp_path, conv, cfg)  # reopened: the counter is stored with the tier
    third = write("Quinn bought a red kayak for the lake trip")
    assert third.action == "add" and third.unit_id not in (first.unit_id, second.unit_id)
    ids = [u.unit_id for u in rt.memory.summaries.units]
    assert len(ids) == len(set(ids))


def test_an_index_from_before_the_counter_continues_above_its_highest_id(tmp_path):
    from tiermem.memory.summaries import HashingEmbedder, SummaryIndex, SummaryUnit

    index = SummaryIndex(tmp_path / "tier1", HashingEmbedder(64))
    index.add([SummaryUnit("c:w0000", "a", [], [], None, "writeback-update"),
               SummaryUnit("c:w0003", "b", [], [], None, "writeback")])
    index._conn.execute("DELETE FROM counters")  # as an index written before counters existed
    assert index.new_unit_id("c:w") == "c:w0004" and index.new_unit_id("c:w") == "c:w0005"
    index.close()
    assert SummaryIndex(tmp_path / "tier1", HashingEmbedder(64)).new_unit_id("c:w") == "c:w0006"


# ---- 19: every stage runs from any working directory ------------------------------------------------------------


def test_every_stage_finds_its_default_config_from_another_directory(tmp_path, monkeypatch):
    """Each CLI stage parses its config from a directory that is not the checkout: the config file it asks for
    (its default, or a path the checkout's configs/ hold) is found."""
    import importlib

    from tiermem.settings import config
    from tiermem_cli import cli

    asked: dict[str, object] = {}
    current: list[str] = []

    class Parsed(Exception):
        pass

    def record(cls, path=None, overrides=()):
        asked[current[-1]] = path
        if path is not None:
            config.load_yaml(path)  # raises ConfigError "config file not found" if it is not found from here
        raise Parsed

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(config, "parse_config", record)
    for stage, (target, _) in cli.STAGES.items():
        module, _, fn = target.partition(":")
        main = getattr(importlib.import_module(module), fn)
        current.append(stage)
        try:
            main([])
        except Parsed:
            pass
    assert "unit-reader" in asked and "demo" in asked  # the stages with a relative default config
    for stage, path in asked.items():
        assert path is None or config.config_path(path).is_file(), (stage, path)


def test_unit_reader_from_another_directory_reads_its_config_and_stops_at_the_data(tmp_path, monkeypatch, capsys):
    from router_train.reader.unit_reader import main

    monkeypatch.chdir(tmp_path)
    assert main([f"data={tmp_path / 'missing'}", f"output_dir={tmp_path / 'reader'}"]) == 2
    err = capsys.readouterr().err
    assert "config file not found" not in err and "missing" in err


def test_demo_step_configs_resolve_from_another_directory(tmp_path, monkeypatch):
    from tiermem.settings.config import config_path
    from tiermem_cli.demo import DemoConfig

    monkeypatch.chdir(tmp_path)
    cfg = DemoConfig()
    for name in ("label_config", "sample_label_config", "reader_config", "sft_config", "grpo_config",
                 "features_config", "calibrate_config", "eval_config"):
        assert config_path(getattr(cfg, name)).is_file(), name
