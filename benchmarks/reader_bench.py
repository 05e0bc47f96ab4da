"""The unit reader against the sequence router: ms per decision and decisions/s at batch 1 and 8. The unit reader
scores a question's k units as k (question, unit) pairs in one cross-encoder batch plus the signal head; the sequence
router's floor is one LM forward pass over the contract prompt (cached instruction prefix). Same inputs for both."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import PeakRSS, ratio, table, time_call
from benchmarks.router_bench import RouterBenchConfig, load_lm, router_inputs


@dataclass
class ReaderBenchConfig:
    enabled: bool = True
    reader: str | None = "runs/reader"  # a unit-reader run dir; missing or null: the packaged MiniLM untrained
    reader_base: str = "packaged:all-minilm-l6-v2"
    lm_router: str | None = None  # a sequence (local) router run dir; null: the base model below (speed only)
    model: str = "packaged:smollm2-135m-instruct"
    data: str | None = "runs/label/dataset"
    split: str = "test"
    n_prompts: int = 16
    batch_sizes: list[int] = field(default_factory=lambda: [1, 8])
    repeats: int = 3  # median of several runs


def _reader(cfg: ReaderBenchConfig) -> tuple[Any, str]:
    from serving.routers.unit_reader import POOLINGS, CrossEncoder, UnitReaderRouter
    from serving.signals import FEATURES
    from tiermem.models.logistic import LogisticModel
    from tiermem.models.specs import resolve_model

    if cfg.reader and Path(cfg.reader).is_dir():
        return UnitReaderRouter.load(cfg.reader), cfg.reader
    names = [*FEATURES, *POOLINGS["all"]]
    # untrained: a head of unit weights, so the reader runs (text weight 1) and the timing is the real path's (a
    # training range as every fitted head records, wide enough to clip nothing)
    n, wide = len(names), sys.float_info.max
    head = LogisticModel(names, [0.0] * n, [1.0] * n, [1.0] * n, 0.0, 1.0, "balanced", 1, 0.5, [-wide] * n, [wide] * n)
    reader = CrossEncoder.load(resolve_model(cfg.reader_base))
    return UnitReaderRouter(reader, head, "all", 1.0), f"{cfg.reader_base} (untrained: speed only)"


def run(cfg: ReaderBenchConfig) -> dict[str, Any]:
    from serving.routers.local import LocalRouter

    questions, summaries, source = router_inputs(RouterBenchConfig(data=cfg.data, split=cfg.split,
                                                                   n_prompts=cfg.n_prompts))
    with PeakRSS() as reader_mem:
        unit_reader, reader_name = _reader(cfg)
    with PeakRSS() as lm_mem:
        model, tokenizer, meta, lm_name = load_lm(cfg.lm_router, cfg.model)
    rows, results = [], {}
    for bs in cfg.batch_sizes:
        # a sequence router without its signal head: the LM forward pass alone, the floor of its contract
        lm = LocalRouter(model, tokenizer, meta=meta, prefix_cache=True, batch_size=bs)
        candidates = {"unit reader": unit_reader, "sequence router (one forward pass)": lm}
        for name, router in candidates.items():
            def call(router: Any = router, bs: int = bs) -> list[Any]:
                out = []
                for i in range(0, len(questions), bs):
                    out += router.route_batch(questions[i: i + bs], summaries[i: i + bs])
                return out

            call()  # warm-up: lazy init and allocator growth
            timing, _ = time_call(call, repeats=cfg.repeats)
            ms = timing.median / len(questions) * 1000
            key = f"{name} @bs{bs}"
            results[key] = {"ms_per_decision": ms, "decisions_per_s": 1000.0 / ms if ms else None, "batch_size": bs}
            rows.append([key, ms, results[key]["decisions_per_s"]])
    ratios = {f"sequence / unit reader @bs{bs}": ratio(
        results[f"sequence router (one forward pass) @bs{bs}"]["ms_per_decision"],
        results[f"unit reader @bs{bs}"]["ms_per_decision"]) for bs in cfg.batch_sizes}
    units = sum(len(s) for s in summaries) / len(summaries)
    text = "\n".join([
        f"unit reader: {reader_name}; sequence router: {lm_name}; {len(questions)} questions from {source}, "
        f"{units:.1f} units each",
        table(["variant", "ms/decision", "decisions/s"], rows), "",
        table(["ratio (measured in this run)", "x"], [[k, v] for k, v in ratios.items()]),
        f"model load: unit reader +{reader_mem.extra_mb:.0f} MB RSS, sequence router +{lm_mem.extra_mb:.0f} MB",
    ])
    return {"reader": reader_name, "lm_router": lm_name, "n_prompts": len(questions), "variants": results,
            "ratios": ratios, "text": text}
