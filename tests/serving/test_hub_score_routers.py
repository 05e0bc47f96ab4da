"""The demo's main router, a unit reader, pushed to the local hub (tests/helpers/hub_server.py), pulled and routed
back by its hub id: the same scores as the run directory, a card of its kind with the eval table (push eval=) and its
intervals, and no path of the pushing machine in any pushed file (issue 34, classes 1 and 5). A features router
likewise."""

from __future__ import annotations

import json

import pytest

from tests.helpers.hub_client import TOKEN, _env, _run
from tests.helpers.hub_server import local_hub
from tests.test_probes_push import _dataset

pytestmark = pytest.mark.slow

ROUTE = """
import json, sys
from huggingface_hub import ModelCard
from serving.routers import Router
repo, requests = sys.argv[1], json.loads(sys.argv[2])
router = Router.from_pretrained(repo)  # the kind is read from the pulled tiermem_router.json
decisions = router.route_batch([q for q, _ in requests], [s for _, s in requests])
card = ModelCard.load(repo)
print(json.dumps({"kind": router.kind, "scores": [d.score for d in decisions], "card": card.data.to_dict(),
                  "text": card.text}))
"""


def _requests():
    from tests.helpers.unit_reader_run import requests

    questions, summaries, _ = requests()
    return list(zip(questions, summaries, strict=True))


def _push_and_route(run, repo_id, requests, tmp_path, extra=()) -> tuple[dict[str, bytes], dict]:
    """Push `run` (with `extra` push arguments) to a fresh local hub, then route `requests` through the repo in
    another process: (the files of the pushed commit, what ROUTE printed)."""
    with local_hub(TOKEN) as (endpoint, hub):
        env = _env(endpoint, tmp_path / "hf")
        push = _run(["-m", "serving.hub", f"router={run}", f"repo_id={repo_id}", *extra], env)
        assert push.returncode == 0, push.stderr[-3000:]
        proc = _run(["-c", ROUTE, repo_id, json.dumps(requests)], env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        repo = hub.repos[repo_id]
        return repo.commits[repo.refs["main"]], json.loads(proc.stdout.strip().splitlines()[-1])


def test_unit_reader_push_pull_route_gives_the_same_scores(tmp_path):
    from evaluation.evaluate import main as eval_main
    from serving.routers import Router
    from tests.helpers.unit_reader_run import unit_reader_run

    data = _dataset(tmp_path)
    run = unit_reader_run(tmp_path, data=str(data))
    assert eval_main([f"data={data}", "split=test", "router.kind=unit-reader", f"router.path={run}",
                      f"output_dir={tmp_path / 'eval'}", "bootstrap.n_boot=40", "compare=[]"]) == 0
    requests = _requests()
    local = Router.from_pretrained(run).route_batch([q for q, _ in requests], [s for _, s in requests])

    pushed, out = _push_and_route(run, "acme/reader", requests, tmp_path, [f"eval={tmp_path / 'eval' / 'eval.json'}"])
    assert {"model.safetensors", "config.json", "tokenizer.json", "signal_head.json", "tiermem_router.json",
            "README.md"} <= set(pushed)
    for name, content in pushed.items():  # class 5: nothing names a path of this machine
        assert str(tmp_path).encode() not in content, name
    assert out["kind"] == "unit-reader"
    assert out["scores"] == pytest.approx([d.score for d in local], rel=1e-6, abs=1e-6)
    card, text = out["card"], out["text"]
    assert card["pipeline_tag"] == "text-classification" and "unit-reader" in card["tags"]
    assert "merged weights" not in text and '"action"' not in text
    evaluation = text.split("## Evaluation", 1)[1].split("## How to use", 1)[0]  # the router's eval.json, pushed
    assert "| routed |" in evaluation and " [" in evaluation.split("| routed |", 1)[1].split("\n", 1)[0]


def test_features_router_push_pull_route(tmp_path):
    from router_train.fit_features import main as fit_main
    from serving.routers import Router

    data = _dataset(tmp_path)
    run = tmp_path / "features"
    assert fit_main([f"data={data}", f"output_dir={run}"]) == 0
    requests = _requests()
    local = Router.from_pretrained(run).route_batch([q for q, _ in requests], [s for _, s in requests])
    _, out = _push_and_route(run, "acme/features", requests, tmp_path)
    assert out["kind"] == "features" and out["scores"] == pytest.approx([d.score for d in local])
    assert "features" in out["card"]["tags"] and "feature_model.json" in out["text"]
