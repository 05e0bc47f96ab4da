"""`make demo`: the main job on the embedded default, one real stage command after another, each the same
`main(argv)` as `tiermem-router <stage>`, on every domain (docs/DESIGN.md, the stage table's `demo` row)."""

from __future__ import annotations

import importlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tiermem.runs.rundir import claimed_output_dir
from tiermem.runs.safe_io import write_atomic
from tiermem.settings.config import check_declared, parse_cli
from tiermem.settings.errors import ConfigError, UsageError
from tiermem_cli.steps import STEPS

LM_ROUTERS = ("sft", "grpo")
TIMINGS_FILE = "demo_timings.json"  # stage seconds, the total and the printed table
# the routers the main row is chosen among (step name -> router kind), in step order
MAIN_CANDIDATES = {"reader": "unit-reader", **{n: "local" for n in LM_ROUTERS}}


@dataclass
class DemoConfig:
    root: str = "runs"
    data_path: str | None = "../shared/data/locomo10_dev.json"  # falls back to the shipped sample when absent
    label_config: str = "configs/label/locomo_cpu_evidence.yaml"
    # careful-reading judgments of data_path's questions (labeling/judgments/): eval scores every router against
    # them beside the labels and shows the recorded teacher as a row. Absent (or the sample labeled) -> no such rows
    judgments: str | None = "../shared/data/locomo10_dev_judgments.jsonl"
    # true: label with the judgments too (their summary verdicts, unit verdicts, spans and teacher decisions where
    # the units match). Off by default: routers trained on the judged labels ranked the test split below the lexical
    # ones against these very judgments (docs/results.md, 2026-12-04)
    judged_labels: bool = False
    # careful-reading verdicts eval checks the labels and every router against, per domain (labeling/judgments/
    # verdicts.py); an absent file is left out
    verdicts: list[str] = field(default_factory=lambda: [
        "../shared/data/locomo10_dev_judgments.jsonl", "../shared/data/realmem_verdicts/verdicts.jsonl"])
    sample_label_config: str = "configs/label/sample_local.yaml"
    # public reading data for the reader's pre-training (SQuAD 2.0 JSON or hf:<name>); absent -> the reader starts
    # from the plain packaged encoder, and the demo says so
    reading_data: str = "../shared/data/squad2_dev_half.json"
    # chat reading data beside it (reader-pretrain chat_data: molweni:<file> | friendsqa:<file>); an absent file is
    # left out, and the demo says so
    chat_reading_data: list[str] = field(default_factory=lambda: [
        "molweni:../shared/data/molweni_mrc_test.json", "friendsqa:../shared/data/friendsqa_dev.json",
        "friendsqa:../shared/data/friendsqa_tst.json"])
    reader_pretrain_config: str = "configs/reader_pretrain/default.yaml"
    reader_config: str = "configs/unit_reader/default.yaml"
    sft_config: str = "configs/sft/smollm2_135m_cpu.yaml"
    grpo_config: str = "configs/grpo/smollm2_135m_cpu.yaml"
    features_config: str = "configs/features/default.yaml"
    calibrate_config: str = "configs/calibrate/default.yaml"
    eval_config: str = "configs/eval/default.yaml"
    # the eval table's main row (the others are compared against it): a trained router's step name (reader or an
    # LM router), or `best`: the one main_choice serves (needs every router calibrated)
    main_router: Literal["best", "reader", "sft", "grpo"] = "best"
    # more labeled domains beside data_path's: each {name, data_path, label_config}, labeled into <root>/label_<name>;
    # every router trains, is chosen and is evaluated on all of them (`data: [a, b]`). An absent data_path is left
    # out, and the demo says so
    more_data: list[dict[str, str]] = field(default_factory=lambda: [
        {"name": "realmem", "data_path": "../shared/data/realmem", "label_config": "configs/label/realmem_demo.yaml"}])
    stages: list[str] = field(default_factory=lambda: list(STEPS))
    # extra key=value overrides per stage, e.g. {"sft": ["trainer.num_train_epochs=1"]}
    overrides: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_declared(self)
        unknown = [s for s in self.stages if s not in STEPS]
        if unknown:
            raise ConfigError(f"demo: unknown stage(s) {unknown}; stages are {STEPS}")
        if not self.stages:  # it would run nothing and write timings as if it had
            raise ConfigError(f"demo: stages is empty; name at least one of {STEPS}")
        repeated = sorted({s for s in self.stages if self.stages.count(s) > 1})
        if repeated:  # each step runs once, in the pipeline's order, however often it is named
            raise ConfigError(f"demo: stage(s) {repeated} listed more than once; each runs once, in the order {STEPS}")
        names = []
        for i, extra in enumerate(self.more_data):
            if not isinstance(extra, dict) or sorted(extra) != ["data_path", "label_config", "name"] or not all(
                    isinstance(v, str) and v.strip() for v in extra.values()):
                raise ConfigError(f"demo: more_data[{i}] must be {{name, data_path, label_config}} (strings), got "
                                  f"{extra!r}")
            if not extra["name"].isidentifier():
                raise ConfigError(f"demo: more_data[{i}].name must be a plain name (it names label_<name>), got "
                                  f"{extra['name']!r}")
            names.append(extra["name"])
        if len(set(names)) != len(names):
            raise ConfigError(f"demo: more_data names repeat: {names}")


