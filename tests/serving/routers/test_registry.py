"""One router registry for every stage, one config vocabulary, and the router's training top_k enforced."""

from __future__ import annotations

import shutil

import pytest

from evaluation.calibrate import CalibrateConfig
from evaluation.evaluate import EvalConfig
from router_train.lm.grpo import GRPORecipeConfig
from router_train.lm.sft import SFTRecipeConfig
from serving.routers import RouterSpec, build
from serving.routers.fixed import AlwaysEscalate
from serving.routers.local import LocalRouter
from serving.server import RequestError, ServeConfig, validate_route_request
from tests.helpers.router_fixtures import edit_run_meta, make_router_run
from tiermem import contract
from tiermem.runs.run_meta import read_run_meta
from tiermem.settings.config import ConfigError, parse_config


def test_router_is_a_path_or_a_mapping_in_every_stage():
    for cls in (EvalConfig, CalibrateConfig, ServeConfig):
        short = parse_config(cls, None, ["router=runs/x"]).router
        full = parse_config(cls, None, ["router.path=runs/x", "router.mode=generate"]).router
        assert isinstance(short, RouterSpec) and (short.path, short.kind) == ("runs/x", "auto")
        assert (full.path, full.mode) == ("runs/x", "generate")
    # a shorthand overridden key by key, as `make serve ARGS="router=... router.threshold_logit=..."` does
    spec = parse_config(ServeConfig, None, ["router=always-escalate", "router.threshold_logit=1.5"]).router
    assert (spec.kind, spec.path, spec.threshold_logit) == ("always-escalate", None, 1.5)


def test_one_vocabulary_and_unknown_keys_are_refused():
    assert {"router", "data", "output_dir"} <= set(SFTRecipeConfig.__dataclass_fields__)
    assert {"router", "data", "output_dir"} <= set(GRPORecipeConfig.__dataclass_fields__)
    assert {"router", "data", "output_dir"} <= set(EvalConfig.__dataclass_fields__)
    assert {"router", "data"} <= set(CalibrateConfig.__dataclass_fields__)
    for cls, key in [(SFTRecipeConfig, "dataset_dir"), (GRPORecipeConfig, "sft_dir"), (EvalConfig, "out_dir")]:
        with pytest.raises(ConfigError, match=rf"unknown key\(s\) \['{key}'\]; valid keys"):
            parse_config(cls, None, [f"{key}=x"])


def test_build_serves_every_stage_from_one_registry():
    router = build(RouterSpec(path=None, kind="always-escalate"))
    assert isinstance(router, AlwaysEscalate) and router.name == "always-escalate"
    with pytest.raises(ValueError, match="remote needs base_url and model"):
        RouterSpec(kind="remote")
    with pytest.raises(ValueError, match="none builds no router"):
        build(RouterSpec(path=None, kind="none"))


@pytest.fixture(scope="module")
def run_copy(tmp_path_factory):
    dst = tmp_path_factory.mktemp("router") / "run"
    shutil.copytree(make_router_run(), dst)
    return dst


def test_top_k_saved_with_the_router_is_enforced(run_copy):
    edit_run_meta(run_copy, data={**read_run_meta(run_copy).data,
                                    "router_input": {"top_k": 2, **contract.limits()}})
    router = build(RouterSpec(path=str(run_copy)))
    assert isinstance(router, LocalRouter) and router.top_k == 2
    two = [{"text": "a", "date": None}, {"text": "b", "date": None}]
    assert len(router.route_batch(["What is it?"], [two])) == 1
    with pytest.raises(ValueError, match="at most 2 summaries, got 3"):
        router.route_batch(["What is it?"], [[*two, {"text": "c", "date": None}]])
    with pytest.raises(RequestError, match="reads at most 2"):
        validate_route_request({"question": "q", "summaries": [*two, *two]}, ServeConfig(), router.top_k)


def test_other_prompt_limits_refuse_to_load(run_copy):
    edit_run_meta(run_copy, data={**read_run_meta(run_copy).data,
                                    "router_input": {"top_k": 5, "max_summaries": 10, "max_summary_chars": 500}})
    with pytest.raises(contract.ContractVersionError, match="max_summary_chars"):
        LocalRouter.from_pretrained(run_copy)
