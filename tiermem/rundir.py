"""Run directories: a stage only deletes or overwrites files in a directory it created.

Each stage claims its output directory before writing: `claim_output_dir(path, stage)` creates it with a
marker file naming the stage. A directory that already holds files is accepted only when its marker names
the same stage (a rerun or resume); anything else (a home directory, the current directory via an empty
`output_dir=`, another stage's run) is refused with RunDirError before a single file is touched.

Run directories made before markers existed are recognized by the file each stage always wrote (e.g. a
label run's resume_fingerprint.json) and adopted once.
"""

from __future__ import annotations

import json
import os
import time
from fnmatch import fnmatch
from pathlib import Path

from tiermem.errors import RunDirError, RunError

__all__ = ["MARKER", "RunDirError", "RunError", "claim_output_dir", "read_marker"]

MARKER = ".tiermem-run.json"

# stage -> files only that stage writes, to adopt run directories made before markers existed.
LEGACY_SIGNATURES: dict[str, tuple[str, ...]] = {
    "label": ("resume_fingerprint.json",),
    "sft": ("tiermem_router.json",),
    "grpo": ("tiermem_router.json",),
    "eval": ("eval.json",),
}
# stage -> name patterns of files a caller may create in the run directory before the stage starts, which the
# stage only reads or adds to and never deletes: the SQLite LLM response caches of a label run.
PRECREATED: dict[str, tuple[str, ...]] = {"label": ("*.sqlite", "*.sqlite-wal", "*.sqlite-shm")}


def read_marker(path: str | Path) -> dict | None:
    marker = Path(path) / MARKER
    if not marker.is_file():
        return None
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunDirError(f"{marker}: unreadable run marker ({exc}); remove the directory or pick another") from None
    if not isinstance(data, dict) or not isinstance(data.get("stage"), str):
        raise RunDirError(f"{marker}: not a run marker (no 'stage'); remove the directory or pick another")
    return data


def claim_output_dir(path: str | Path | None, stage: str) -> Path:
    """Create `path` as a `stage` run directory, or accept it if it already is one. Returns the Path.

    Raises RunDirError for an empty path, a file, a non-empty directory without our marker, or a run
    directory of another stage."""
    if path is None or str(path).strip() == "":
        raise RunDirError(f"{stage}: output directory is empty; give a path (an empty one would mean the "
                          "current directory)")
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise RunDirError(f"{out}: output directory is a file")
    marker = read_marker(out) if out.is_dir() else None
    if marker is not None:
        if marker["stage"] != stage:
            raise RunDirError(f"{out}: is a {marker['stage']!r} run directory; {stage} will not write into it "
                              "(choose another output directory)")
        return out
    allowed = PRECREATED.get(stage, ())
    if out.is_dir() and any(not (p.is_file() and any(fnmatch(p.name, pat) for pat in allowed))
                            for p in out.iterdir()):
        legacy = LEGACY_SIGNATURES.get(stage, ())
        if not any((out / name).is_file() for name in legacy):
            raise RunDirError(f"{out}: directory exists, is not empty and was not made by tiermem-router {stage} "
                              f"(no {MARKER}); refusing to delete or overwrite files in it. Choose a new or "
                              "empty output directory")
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f"{MARKER}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"stage": stage, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
    os.replace(tmp, out / MARKER)
    return out