def trained_routers(cfg: DemoConfig) -> list[str]:
    """The routers this demo trains that can be the main row (the reader, then the LM routers), in step order."""
    return [n for n in MAIN_CANDIDATES if n in cfg.stages]


def extra_domains(cfg: DemoConfig) -> list[dict[str, str]]:
    present = [d for d in cfg.more_data if Path(d["data_path"]).exists()]
    for d in cfg.more_data:
        if d not in present:
            print(f"demo: no data at {d['data_path']!r}; domain {d['name']!r} left out")
    return present


def label_datasets(cfg: DemoConfig) -> list[str]:
    root = Path(cfg.root)
    return [str(root / "label" / "dataset"), *(str(root / f"label_{d['name']}" / "dataset")
                                               for d in extra_domains(cfg))]


def data_arg(datasets: list[str]) -> str:
    """`data=` for every stage: one path as it was, several as a list (JSON, which the override reads as YAML)."""
    return f"data={datasets[0]}" if len(datasets) == 1 else "data=" + json.dumps(datasets)


def pick_main_router(cfg: DemoConfig) -> str:
    """`main_router`, or for `best` the one main_choice serves (best worst-domain out-of-fold AUROC, else the
    features router): every trained router and the features router must have been calibrated."""
    from evaluation.calibrate import SCORES_FILE
    from tiermem_cli.main_choice import choice_table, choose_main

    if cfg.main_router != "best":
        return cfg.main_router
    root = Path(cfg.root)
    trained = [n for n in trained_routers(cfg) or list(MAIN_CANDIDATES) if (root / n).is_dir()]  # eval alone: any
    uncalibrated = [n for n in [*trained, "features"] if not (root / n / SCORES_FILE).is_file()]
    if uncalibrated:
        raise UsageError(f"demo: main_router=best needs every router calibrated (stage calibrate); {uncalibrated} "
                         f"under {root} are not; or set main_router to one of {tuple(MAIN_CANDIDATES)}")
    choice = choose_main(root, trained)
    print(f"demo: main router {choice['served']!r}: {choice['reason']} (out-of-fold, per domain)\n"
          + choice_table(choice))
    return choice["served"]


def judgments_path(cfg: DemoConfig) -> str | None:
    """The judgments the demo reads: only beside the conversations they judged, and only when the file is there."""
    labeled_data = cfg.data_path and Path(cfg.data_path).is_file()
    return cfg.judgments if labeled_data and cfg.judgments and Path(cfg.judgments).is_file() else None


