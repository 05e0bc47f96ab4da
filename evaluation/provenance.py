"""What an evaluation ran on, for eval.json and the card: the machine, the data by a name that travels (never a
local path), and which labeling config and router contract made the records."""

from __future__ import annotations

import json
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tiermem import contract


def machine_info() -> dict[str, Any]:
    import torch

    from tiermem.models.specs import cpu_count

    return {"platform": platform.platform(), "python": platform.python_version(), "cores": cpu_count(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def data_name(dataset: str | Path | list[str], records: Sequence[dict[str, Any]], provenance: dict[str, Any]) -> str:
    """The data by what it is, for a model card that travels (never a local path): a hub id as is; local records
    by the conversations file their label run read (its config.yaml) or their own file name, and the sha256 of the
    records themselves, which names the same data on any machine (wall-clock fields left out: a relabel is the same
    data)."""
    import hashlib

    from labeling.dataset import data_paths

    paths = data_paths(dataset)
    if not all(Path(p).exists() for p in paths):
        return str(dataset) if len(paths) == 1 else " + ".join(paths)  # hub dataset ids
    digest = hashlib.sha256()
    for rec in records:
        timeless = {k: v for k, v in rec.items() if not k.endswith("wall_s")}
        digest.update(json.dumps(timeless, sort_keys=True, default=str).encode())
    sources = provenance.get("data_path")
    sources = sources if isinstance(sources, list) else [sources]
    what = " + ".join(f"label records of {Path(str(source)).name}" if source
                      else f"label records {Path(p).name if Path(p).is_file() else Path(p).name + '/'}"
                      for p, source in zip(paths, sources, strict=True))
    return f"{what} ({len(records)} records, sha256 {digest.hexdigest()[:12]})"


def dataset_provenance(dataset: str | Path | list[str], records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Which labeling config and router contract made the dataset: the label run's config.yaml next to it (the
    label stage writes it beside `dataset/` and the records JSONL), and the contract version stamped in the records
    when labeling recorded one; of several datasets, each key lists theirs in order."""
    from labeling.dataset import data_paths

    paths = data_paths(dataset)
    if len(paths) > 1:
        each = [dataset_provenance(p, records) for p in paths]
        out = {k: [e.get(k) for e in each] for k in each[0]}
        versions = sorted({str(v) for v in out["contract_version"] if v})
        return {**out, "contract_version": ", ".join(versions) or None,
                "current_contract_version": contract.CONTRACT_VERSION}
    from labeling.config import label_run_config

    config, data, error = label_run_config(paths[0])
    out: dict[str, Any] = {"label_config": None, "data_path": None, "label_rule_config": None,
                           "contract_version": None, "current_contract_version": contract.CONTRACT_VERSION}
    if config.is_file():
        out["label_config"] = str(config)
        if error:
            out["label_config_error"] = error
        if data is not None:
            out["data_path"] = data.get("data_path")
            out["label_rule_config"] = data.get("label_rule")
            out["contract_version"] = data.get("contract_version")
    stamped = sorted({str(r["contract_version"]) for r in records if r.get("contract_version")})
    if stamped:
        out["contract_version"] = ", ".join(stamped)
    return out
