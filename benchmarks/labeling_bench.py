"""Labeling: a first run vs a rerun of the same subset.

Run 1 labels a small subset from scratch (empty output dir, empty LLM cache, no tiers). Run 2 labels the
same subset into a fresh output dir but with run 1's LLM response cache and tier cache, so every LLM call
should be a cache hit: the ratio is what the cache saves. Run 3 restarts run 2 in place (resume: every
record is already committed). The LLM call counters of each run are printed so a cache that silently
missed would show.
"""

from __future__ import annotations

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


def _label_config_path(cfg: LabelingBenchConfig) -> Path:
    if cfg.config:
        return Path(cfg.config)
    root = Path(__file__).resolve().parents[1] / "configs" / "label"
    from tiermem.config import load_yaml

    locomo = root / "locomo_local.yaml"
    data = load_yaml(locomo).get("data_path")
    return locomo if data and Path(data).is_file() else root / "sample_local.yaml"


def run(cfg: LabelingBenchConfig) -> dict[str, Any]:
    from labeling.config import LabelConfig
    from labeling.run import run as label_run
    from tiermem.config import parse_config

    path = _label_config_path(cfg)
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
