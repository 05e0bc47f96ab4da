"""A model cache entry that proves what it hands out (`$TIERMEM_CACHE/<kind>/<key>/`): sealed with every file's sha256,
copied only after the bytes read hash right, a race settled by publishing once (docs/serving.md)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from tiermem.runs.run_meta import sha256_file
from tiermem.runs.safe_io import read_json_state
from tiermem.settings.errors import StoreError

MANIFEST = "tiermem_cache_manifest.json"
FORMAT = 1
DIR_MODE, FILE_MODE = 0o755, 0o644


def seal(entry: Path) -> Path:
    """Record every file of a freshly built entry with its sha256, and open it to every reader of the cache."""
    from tiermem.runs.safe_io import write_atomic

    files = {}
    for path in sorted(entry.iterdir()):
        if path.is_symlink() or not path.is_file():
            raise StoreError(f"{path}: a cache entry holds plain files only")
        if path.name != MANIFEST:
            path.chmod(FILE_MODE)
            files[path.name] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    manifest = write_atomic(entry / MANIFEST, json.dumps({"format": FORMAT, "files": files}, indent=2,
                                                         sort_keys=True))
    manifest.chmod(FILE_MODE)
    entry.chmod(DIR_MODE)
    return manifest


def _manifest(entry: Path) -> dict[str, dict]:
    path = entry / MANIFEST
    if path.is_symlink() or not path.is_file():
        raise ValueError(f"no {MANIFEST} (an entry from before digests were stored, or a partial one)")
    doc = read_json_state(path, ValueError, MANIFEST, "the entry is rebuilt")
    files = doc.get("files") if doc.get("format") == FORMAT else None
    if not isinstance(files, dict) or not files or not all(
            isinstance(v, dict) and isinstance(v.get("sha256"), str) for v in files.values()):
        raise ValueError(f"{MANIFEST} does not list files with their sha256")
    return files


def check_entry(entry: Path, deep: bool = False) -> str | None:
    """None when `entry` is a complete entry: its manifest lists exactly its files, none is a link or a folder
    (and, with `deep`, every file hashes to its digest); else why not, in words."""
    if entry.is_symlink():
        return f"{entry} is a symbolic link"
    if not entry.is_dir():
        return "no entry" if not entry.exists() else f"{entry} is not a directory"
    try:
        files = _manifest(entry)
    except ValueError as exc:
        return str(exc)
    found = {p.name: p for p in entry.iterdir() if p.name != MANIFEST}
    for name, path in sorted(found.items()):
        if path.is_symlink():
            return f"{name} is a symbolic link (to {os.readlink(path)})"
        if not path.is_file():
            return f"{name} is not a plain file"
    if set(found) != set(files):
        extra, missing = sorted(set(found) - set(files)), sorted(set(files) - set(found))
        return f"files not as built (unlisted: {extra}, missing: {missing})"
    for name, want in sorted(files.items()):
        if found[name].stat().st_size != want.get("bytes", found[name].stat().st_size):
            return f"{name} has {found[name].stat().st_size} bytes, built with {want['bytes']}"
        if deep and sha256_file(found[name]) != want["sha256"]:
            return f"{name} does not match the sha256 stored when the entry was built"
    return None


def publish(tmp: Path, entry: Path) -> bool:
    """Move a sealed build `tmp` to `entry`: True; False when another run published a complete entry first (the caller
    deletes `tmp` and uses the winner's). A bad entry in the way (partial, tampered) is moved aside and replaced."""
    for _ in range(3):
        try:
            os.replace(tmp, entry)
            return True
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise
        if check_entry(entry, deep=True) is None:
            return False
        aside = Path(tempfile.mkdtemp(prefix=f".{entry.name}.stale.", dir=entry.parent))
        try:
            os.replace(entry, aside / "entry")  # a link or file in the way is moved too, never followed
        except FileNotFoundError:
            pass  # another run moved it first
        finally:
            shutil.rmtree(aside, ignore_errors=True)
    raise StoreError(f"{entry}: could not publish the cache entry (another run keeps replacing it); rerun, or "
                     "set cache=false")


def copy_verified(entry: Path, out: Path) -> list[str]:
    """Every file of a checked entry into `out` (write-then-rename), each only after the bytes read hash to the
    manifest's digest: a mismatch here is a change made while copying."""
    from tiermem.runs.safe_io import write_atomic

    files = _manifest(entry)
    copied = []
    for name, want in sorted(files.items()):
        src = entry / name
        if src.is_symlink():
            raise StoreError(f"{src}: a symbolic link in the cache entry; delete {entry} and rerun to rebuild it")
        data = src.read_bytes()
        if hashlib.sha256(data).hexdigest() != want["sha256"]:
            raise StoreError(f"{src}: does not match the sha256 stored when the entry was built; delete {entry} and "
                             "rerun to rebuild it")
        write_atomic(out / name, data)
        copied.append(name)
    return copied
