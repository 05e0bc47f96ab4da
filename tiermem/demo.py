"""`make demo`: label -> sft -> grpo -> calibrate -> eval on the embedded default, one stage after another.

Each stage is the same `main(argv)` that `tiermem-router <stage>` runs, pointed at one run folder, so the demo
proves the real commands work together. Stage outputs are resumable/reused where the stage supports it.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tiermem.config import parse_cli


@dataclass
class DemoConfig:
    root: str = "runs"
    data_path: str | None = "../shared/data/locomo10_dev.json"  # falls back to the shipped sample when absent
    label_config: str = "configs/label/locomo_local.yaml"
    sample_label_config: str = "configs/label/sample_local.yaml"
    sft_config: str = "configs/sft/smollm2_135m_cpu.yaml"
    grpo_config: str = "configs/grpo/smollm2_135m_cpu.yaml"
    calibrate_config: str = "configs/calibrate/default.yaml"
    eval_config: str = "configs/eval/default.yaml"
    stages: list[str] = field(default_factory=lambda: ["label", "sft", "grpo", "calibrate", "eval"])
    # extra key=value overrides per stage, e.g. {"sft": ["trainer.max_steps=10"]}
    overrides: dict[str, list[str]] = field(default_factory=dict)


def stage_argv(cfg: DemoConfig) -> dict[str, list[str]]:
    root = Path(cfg.root)
    label, dataset = root / "label", root / "label" / "dataset"
    if cfg.data_path and Path(cfg.data_path).is_file():
        label_args = ["--config", cfg.label_config, f"data_path={cfg.data_path}"]
    else:
        print(f"demo: no data at {cfg.data_path!r}; labeling the shipped sample conversations instead")
        label_args = ["--config", cfg.sample_label_config]
    return {
        "label": label_args + [f"output_dir={label}"],
        "sft": ["--config", cfg.sft_config, f"dataset_dir={dataset}", f"output_dir={root / 'sft'}"],
        "grpo": ["--config", cfg.grpo_config, f"dataset_dir={dataset}", f"sft_dir={root / 'sft'}",
                 f"output_dir={root / 'grpo'}"],
        "calibrate": ["--config", cfg.calibrate_config, f"router={root / 'grpo'}", f"data={dataset}"],
        "eval": ["--config", cfg.eval_config, f"dataset={dataset}", f"router.path={root / 'grpo'}",
                 f"out_dir={root / 'eval'}"],
    }


def main(argv: list[str]) -> int:
    from tiermem.cli import STAGES

    cfg = parse_cli(DemoConfig, argv, default_config="configs/demo/default.yaml")
    unknown = [s for s in cfg.stages if s not in ("label", "sft", "grpo", "calibrate", "eval")]
    if unknown:
        raise ValueError(f"demo: unknown stage(s) {unknown}")
    argvs = stage_argv(cfg)
    timings: dict[str, float] = {}
    for stage in cfg.stages:
        args = argvs[stage] + cfg.overrides.get(stage, [])
        print(f"\n=== demo: {stage}: tiermem-router {stage} {' '.join(args)}", flush=True)
        module, func = STAGES[stage][0].split(":")
        started = time.perf_counter()
        rc = int(getattr(importlib.import_module(module), func)(args) or 0)
        timings[stage] = round(time.perf_counter() - started, 1)
        if rc != 0:
            print(f"demo: stage {stage} failed with exit code {rc}; later stages not run", file=sys.stderr)
            return rc
    root = Path(cfg.root)
    summary = {"stage_seconds": timings, "total_seconds": round(sum(timings.values()), 1)}
    (root / "demo_timings.json").write_text(json.dumps(summary, indent=2))
    print("\n=== demo: artefacts")
    for name, path in [("labeled dataset", root / "label" / "dataset"), ("label report", root / "label" / "report.md"),
                       ("SFT adapter", root / "sft"), ("GRPO adapter (calibrated)", root / "grpo"),
                       ("eval table", root / "eval" / "eval.md"), ("eval JSON", root / "eval" / "eval.json"),
                       ("trade-off plot", root / "eval" / "eval.png")]:
        print(f"  {name:<26} {path}{'' if path.exists() else '  (missing)'}")
    table = root / "eval" / "eval.md"
    if table.is_file():
        print("\n" + table.read_text())
    print(f"stage seconds: {timings}  total: {summary['total_seconds']} s")
    return 0
