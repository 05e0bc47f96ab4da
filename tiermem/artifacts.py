"""`tiermem_router.json`: the one metadata file saved next to every router checkpoint.

Training writes it (contract version, base model spec, training config, metrics), calibration adds the
threshold, serving and the model card read it. Reading and writing live only here so every stage agrees
on the format.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RUN_META_FILE = "tiermem_router.json"
ADAPTER_CONFIG_FILE = "adapter_config.json"
_REQUIRED = ("contract_version", "base_model")


class RunMetaError(ValueError):
    """A missing or malformed tiermem_router.json."""


@dataclass
class RunMeta:
    contract_version: str
    base_model: str  # model spec for tiermem.models.load_causal_lm (packaged:..., local dir or hub id)
    stage: str = "sft"  # which recipe produced the weights: sft | grpo
    adapter: bool = True  # True: a PEFT adapter over base_model; False: merged full weights in the run dir
    training: dict[str, Any] = field(default_factory=dict)  # the recipe's config, as saved
    data: dict[str, Any] = field(default_factory=dict)  # dataset path / hub id, label_rule, split sizes
    metrics: dict[str, Any] = field(default_factory=dict)  # e.g. {"validation": {"accuracy": ..}}
    calibration: dict[str, Any] | None = None  # written by evaluation.calibrate
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept verbatim


def read_run_meta(run_dir: str | Path) -> RunMeta:
    path = Path(run_dir) / RUN_META_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: not a tiermem router run directory (make sft writes one)")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RunMetaError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise RunMetaError(f"{path}: top level must be an object")
    missing = [k for k in _REQUIRED if not isinstance(raw.get(k), str) or not raw.get(k)]
    if missing:
        raise RunMetaError(f"{path}: missing or empty field(s) {missing}")
    known = set(RunMeta.__dataclass_fields__) - {"extra"}
    extra = {k: v for k, v in raw.items() if k not in known}
    return RunMeta(**{k: v for k, v in raw.items() if k in known}, extra=extra)


def write_run_meta(run_dir: str | Path, meta: RunMeta) -> Path:
    """Write atomically, so a crash never leaves a half-written file a loader would trust."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    data = asdict(meta)
    data.update(data.pop("extra"))
    fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=".tiermem_router.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=False, default=str)
        fh.write("\n")
    path = run_dir / RUN_META_FILE
    os.replace(tmp, path)
    return path


def update_run_meta(run_dir: str | Path, **changes: Any) -> RunMeta:
    meta = read_run_meta(run_dir)
    for key, value in changes.items():
        if key not in RunMeta.__dataclass_fields__:
            raise RunMetaError(f"unknown run meta field {key!r}")
        setattr(meta, key, value)
    write_run_meta(run_dir, meta)
    return meta


def make_adapter_portable(run_dir: str | Path, base_spec: str) -> str | None:
    """Name the base model by its hub id in adapter_config.json, so plain PEFT / vLLM load the adapter on any
    machine (PEFT writes the local directory it loaded the base from). Returns the base the file now names, or
    None when the spec has no hub id (a local directory) and the file is left as written.

    tiermem_router.json keeps `base_model` (the spec, e.g. `packaged:...`): that is how our own loaders
    resolve the base offline, and they never read the adapter config's base.
    """
    from tiermem.models import hub_id

    path = Path(run_dir) / ADAPTER_CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: not a LoRA adapter run")
    base_id = hub_id(base_spec)
    if base_id is None:
        return None
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RunMetaError(f"{path}: not valid JSON: {exc}") from None
    if config.get("base_model_name_or_path") != base_id:
        config["base_model_name_or_path"] = base_id
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".adapter_config.", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(config, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
    return base_id