def eval_args(cfg: DemoConfig) -> list[str]:
    root = Path(cfg.root)
    main_name = pick_main_router(cfg)
    kinds = {**MAIN_CANDIDATES, "features": "features"}
    others = [n for n in (trained_routers(cfg) or list(MAIN_CANDIDATES)) if n != main_name and (root / n).is_dir()]
    row = {n: "routed" if n == main_name else n for n in MAIN_CANDIDATES}
    pairs = [[row["grpo"], row["sft"]]] if all((root / n).is_dir() for n in ("grpo", "sft")) and {
        "grpo", "sft"} <= set(trained_routers(cfg) or MAIN_CANDIDATES) else []
    judged = judgments_path(cfg)
    teacher = [{"name": "teacher", "kind": "recorded-teacher", "path": judged}] if judged else []
    baselines = [n for n in ("features",) if n != main_name]  # the features router may be the main row itself
    return ["--config", cfg.eval_config, data_arg(label_datasets(cfg)),
            f"router.kind={kinds[main_name]}", f"router.path={root / main_name}", f"router.name={main_name}",
            f"output_dir={root / 'eval'}", "pairs=" + json.dumps(pairs), "compare=" + json.dumps(
                [{"name": n, "kind": MAIN_CANDIDATES[n], "path": str(root / n)} for n in others]
                + [{"name": n, "kind": n, "path": str(root / n)} for n in baselines]
                + [{"name": "top1-score", "kind": "top1-score", "path": str(root / "top1")}] + teacher),
            *([f"judgments={judged}"] if judged else []),
            *([f"verdicts={json.dumps(found)}"] if (found := [v for v in cfg.verdicts if Path(v).is_file()]) else [])]


def steps(cfg: DemoConfig) -> list[tuple[str, str, list[str] | None]]:
    """(step name, CLI stage, argv) in order; a step's overrides from cfg.overrides are appended. The eval step's
    argv is None here: it names the main router, which is chosen once the routers are trained (eval_args)."""
    root = Path(cfg.root)
    data = data_arg(label_datasets(cfg))
    trunk_states = root / "sft" / "trunk_states.pt"  # SFT's frozen trunk's states, which GRPO reads
    if cfg.data_path and Path(cfg.data_path).is_file():
        judged = judgments_path(cfg)
        if cfg.judgments and not judged:
            print(f"demo: no judgments at {cfg.judgments!r}; eval shows no judged rows")
        label_args = ["--config", cfg.label_config, f"data_path={cfg.data_path}",
                      *([f"judgments={judged}"] if judged and cfg.judged_labels else [])]
    else:
        print(f"demo: no data at {cfg.data_path!r}; labeling the shipped sample conversations instead")
        label_args = ["--config", cfg.sample_label_config]
    grpo_from = root / "sft"  # GRPO refines the SFT router (configs/grpo: router runs/sft)
    pretrained = "reader_pretrain" in cfg.stages and (cfg.reading_data.startswith("hf:")
                                                      or Path(cfg.reading_data).is_file())
    if "reader_pretrain" in cfg.stages and not pretrained:
        print(f"demo: no reading data at {cfg.reading_data!r}; the reader starts from the plain packaged encoder "
              "(no pre-training: expect it to read at chance)")
    reader_base = root / "reader_pretrain" if pretrained else "packaged:all-minilm-l6-v2"
    chat = [c for c in cfg.chat_reading_data if Path(c.partition(":")[2]).is_file()]
    if pretrained and len(chat) < len(cfg.chat_reading_data):
        print(f"demo: chat reading data not found, left out of the pre-training: "
              f"{[c for c in cfg.chat_reading_data if c not in chat]}")
    # ask's "not stated" floor, calibrated on chat questions for the reader the demo serves: it answers `ask` with
    # no manual step; skipped while the reader's weights and the settings are unchanged
    chats = ([f"data={cfg.data_path}"] if cfg.data_path and Path(cfg.data_path).is_file()
             else ["data=", "conversations=[]"])
    out: dict[str, list[tuple[str, str, list[str] | None]]] = {
        "label": [("label", "label", label_args + [f"output_dir={root / 'label'}"])] + [
            (f"label {d['name']}", "label", ["--config", d["label_config"], f"data_path={d['data_path']}",
                                             f"output_dir={root / ('label_' + d['name'])}"])
            for d in extra_domains(cfg)],
        "reader_pretrain": [("reader_pretrain", "reader-pretrain", [
            "--config", cfg.reader_pretrain_config, f"data={cfg.reading_data}", f"chat_data=[{','.join(chat)}]",
            f"output_dir={root / 'reader_pretrain'}"])] if pretrained else [],
        "reader": [("reader", "unit-reader", ["--config", cfg.reader_config, data,
                                              f"base={reader_base}", f"output_dir={root / 'reader'}"]),
                   ("floor reader", "answer-floor", [f"reader={root / 'reader'}", *chats])],
        "sft": [("sft", "sft", ["--config", cfg.sft_config, data, f"output_dir={root / 'sft'}",
                                f"loss.trunk_cache={trunk_states}"])],
        # GRPO's prompts are the starts of SFT's rows: their bottom layers are read from SFT's trunk states
        "grpo": [("grpo", "grpo", ["--config", cfg.grpo_config, data, f"router={grpo_from}",
                                   f"output_dir={root / 'grpo'}", f"trunk_from={trunk_states}"])],
        "features": [
            ("features", "fit-features", ["--config", cfg.features_config, data,
                                          f"output_dir={root / 'features'}"]),
            ("top1", "fit-features", ["kind=top1-score", data, f"output_dir={root / 'top1'}"]),
        ],
        "calibrate": [(f"calibrate {name}", "calibrate", ["--config", cfg.calibrate_config, f"router={root / name}",
                                                          data])
                      for name in (*trained_routers(cfg), "features", "top1")],
        "eval": [("eval", "eval", None)],
    }
    return [(name, stage, None if args is None else args + cfg.overrides.get(step, []))
            for step in STEPS if step in cfg.stages for name, stage, args in out[step]]


