"""Labeling: a first run vs a rerun of the same subset.

Run 1 labels a small subset from scratch (empty output dir, empty LLM cache, no tiers). Run 2 labels the
same subset into a fresh output dir but with run 1's LLM response cache and tier cache, so every LLM call
should be a cache hit: the ratio is what the cache saves. Run 3 restarts run 2 in place (resume: every
record is already committed). The LLM call counters of each run are printed so a cache that silently
missed would show.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import PeakRSS, ratio, table


@dataclass
class LabelingBenchConfig:
    enabled: bool = True
    config: str | None = None  # a label config; None: configs/label/locomo_local.yaml with the shared file,
    #                            else configs/label/sample_local.yaml (the shipped sample)
    max_conversations: int = 1
    max_questions: int = 4
    output_dir: str = "runs/bench/labeling"


def _label_config_path(given: str | None, preferred: str = "locomo_local.yaml") -> Path:
    """`given`, else configs/label/<preferred> when its data file is on this machine, else sample_local.yaml."""
    if given:
        return Path(given)
    root = Path(__file__).resolve().parents[1] / "configs" / "label"
    from tiermem.settings.config import load_yaml

    locomo = root / preferred
    data = load_yaml(locomo).get("data_path")
    return locomo if data and Path(data).is_file() else root / "sample_local.yaml"


def run(cfg: LabelingBenchConfig) -> dict[str, Any]:
    from labeling.config import LabelConfig
    from labeling.run import run as label_run
    from tiermem.settings.config import parse_config

    path = _label_config_path(cfg.config)
    out = Path(cfg.output_dir)
    if out.exists():
        shutil.rmtree(out)  # run 1 must start cold: our own scratch directory
    common = [f"max_conversations={cfg.max_conversations}", f"max_questions_per_conversation={cfg.max_questions}",
              f"tiers_dir={out / 'tiers'}", f"llm_cache={out / 'llm_cache.sqlite'}"]
    runs = {"first": out / "first", "cached_rerun": out / "rerun", "resume": out / "rerun"}
    results: dict[str, Any] = {}
    for name, run_dir in runs.items():
        lc = parse_config(LabelConfig, path, common + [f"output_dir={run_dir}"])
        with PeakRSS() as mem:
            start = time.perf_counter()
            stats = label_run(lc)
            wall = time.perf_counter() - start
        llm = stats.get("llm", {})
        results[name] = {"wall_s": wall, "records": stats.get("records"), "new_records": stats.get("new_records"),
                         "resumed_records": stats.get("resumed_records"), "errors": stats.get("errors"),
                         "llm": llm, "peak_rss_extra_mb": mem.extra_mb}
    rows = []
    for name, r in results.items():
        calls = _sum_llm(r["llm"])
        rows.append([name, r["wall_s"], r["records"], r["new_records"], calls.get("new_calls"),
                     calls.get("cache_hits"), r["errors"]])
    ratios = {
        "first / cached rerun wall time": ratio(results["first"]["wall_s"], results["cached_rerun"]["wall_s"]),
        "first / resume wall time": ratio(results["first"]["wall_s"], results["resume"]["wall_s"]),
    }
    rerun_calls = _sum_llm(results["cached_rerun"]["llm"]).get("new_calls")
    text = "\n".join([
        f"label config: {path}; subset: {cfg.max_conversations} conversation(s) x {cfg.max_questions} questions",
        table(["run", "wall s", "records", "new records", "new LLM calls", "cache hits", "errors"], rows),
        "",
        table(["ratio (measured in this run)", "x"], [[k, v] for k, v in ratios.items()]),
        f"cached rerun made {rerun_calls} new LLM call(s)" + (" (expected 0)" if rerun_calls else ""),
    ])
    return {"label_config": str(path), "runs": results, "ratios": ratios, "text": text}


def _sum_llm(llm: dict[str, Any]) -> dict[str, int]:
    """Roles' counters summed (stats['llm'] maps role -> counters, or is already flat)."""
    if all(isinstance(v, (int, float)) for v in llm.values()):
        return {k: int(v) for k, v in llm.items()}
    total: dict[str, int] = {}
    for counters in llm.values():
        if isinstance(counters, dict):
            for k, v in counters.items():
                if isinstance(v, (int, float)):
                    total[k] = total.get(k, 0) + int(v)
    return total


# ---- throughput: generator-free labeling, 1 and 2 shards ------------------------------------------------------


@dataclass
class ThroughputBenchConfig:
    enabled: bool = True
    config: str = "configs/label/locomo_cpu_evidence.yaml"  # generator-free (the evidence rule): no LLM calls
    max_conversations: int | None = None  # None: every conversation of the config's data file
    output_dir: str = "runs/bench/throughput"


