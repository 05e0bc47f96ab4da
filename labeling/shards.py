"""Sharded labeling: a conversation's shard, a shard's directory and its state (docs/labeling.md)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from tiermem.runs.safe_io import read_json_state, write_atomic
from tiermem.settings.errors import ConfigError, DataError

SHARDS_DIR = "shards"
STATE = "shard.json"  # a shard's state: its conversations, whether it finished, its counts and LLM stats
_NAME = re.compile(r"^(\d+)-of-(\d+)$")
_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_shard(spec: Any) -> tuple[int, int]:
    """"i/n" -> (i, n), 0 <= i < n. Raises ConfigError naming the `shard` field."""
    match = _SPEC.match(spec) if isinstance(spec, str) else None
    if match is None:
        raise ConfigError(f"shard must be \"i/n\" (shard i of n, 0-based), e.g. shard=3/8; got {spec!r}")
    index, count = int(match[1]), int(match[2])
    if count < 1 or not 0 <= index < count:
        raise ConfigError(f"shard {spec!r}: need 0 <= i < n (shards are numbered 0 .. n-1), got i={index}, n={count}")
    return index, count


def shard_of(conv_id: str, count: int) -> int:
    """The shard of a conversation among `count`: a stable hash of its id (never Python's per-process hash())."""
    return int(hashlib.sha256(str(conv_id).encode("utf-8")).hexdigest(), 16) % count


def shard_name(index: int, count: int) -> str:
    return f"{index}-of-{count}"


def shard_dir(output_dir: str | Path, index: int, count: int) -> Path:
    return Path(output_dir) / SHARDS_DIR / shard_name(index, count)


def found_shards(output_dir: str | Path) -> dict[tuple[int, int], Path]:
    """(index, count) -> directory for every `<i>-of-<n>` under `<output_dir>/shards`; any other entry is a DataError
    (a stray copy is never silently left out of a merge)."""
    root = Path(output_dir) / SHARDS_DIR
    found: dict[tuple[int, int], Path] = {}
    if not root.is_dir():
        return found
    for path in sorted(root.iterdir()):
        if path.name.startswith("."):
            continue
        match = _NAME.match(path.name)
        if match is None or not path.is_dir() or not 0 <= int(match[1]) < int(match[2]):
            raise DataError(f"{path}: not a shard directory (<i>-of-<n>, 0 <= i < n); move it out of {root}")
        found[(int(match[1]), int(match[2]))] = path
    return found


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Atomically: a shard killed while writing it leaves the previous state whole."""
    write_atomic(path, json.dumps(state, indent=2, sort_keys=True))


def read_state(directory: Path) -> dict[str, Any] | None:
    path = directory / STATE
    if not path.is_file():
        return None
    return read_json_state(path, DataError, "shard state", "rerun that shard", {"finished": bool})


def print_merged(cfg: Any, stats: dict[str, Any]) -> None:
    """The merge's counts, as `label-merge` and `label executor=ray` print them."""
    counts = stats["labels"][cfg.label_rule]["all"]
    print(f"merged {stats['shards']['count']} shards: {stats['records']} questions ({stats['errors']} errors); "
          f"rule {cfg.label_rule}: ANSWER {counts.get('ANSWER', 0)}, ESCALATE {counts.get('ESCALATE', 0)}, "
          f"dropped {counts.get('dropped', 0)}")
    from labeling.judgments.format import coverage_line

    judged = coverage_line(cfg.judgments, stats.get("judgments"))
    if judged:
        print(judged)
    print(f"outputs: {cfg.output_dir}/dataset, all_records.jsonl, stats.json, report.md")
