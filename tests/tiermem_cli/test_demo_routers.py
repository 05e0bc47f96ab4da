"""The demo's main row: chosen among the trained routers (the unit reader and the LM routers) by main_choice, and
evaluated by its own kind."""

import json
from typing import get_type_hints

import pytest

from tests.tiermem_cli.test_main_choice import _scores
from tiermem.settings.config import choices_of
from tiermem.settings.errors import ConfigError, UsageError
from tiermem_cli.demo import MAIN_CANDIDATES, DemoConfig, eval_args, pick_main_router, steps


def _perfect(d, i, y):
    return 1.0 if y else 0.0


def _chance(d, i, y):
    return 0.0


def _calibrated(root, perfect, others):
    _scores(root, "features", lambda d, i, y: float(i % 5))
    _scores(root, perfect, _perfect)
    for name in others:
        _scores(root, name, _chance)


def test_the_chosen_router_is_the_main_row_and_every_other_router_is_compared(tmp_path):
    cfg = DemoConfig(root=str(tmp_path), stages=["label", "reader", "sft", "grpo", "features", "calibrate", "eval"])
    _calibrated(tmp_path, "reader", ["sft", "grpo"])
    assert pick_main_router(cfg) == "reader"
    args = eval_args(cfg)
    assert "router.kind=unit-reader" in args and f"router.path={tmp_path / 'reader'}" in args
    compare = json.loads(next(a for a in args if a.startswith("compare="))[len("compare="):])
    assert [(c["name"], c["kind"]) for c in compare[:2]] == [("sft", "local"), ("grpo", "local")]
    _calibrated(tmp_path, "sft", ["reader", "grpo"])
    assert pick_main_router(cfg) == "sft" and "router.kind=local" in eval_args(cfg)


def test_best_needs_every_router_calibrated(tmp_path):
    cfg = DemoConfig(root=str(tmp_path), stages=["label", "reader", "features", "calibrate", "eval"])
    _scores(tmp_path, "reader", _perfect)
    with pytest.raises(UsageError, match=r"calibrated.*\['features'\]"):
        pick_main_router(cfg)


def test_the_reader_step_trains_before_the_lm_routers_and_is_calibrated(tmp_path):
    names = [name for name, _, _ in steps(DemoConfig(root=str(tmp_path)))]
    assert names.index("reader") < names.index("sft") and "calibrate reader" in names


def _step_args(cfg, name):
    return next(args for step, _, args in steps(cfg) if step == name)


def test_grpo_refines_the_sft_router(tmp_path):
    cfg = DemoConfig(root=str(tmp_path))
    names = [name for name, _, _ in steps(cfg)]
    assert names.index("sft") < names.index("grpo")
    assert f"router={tmp_path / 'sft'}" in _step_args(cfg, "grpo")
    assert f"trunk_from={tmp_path / 'sft' / 'trunk_states.pt'}" in _step_args(cfg, "grpo")


def test_eval_pairs_grpo_with_sft_whichever_is_the_main_row(tmp_path):
    cfg = DemoConfig(root=str(tmp_path))
    _calibrated(tmp_path, "reader", ["sft", "grpo"])

    def pairs():
        return json.loads(next(a for a in eval_args(cfg) if a.startswith("pairs="))[len("pairs="):])

    assert pairs() == [["grpo", "sft"]]
    _calibrated(tmp_path, "sft", ["reader", "grpo"])  # sft becomes the main row: its row is `routed`
    assert pairs() == [["grpo", "routed"]]


def test_the_stage_table_is_printed_and_kept(tmp_path):
    from tiermem_cli.demo import TIMINGS_FILE, stage_table, write_timings

    timings = {"label": 60.0, "sft": 540.0, "grpo": 300.0}
    table = stage_table(timings)
    assert "| sft | 540.0 | 60% |" in table and "| total | 900.0 (15 min 0 s) | |" in table
    summary = write_timings(tmp_path, timings, failed="grpo")
    saved = json.loads((tmp_path / TIMINGS_FILE).read_text())
    assert saved == summary and saved["failed_step"] == "grpo" and saved["total_seconds"] == 900.0


def test_the_reader_the_demo_serves_gets_its_chat_floor_once(tmp_path):
    """Issue 40: `ask router=runs/reader` right after `make demo` needs no manual calibration step; the pre-trained
    reader is the unit reader's base, not served: no floor of its own (issue 65)."""
    plan = steps(DemoConfig(root=str(tmp_path), data_path=str(tmp_path / "absent.json"),
                            reading_data=str(tmp_path / "squad.json")))
    floors = {name: args for name, stage, args in plan if stage == "answer-floor"}
    assert list(floors) == ["floor reader"]  # no reading data: no pre-trained reader to calibrate
    assert f"reader={tmp_path / 'reader'}" in floors["floor reader"] and "data=" in floors["floor reader"]
    names = [name for name, _, _ in plan]
    assert names.index("reader") < names.index("floor reader") < names.index("sft")
    (tmp_path / "squad.json").write_text("{}")
    plan = steps(DemoConfig(root=str(tmp_path), reading_data=str(tmp_path / "squad.json")))
    assert [n for n, stage, _ in plan if stage == "answer-floor"] == ["floor reader"]
    assert "reader_pretrain" in [n for n, _, _ in plan]


def test_every_stage_trains_and_is_evaluated_on_both_domains(tmp_path):
    realmem = tmp_path / "realmem"
    realmem.mkdir()
    more = [{"name": "realmem", "data_path": str(realmem), "label_config": "configs/label/realmem_demo.yaml"}]
    cfg = DemoConfig(root=str(tmp_path), more_data=more, main_router="reader")
    plan = {name: args for name, _, args in steps(cfg)}
    assert f"output_dir={tmp_path / 'label_realmem'}" in plan["label realmem"]
    both = "data=" + json.dumps([str(tmp_path / "label" / "dataset"), str(tmp_path / "label_realmem" / "dataset")])
    for name in ("reader", "sft", "grpo", "features", "top1", "calibrate reader", "calibrate features"):
        assert both in plan[name], name
    assert both in eval_args(cfg)
    absent = DemoConfig(root=str(tmp_path), more_data=[{**more[0], "data_path": str(tmp_path / "none")}])
    plan = {name: args for name, _, args in steps(absent)}
    assert "label realmem" not in plan and f"data={tmp_path / 'label' / 'dataset'}" in plan["sft"]


def test_the_features_router_is_the_main_row_when_the_choice_serves_it(tmp_path):
    cfg = DemoConfig(root=str(tmp_path), stages=["label", "reader", "features", "calibrate", "eval"], more_data=[])
    _scores(tmp_path, "features", lambda d, i, y: (1.0 if y else 0.0))
    _scores(tmp_path, "reader", lambda d, i, y: float(i % 5))
    args = eval_args(cfg)
    assert "router.kind=features" in args and f"router.path={tmp_path / 'features'}" in args
    compare = json.loads(next(a for a in args if a.startswith("compare="))[len("compare="):])
    assert [c["name"] for c in compare][:2] == ["reader", "top1-score"]  # then the recorded teacher, if judged


def test_main_router_is_best_or_a_trained_router():
    assert set(choices_of(get_type_hints(DemoConfig)["main_router"])) == {"best", *MAIN_CANDIDATES}
    with pytest.raises(ConfigError, match="main_router must be one of .*got 'features'"):
        DemoConfig(main_router="features")