class _Timers:
    """Exclusive wall time inside named functions of one process: time in a timed call made from another timed
    call counts for the inner name only (embedding inside tier building is embedding)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._children: list[float] = []  # per active timed call: its timed children's total time
        self._undo: list[Any] = []

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        original = owner.__dict__[attr]
        func = original.__func__ if isinstance(original, classmethod) else original

        def timed(*args: Any, **kwargs: Any) -> Any:
            self._children.append(0.0)
            start = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                inner = self._children.pop()
                self.seconds[name] = self.seconds.get(name, 0.0) + elapsed - inner
                if self._children:
                    self._children[-1] += elapsed

        setattr(owner, attr, classmethod(timed) if isinstance(original, classmethod) else timed)
        self._undo.append((owner, attr, original))

    def restore(self) -> None:
        for owner, attr, original in reversed(self._undo):
            setattr(owner, attr, original)


def _label_cli(args: list[str]) -> list[str]:
    import sys

    return [sys.executable, "-m", "tiermem_cli.cli", *args]


def throughput(cfg: ThroughputBenchConfig) -> dict[str, Any]:
    """Questions per second of generator-free labeling: one process, two shard processes side by side (then
    label-merge), and where one process's time goes (tier building, embedding, retrieval, the rest)."""
    import os
    import subprocess

    from labeling.config import LabelConfig
    from labeling.run import run as label_run
    from tiermem.memory import runtime as memory_runtime
    from tiermem.memory import summaries
    from tiermem.settings.config import load_yaml, parse_config

    data = load_yaml(Path(cfg.config)).get("data_path")
    if data and not Path(data).is_file():
        return {"skipped": f"{cfg.config} labels {data}, which this machine does not have"}
    out = Path(cfg.output_dir)
    if out.exists():
        shutil.rmtree(out)  # every run starts cold (no tiers): our own scratch directory
    common = ["--config", cfg.config, "minimal_pairs.enabled=false",
              *([f"max_conversations={cfg.max_conversations}"] if cfg.max_conversations else [])]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    results: dict[str, Any] = {}

    # where the time goes: one in-process run with timers on the memory's entry points
    timers = _Timers()
    timers.wrap(memory_runtime.MemoryRuntime, "open_or_build", "tier building")
    timers.wrap(summaries.SummaryIndex, "embed", "embedding")
    timers.wrap(summaries.SummaryIndex, "search_vector", "retrieval")
    try:
        lc = parse_config(LabelConfig, Path(cfg.config), [*common[2:], f"output_dir={out / 'profiled'}"])
        start = time.perf_counter()
        stats = label_run(lc)
        wall = time.perf_counter() - start
    finally:
        timers.restore()
    parts = dict(timers.seconds)
    results["profiled"] = {"wall_s": wall, "questions": stats["records"], "seconds": parts}

    for shards in (1, 2):
        root = out / f"{shards}_shard{'s' if shards > 1 else ''}"
        start = time.perf_counter()
        if shards == 1:
            procs = [subprocess.Popen(_label_cli(["label", *common, f"output_dir={root}"]), env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)]
        else:
            procs = [subprocess.Popen(_label_cli(["label", *common, f"output_dir={root}", f"shard={i}/{shards}"]),
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                     for i in range(shards)]
        errors = [p.communicate()[1] for p in procs]
        if any(p.returncode for p in procs):
            raise RuntimeError(f"labeling with {shards} shard(s) failed: {errors[0][-2000:]}")
        label_s = time.perf_counter() - start
        if shards > 1:
            merged = subprocess.run(_label_cli(["label-merge", *common, f"output_dir={root}"]), env=env,
                                    capture_output=True, text=True)
            if merged.returncode:
                raise RuntimeError(f"label-merge failed: {merged.stderr[-2000:]}")
        wall = time.perf_counter() - start
        n = json.loads((root / "stats.json").read_text())["records"]
        results[f"{shards} shard(s)"] = {"questions": n, "label_wall_s": label_s, "wall_s": wall,
                                        "questions_per_s": n / wall}
    one, two = results["1 shard(s)"], results["2 shard(s)"]
    rows = [[k, r["questions"], r["wall_s"], r["questions_per_s"]] for k, r in results.items() if "shard" in k]
    prof = results["profiled"]
    tiers, embed, retrieval = (parts.get(k, 0.0) for k in ("tier building", "embedding", "retrieval"))
    breakdown = [["tier building (pages, summary units; not their embedding)", tiers],
                 ["embedding (summary units and questions)", embed],
                 ["retrieval (vector search)", retrieval],
                 ["the rest (models, evidence rule, token counts, records)",
                  prof["wall_s"] - tiers - embed - retrieval]]
    ratios = {"2 shards / 1 process questions per second": ratio(two["questions_per_s"], one["questions_per_s"])}
    text = "\n".join([
        f"label config: {cfg.config} (generator-free), minimal pairs off; every run cold (no tier cache); "
        "process start and model loading included",
        table(["run", "questions", "wall s", "questions/s"], rows),
        "",
        f"where one in-process run's {prof['wall_s']:.1f} s go ({prof['questions']} questions):",
        table(["part", "s"], breakdown),
        "",
        table(["ratio (measured in this run)", "x"], [[k, v] for k, v in ratios.items()]),
    ])
    return {"config": cfg.config, "runs": results, "ratios": ratios, "text": text}


# ---- Ray: label executor=ray shards=2 vs one process, on the same data ---------------------------------------------


@dataclass
class RayBenchConfig:
    enabled: bool = True
    # a label config; None: configs/label/locomo_cpu_evidence.yaml when its data file is on this machine, else
    # configs/label/sample_local.yaml (the sample shipped in the package)
    config: str | None = None
    max_conversations: int | None = 2  # the conversations both runs label; None: every one of the config's data
    shards: int = 2  # Ray tasks (`label executor=ray shards=N`), on a local cluster of every core
    output_dir: str = "runs/bench/ray"


def _timed_label(args: list[str]) -> tuple[float, str]:
    """Wall time of `tiermem-router label ...` in a process of its own (start and model loading included)."""
    import os
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    start = time.perf_counter()
    done = subprocess.run(_label_cli(["label", *args]), env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"tiermem-router label {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return wall, done.stdout


def on_ray(cfg: RayBenchConfig) -> dict[str, Any]:
    """Wall time of `label executor=ray shards=N` (a local Ray cluster started and stopped by the command, N shard
    tasks, the merge) over a one-process `label` of the same conversations, both cold; the datasets must match."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        return {"skipped": "Ray is not installed: pip install -e '.[ray]' (make bench installs it)"}
    path = _label_config_path(cfg.config, "locomo_cpu_evidence.yaml")
    out = Path(cfg.output_dir)
    if out.exists():
        shutil.rmtree(out)  # both runs start cold (no tiers): our own scratch directory
    common = ["--config", str(path), "minimal_pairs.enabled=false",
              *([f"max_conversations={cfg.max_conversations}"] if cfg.max_conversations else [])]
    one_s, _ = _timed_label([*common, f"output_dir={out / 'one_process'}"])
    ray_s, printed = _timed_label([*common, f"output_dir={out / 'ray'}", "executor=ray", f"shards={cfg.shards}"])
    strip = ("label_wall_s", "cost_summary_wall_s", "cost_research_wall_s")
    records = {name: [{k: v for k, v in json.loads(line).items() if k not in strip}
                      for line in (out / name / "all_records.jsonl").read_text().splitlines()]
               for name in ("one_process", "ray")}
    labels = {name: [(r["conv_id"], r["qid"], r.get("augmentation"), r["label"]) for r in recs]
              for name, recs in records.items()}
    if labels["ray"] != labels["one_process"]:
        raise RuntimeError(f"the Ray run's records differ from the one-process run's ({out}): not the same data")
    n = len(records["ray"])
    # a task's BLAS threads are ray_cpus_per_task: a neural embedder's scores may differ in the last bits
    # (docs/labeling.md, "On Ray"); the labels may not
    same = sum(a == b for a, b in zip(records["ray"], records["one_process"], strict=True))
    ratios = {f"{cfg.shards} shards on Ray / 1 process wall time": ratio(ray_s, one_s)}
    text = "\n".join([
        f"label config: {path}, minimal pairs off, {cfg.max_conversations or 'all'} conversation(s): {n} questions, "
        f"the same labels in both runs ({same} of {n} records byte-equal); each a cold `tiermem-router label` "
        "process (start, model loading, for Ray the local cluster's start and stop and the merge included)",
        table(["run", "questions", "wall s", "questions/s"],
              [["1 process", n, one_s, n / one_s], [f"Ray, {cfg.shards} shards", n, ray_s, n / ray_s]]),
        *[line for line in printed.splitlines() if line.startswith("shard ")],
        "",
        table(["ratio (measured in this run)", "x"], [[k, v] for k, v in ratios.items()]),
    ])
    return {"config": str(path), "questions": n, "records_byte_equal": same, "one_process_wall_s": one_s,
            "ray_wall_s": ray_s,
            "ratios": ratios, "text": text}
