"""`make bench`: router decision paths, server latency, labeling cache, training step time; ratios side by side.

    python benchmarks/run.py [--config configs/bench/default.yaml] [router.n_prompts=8] [training.enabled=false]

Each section prints its absolute figures under a machine label and the ratios measured in this same
run; everything is also written to `output_dir/bench.json`. Sizes are configurable; the defaults keep
the whole run under ~15 minutes on 2 CPU cores.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script (`python benchmarks/run.py`): make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.ask_bench import AskBenchConfig  # noqa: E402
from benchmarks.common import machine_label, machine_line  # noqa: E402
from benchmarks.labeling_bench import LabelingBenchConfig, RayBenchConfig, ThroughputBenchConfig  # noqa: E402
from benchmarks.reader_bench import ReaderBenchConfig  # noqa: E402
from benchmarks.router_bench import RouterBenchConfig  # noqa: E402
from benchmarks.server_bench import ServerBenchConfig  # noqa: E402
from benchmarks.training_bench import TrainingBenchConfig  # noqa: E402
from tiermem.runs.rundir import RunDirError, claimed_output_dir  # noqa: E402
from tiermem.runs.safe_io import write_atomic  # noqa: E402
from tiermem.settings.config import ConfigError, parse_cli  # noqa: E402
from tiermem.settings.errors import HelpShown  # noqa: E402

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "bench" / "default.yaml"


@dataclass
class BenchConfig:
    output_dir: str = "runs/bench"
    threads: int | None = None  # torch threads; None: the cores really available
    router: RouterBenchConfig = field(default_factory=RouterBenchConfig)
    reader: ReaderBenchConfig = field(default_factory=ReaderBenchConfig)
    server: ServerBenchConfig = field(default_factory=ServerBenchConfig)
    ask: AskBenchConfig = field(default_factory=AskBenchConfig)
    labeling: LabelingBenchConfig = field(default_factory=LabelingBenchConfig)
    labeling_throughput: ThroughputBenchConfig = field(default_factory=ThroughputBenchConfig)
    labeling_ray: RayBenchConfig = field(default_factory=RayBenchConfig)
    training: TrainingBenchConfig = field(default_factory=TrainingBenchConfig)


def _section(name: str, fn: Any, cfg: Any) -> dict[str, Any]:
    print(f"\n=== {name} ===", flush=True)
    start = time.perf_counter()
    try:
        result = fn(cfg)
    except ModuleNotFoundError as exc:  # a stage this checkout does not have yet: say so, measure nothing
        result = {"skipped": f"module missing: {exc.name}"}
    except Exception as exc:  # one failing benchmark must not hide the others' figures
        traceback.print_exc()
        result = {"failed": f"{type(exc).__name__}: {exc}"}
    result["section_wall_s"] = round(time.perf_counter() - start, 1)
    print(result.get("text") or f"{name}: {result.get('skipped') or result.get('failed')}", flush=True)
    return result


def run(cfg: BenchConfig) -> dict[str, Any]:
    # Claimed before any section runs: the sections' own runs go in subdirectories, bench.json at the top.
    with claimed_output_dir(cfg.output_dir, "bench"):
        return _run(cfg)


def _run(cfg: BenchConfig) -> dict[str, Any]:
    from benchmarks import ask_bench, labeling_bench, reader_bench, router_bench, server_bench, training_bench
    from tiermem.models.specs import setup_cpu_threads

    setup_cpu_threads(cfg.threads)
    machine = machine_label()
    print(machine_line(machine), flush=True)
    report: dict[str, Any] = {"machine": machine, "config": json.loads(json.dumps(cfg, default=vars))}
    sections = (("router decision", router_bench.run, cfg.router),
                ("unit reader vs one forward pass of the sequence router", reader_bench.run, cfg.reader),
                ("server: /route latency, 1 and N clients, and during a chat request", server_bench.run, cfg.server),
                ("server: /ask warm (the memory runtime), p50 / p95", ask_bench.run, cfg.ask),
                ("labeling: first run vs cached rerun", labeling_bench.run, cfg.labeling),
                ("labeling throughput: generator-free, 1 process vs 2 shards", labeling_bench.throughput,
                 cfg.labeling_throughput),
                ("labeling on Ray: N shards vs one process, same data", labeling_bench.on_ray, cfg.labeling_ray),
                ("training: seconds per step, CPU-aware vs TRL defaults", training_bench.run, cfg.training))
    for name, fn, sub in sections:
        if getattr(sub, "enabled", True):
            report[name] = _section(name, fn, sub)
        else:
            report[name] = {"skipped": "disabled in config"}
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "bench.json", json.dumps(report, indent=2, default=str) + "\n")  # never through a link
    print(f"\n{machine_line(machine)}\nresults: {out / 'bench.json'}")
    return report


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_cli(BenchConfig, list(sys.argv[1:] if argv is None else argv), default_config=DEFAULT_CONFIG)
    except HelpShown as shown:  # `make bench ARGS=--help`: every key with its default and help text, as each stage
        # not a tiermem-router stage: the usage line names how the bench is really run
        print(shown.render("bench").replace("tiermem-router bench", "python benchmarks/run.py", 1))
        return 0
    except (ConfigError, FileNotFoundError) as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 2
    try:
        report = run(cfg)
    except RunDirError as exc:
        print(f"bench: error: RunDirError: {exc}", file=sys.stderr)
        return RunDirError.exit_code
    return 1 if any(isinstance(v, dict) and "failed" in v for v in report.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
