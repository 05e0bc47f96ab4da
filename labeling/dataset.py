"""Reading the labeled dataset back: one loader for every consumer (eval, calibration, benchmarks)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tiermem.config import ConfigError


def load_split(dataset: str | Path, split: str) -> list[dict[str, Any]]:
    """Records of one split from a saved DatasetDict directory or a labeling JSONL.

    In a JSONL, records carrying a `split` field are filtered by it; a file whose records have none is taken
    to hold one split and is returned whole.
    """
    path = Path(dataset)
    if not path.exists():
        raise FileNotFoundError(
            f"label data not found: {path} (label dataset not found: run `make label` first, or point the stage at one)"
        )
    if path.is_dir():
        from datasets import Dataset

        index = path / "dataset_dict.json"
        if not index.is_file():
            raise ConfigError(f"{path}: not a saved DatasetDict (no dataset_dict.json)")
        splits = json.loads(index.read_text()).get("splits", [])
        if split not in splits:
            raise ConfigError(f"{path}: no split {split!r}; splits: {sorted(splits)}")
        # Load only the split asked for: datasets 5.2 cannot reload an empty split (no arrow file),
        # which would make a whole DatasetDict unloadable for want of, say, an empty test split.
        if not any((path / split).glob("*.arrow")):
            return []
        return Dataset.load_from_disk(str(path / split)).to_list()
    records = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{n}: not valid JSON: {exc}") from None
        if rec.get("split", split) == split:
            records.append(rec)
    return records
