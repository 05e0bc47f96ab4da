"""`tiermem-router label`: labeling/run.py's `run` here, or with `executor=ray` every shard as a Ray task."""

from __future__ import annotations

from typing import Any

from labeling.config import DEFAULT_CONFIG, LabelConfig
from labeling.judgments.format import coverage_line
from labeling.run import check_judgments_file, run
from labeling.shards import print_merged
from tiermem.settings.config import parse_cli
from tiermem.settings.errors import UsageError


def label(cfg: LabelConfig, roles: Any = None, embedder: Any = None) -> dict[str, Any]:
    """Label as the config says: here (the stats of `run`), or on Ray (the merge's stats)."""
    check_judgments_file(cfg)
    if cfg.executor == "ray":
        if roles is not None or embedder is not None:
            raise UsageError("executor=ray: every shard builds its roles and embedder from the config in its own "
                             "Ray task; none can be passed in")
        from labeling.ray_executor import label_on_ray

        return label_on_ray(cfg)
    return run(cfg, roles, embedder)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_cli(LabelConfig, list(argv or []), default_config=DEFAULT_CONFIG)
    stats = label(cfg)
    if cfg.shard is not None:
        print(f"shard {stats['shard']}: {stats['records']} questions of {len(stats['conversations'])} conversations "
              f"({stats['errors']} errors) in {stats['elapsed_s']} s; records in {stats['output_dir']}. Once every "
              f"shard of {stats['count']} is done: tiermem-router label-merge with the same config")
        return 0 if stats["errors"] == 0 else 1
    if cfg.executor == "ray":
        print_merged(cfg, stats)
        return 0 if stats["errors"] == 0 else 1
    rule = cfg.label_rule
    counts = stats["labels"][rule]["all"]
    print(f"labeled {stats['records']} questions ({stats['errors']} errors) in {stats['elapsed_s']} s; "
          f"rule {rule}: ANSWER {counts.get('ANSWER', 0)}, ESCALATE {counts.get('ESCALATE', 0)}, "
          f"dropped {counts.get('dropped', 0)}")
    if stats.get("minimal_pairs"):
        pairs = stats["minimal_pairs"]
        print(f"minimal pairs: {pairs['train_rows']} in the train split ({pairs['emitted']} emitted, "
              f"{pairs['held_out']} of validation/test conversations left out)")
    judged = coverage_line(cfg.judgments, stats.get("judgments"))
    if judged:
        print(judged)
    print(f"outputs: {cfg.output_dir}/dataset, all_records.jsonl, stats.json, report.md")
    return 0 if stats["errors"] == 0 else 1
