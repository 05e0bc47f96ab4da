"""What a router looks like once it leaves this machine: the uploaded metadata names no local path; the run
directory keeps its own values."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tiermem.runs.run_meta import RunMeta, run_meta_from_dict

HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
# an absolute or home path inside any text ("local:/home/me/runs/sft (fast)"), never a URL's "//host/path"
ABSOLUTE_PATH = re.compile(r"(?<![\w/.~])(?:~|/(?!/))[^\s'\"`,;()\[\]{}|<>*]*")
# the names this module gives local things, so a value already made portable is left as it is
LOCAL_BASE = "local directory "  # a pushed base model that was a directory of the pushing machine: its name follows
PORTABLE_PREFIXES = ("local label dataset ", "label dataset of ", "local run ", LOCAL_BASE, "local path ")


def local_path_name(value: str) -> str:
    """A path by its last component, as it would read on any machine."""
    return Path(value.rstrip("/")).name or value


def without_paths(text: str) -> str:
    """Every absolute (or ~) path in `text` replaced by its last component."""
    return ABSOLUTE_PATH.sub(lambda m: local_path_name(m.group(0)) if len(m.group(0)) > 1 else m.group(0), text)


def is_local_path(value: str) -> bool:
    """A string that names a file or directory of this machine: absolute, relative to home or to here, or existing."""
    if not value or "\n" in value or len(value) > 4096 or value.startswith(PORTABLE_PREFIXES):
        return False
    if value.startswith(("/", "~", "./", "../")):
        return True
    try:
        return ("/" in value or value.startswith(".")) and Path(value).exists()
    except OSError:
        return False


def travelling_data_name(value: str) -> str:
    """Training data by what it is, never a local path: a hub dataset id as is; a local label dataset by the
    conversations file its label run read (its config.yaml), else by its own name."""
    from labeling.config import label_run_config

    if value.startswith(PORTABLE_PREFIXES):
        return value
    path = Path(value)
    if not path.exists() and HUB_ID.match(value):
        return value
    source = (label_run_config(path)[1] or {}).get("data_path")
    if isinstance(source, str) and source:
        return f"label dataset of {local_path_name(source)}"
    return f"local label dataset {local_path_name(value)}"


def without_local_paths(values: dict[str, Any]) -> dict[str, Any]:
    """A metadata table for a card that travels: data by what it is, the router continued from by name, no
    output directory."""
    out = {k: v for k, v in values.items() if k != "output_dir"}
    for key in ("data", "dataset"):
        if isinstance(out.get(key), str):
            out[key] = travelling_data_name(out[key])
        elif isinstance(out.get(key), list):  # several datasets
            out[key] = [travelling_data_name(v) if isinstance(v, str) else v for v in out[key]]
    router = out.get("router")
    if isinstance(router, str) and not router.startswith(PORTABLE_PREFIXES) and (
            Path(router).exists() or not HUB_ID.match(router)):
        out["router"] = f"local run {local_path_name(router)}"
    return out


def portable_model(spec: str) -> str:
    """A model spec as pushed: a hub id or packaged spec as is, a local directory by its name only."""
    return f"{LOCAL_BASE}{local_path_name(spec)}" if is_local_path(spec) else spec


def _scrub(value: Any) -> Any:
    """Every string of a JSON value with its local paths replaced by their last component."""
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, str):
        return f"local path {local_path_name(value)}" if is_local_path(value) else without_paths(value)
    return value


# the metadata tables whose data, run and output keys name the training's inputs and outputs
NAMED_TABLES = ("data", "training", "calibration")


def portable_meta(meta: RunMeta) -> RunMeta:
    """The metadata a push uploads: every path of this machine replaced by a name. Idempotent."""
    data = asdict(meta)
    data.update(data.pop("extra"))
    files = data.pop("files")
    rest = {k: without_local_paths(v) if k in NAMED_TABLES and isinstance(v, dict) else v for k, v in data.items()
            if k not in ("contract_version", "base_model")}
    if isinstance(rest.get("config"), dict):  # a score router's stage config (unit reader: data, output_dir, base)
        rest["config"] = without_local_paths(rest["config"])
    out = _scrub(rest)
    out.update(contract_version=meta.contract_version, base_model=portable_model(meta.base_model), files=files)
    return run_meta_from_dict(out, "tiermem_router.json (as pushed)")


def portable_adapter_config(text: str, base_model: str) -> str:
    """adapter_config.json as pushed: the base named by its hub id (`base_model`, when it has one; PEFT wrote the local
    directory it loaded the base from), else a local directory by its name; any other path in it likewise."""
    config = json.loads(text)
    recorded = config.get("base_model_name_or_path")
    if HUB_ID.match(base_model):
        config["base_model_name_or_path"] = base_model
    elif isinstance(recorded, str):
        config["base_model_name_or_path"] = portable_model(recorded)
    return json.dumps(_scrub(config), indent=2, sort_keys=True) + "\n"