def main(argv: list[str]) -> int:
    cfg = parse_cli(DemoConfig, argv, default_config="configs/demo/default.yaml")
    # The root holds each step's run directory (claimed by that step) and TIMINGS_FILE; locking it keeps a
    # second demo from training into the same runs at the same time.
    with claimed_output_dir(cfg.root, "demo"):
        return _run(cfg)


def stage_table(timings: dict[str, float]) -> str:
    """The demo's seconds per step as a markdown table, with the total (what docs/results.md keeps)."""
    total = sum(timings.values())
    lines = ["| step | seconds | share |", "|---|---|---|"]
    lines += [f"| {name} | {sec:,.1f} | {sec / total if total else 0:.0%} |" for name, sec in timings.items()]
    lines.append(f"| total | {total:,.1f} ({int(total // 60)} min {total % 60:.0f} s) | |")
    return "\n".join(lines)


def write_timings(root: Path, timings: dict[str, float], failed: str | None = None) -> dict[str, object]:
    summary: dict[str, object] = {"stage_seconds": timings, "total_seconds": round(sum(timings.values()), 1),
                                  "failed_step": failed, "table": stage_table(timings)}
    write_atomic(root / TIMINGS_FILE, json.dumps(summary, indent=2))
    return summary


def _run(cfg: DemoConfig) -> int:
    from tiermem_cli.cli import STAGES

    root = Path(cfg.root)
    timings: dict[str, float] = {}
    for name, stage, args in steps(cfg):
        if args is None:
            args = eval_args(cfg) + cfg.overrides.get(name, [])
        print(f"\n=== demo: {name}: tiermem-router {stage} {' '.join(args)}", flush=True)
        module, func = STAGES[stage][0].split(":")
        started = time.perf_counter()
        rc = int(getattr(importlib.import_module(module), func)(args) or 0)
        timings[name] = round(time.perf_counter() - started, 1)
        if rc != 0:
            write_timings(root, timings, failed=name)
            print(f"\n=== demo: stage seconds (up to the failed step)\n{stage_table(timings)}", file=sys.stderr)
            print(f"demo: step {name} failed with exit code {rc}; later steps not run", file=sys.stderr)
            return rc
    write_timings(root, timings)
    print("\n=== demo: artefacts")
    from tiermem_cli.main_choice import CHOICE_FILE

    for name, path in [("labeled dataset", root / "label" / "dataset"), ("label report", root / "label" / "report.md"),
                       *[(f"labeled dataset ({d['name']})", root / f"label_{d['name']}" / "dataset")
                         for d in extra_domains(cfg)],
                       ("main router choice", root / CHOICE_FILE),
                       *[(f"{n} router (calibrated)", root / n) for n in (*trained_routers(cfg), "features", "top1")],
                       ("eval table", root / "eval" / "eval.md"), ("eval JSON", root / "eval" / "eval.json"),
                       ("trade-off plot", root / "eval" / "eval.png"), ("stage seconds", root / TIMINGS_FILE)]:
        print(f"  {name:<30} {path}{'' if path.exists() else '  (missing)'}")
    table = root / "eval" / "eval.md"
    if table.is_file():
        print("\n" + table.read_text())
    print(f"=== demo: stage seconds ({root / TIMINGS_FILE})\n{stage_table(timings)}")
    return 0
