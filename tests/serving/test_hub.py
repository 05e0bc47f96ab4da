"""Push -> pull round trip through the real huggingface_hub client against tests/helpers/hub_server.py (HF_ENDPOINT).

The client reads HF_ENDPOINT / HF_HUB_OFFLINE at import time and conftest sets offline mode, so the client side
runs in subprocesses with their own environment.
"""

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from serving.model_card import render_card
from serving.portable import portable_meta
from tests.helpers.hub_client import PULL, TOKEN, _env, _run
from tests.helpers.hub_server import git_blob_sha1, local_hub
from tests.helpers.router_fixtures import FIXTURES, make_router_run
from tiermem.runs.run_meta import RunMeta, meta_json, read_run_meta


def test_push_pull_round_trip(tmp_path):
    run_dir = make_router_run()
    local = tmp_path / "run"
    import shutil

    shutil.copytree(run_dir, local)
    q, s, _ = FIXTURES[1]
    with local_hub(TOKEN) as (endpoint, hub):
        env = _env(endpoint, tmp_path / "hf")
        push = _run(["-m", "serving.hub", f"router={local}", "repo_id=acme/router", "private=true",
                     "datasets=[acme/locomo-labels]"], env)
        assert push.returncode == 0, push.stderr
        result = json.loads(push.stdout)
        assert result["repo_id"] == "acme/router" and result["revision"] == "main"
        repo = hub.repos["acme/router"]
        assert repo.private and hub.authorized_writes >= 3  # create, preupload, commit all carried the token
        files = repo.commits[repo.refs["main"]]
        for name in ("adapter_model.safetensors", "tokenizer.json"):
            assert files[name] == (local / name).read_bytes(), name
        # the metadata and adapter config as they travel: the run's, with no path of this machine (class 5); the
        # metadata records the sha256 of the adapter config as it travels
        pushed = portable_meta(read_run_meta(local))
        assert files["tiermem_router.json"].decode() == meta_json(dataclasses.replace(pushed, files={
            **pushed.files, "adapter_config.json": hashlib.sha256(files["adapter_config.json"]).hexdigest()}))
        base = read_run_meta(local).base_model  # the fixture's base: a local directory, by absolute path
        for content in files.values():
            assert TOKEN.encode() not in content
            assert str(Path(base).parent).encode() not in content and str(tmp_path).encode() not in content

        # the base was a directory of the pushing machine: the pulled router is told where it is on this one
        pulled = _run(["-c", PULL, "acme/router", "", q, json.dumps(s), "route", base], env)
        assert pulled.returncode == 0, pulled.stderr
        out = json.loads(pulled.stdout.strip().splitlines()[-1])
        snapshot = Path(out["path"])
        assert snapshot.is_relative_to(tmp_path / "hf")  # through the hub cache
        for name, content in files.items():
            assert git_blob_sha1((snapshot / name).read_bytes()) == git_blob_sha1(content)
        card = out["card"]
        assert card["library_name"] == "peft" and card["pipeline_tag"] == "text-generation"
        assert card["license"] == "apache-2.0" and card["datasets"] == ["acme/locomo-labels"]
        assert {"tiermem", "router", "lora", "sft"} <= set(card["tags"])
        assert "base_model" not in card  # the fixture's base is a local directory: nothing to link
        meta = read_run_meta(local)
        assert meta.contract_version in out["text"] and meta.base_model not in out["text"]
        from serving.routers.local import LocalRouter

        assert out["p"] == pytest.approx(LocalRouter.from_pretrained(local).route(q, s).p_escalate, abs=1e-5)

        # A second push as a pull request: main is untouched, the PR revision is pullable.
        (local / "tiermem_router.json").write_text(
            (local / "tiermem_router.json").read_text().replace('"calibration": null',
                                                               '"calibration": {"threshold_logit": -1.25}'))
        pr = _run(["-m", "serving.hub", f"router={local}", "repo_id=acme/router", "create_pr=true"], env)
        assert pr.returncode == 0, pr.stderr
        pr_out = json.loads(pr.stdout)
        assert pr_out["revision"] == "refs/pr/1" and pr_out["pr_url"].endswith("/acme/router/discussions/1")
        assert repo.refs["main"] == result["commit"] != repo.refs["refs/pr/1"]
        pulled_pr = _run(["-c", PULL, "acme/router", "refs/pr/1", q, json.dumps(s), "files"], env)
        assert pulled_pr.returncode == 0, pulled_pr.stderr
        pr_snapshot = Path(json.loads(pulled_pr.stdout.strip().splitlines()[-1])["path"])
        assert read_run_meta(pr_snapshot).calibration == {"threshold_logit": -1.25}
        assert read_run_meta(snapshot).calibration is None  # main's snapshot is a different, untouched commit


def test_push_refuses_without_token_or_bad_repo(tmp_path):
    with local_hub(TOKEN) as (endpoint, hub):
        env = _env(endpoint, tmp_path / "hf")
        env.pop("HF_TOKEN")
        proc = _run(["-m", "serving.hub", f"router={make_router_run()}", "repo_id=acme/router"], env)
        assert proc.returncode == 2 and "no hub token" in proc.stderr
        proc = _run(["-m", "serving.hub", f"router={make_router_run()}", "repo_id=router"], env)
        assert proc.returncode == 2 and "org/name" in proc.stderr
        assert hub.repos == {}


def test_card_names_the_hub_base_model_and_reads_values_from_meta():
    from huggingface_hub import ModelCard

    meta = RunMeta(contract_version="tiermem-router-contract/1", base_model="packaged:smollm2-135m-instruct",
                   stage="grpo", data={"label_rules": ["outcome"], "train_records": 123},
                   metrics={"validation": {"accuracy": 0.8125}},
                   calibration={"threshold_logit": 0.4321, "criterion": "hard_recall", "value": 0.9,
                                "data": "runs/label/dataset", "split": "validation",
                                "achieved": {"escalation_rate": 0.37}})
    card = ModelCard(str(render_card(meta, "acme/r", license="mit", tags=["x"])))
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert card.data.license == "mit" and "x" in card.data.tags and "grpo" in card.data.tags
    for value in ("0.8125", "0.4321", "hard_recall = 0.9", "Label rule `outcome`", "123", "0.37", "acme/r"):
        assert value in card.text, value
