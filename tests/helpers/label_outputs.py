"""What a labeling run leaves for its consumers (records, dataset rows, stats), with what depends on the run rather
than the data left out: the tests that compare a sharded, resumed or Ray run with a one-process run compare these."""

from __future__ import annotations

import json
from pathlib import Path

TIMING = ("label_wall_s", "cost_summary_wall_s", "cost_research_wall_s")
# stats that count this process's work rather than the data: the merge adds the shards' up
RUN_STATS = ("elapsed_s", "resumed_records", "new_records", "llm", "output_dir", "shards")


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def strip_timing(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k not in TIMING}


def outputs(out: Path) -> dict:
    """What a labeling run leaves for its consumers, run timings left out."""
    from datasets import load_from_disk

    dataset = load_from_disk(str(out / "dataset"))
    stats = json.loads((out / "stats.json").read_text())
    for path in stats["cost_per_question"].values():
        path.pop("wall_s")  # a mean of timings
    return {"records": [strip_timing(r) for r in lines(out / "all_records.jsonl")],
            "rows": {name: [strip_timing(r) for r in dataset[name].to_list()] for name in dataset},
            "stats": {k: v for k, v in stats.items() if k not in RUN_STATS}}
