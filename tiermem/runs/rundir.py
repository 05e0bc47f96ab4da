"""Run directories: a stage claims, marks and locks its output directory before it writes, and only changes another
stage's run through `claim_run_to_update` (docs/serving.md, "Run directories")."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from tiermem.runs.safe_io import open_nofollow, read_json_state, staging_pattern, write_atomic
from tiermem.settings.errors import RunDirError, RunError  # noqa: F401  (RunError: re-exported for labeling.run)

try:
    import fcntl
except ImportError:  # no flock (Windows): claims still check markers, they just cannot exclude each other
    fcntl = None  # type: ignore[assignment]

MARKER = ".tiermem-run.json"
LOCK = ".tiermem-run.lock"

# Stages whose run directory is a trained router (tiermem_router.json): what calibrate, push and eval may update.
ROUTER_STAGES = ("sft", "grpo", "fit-features", "unit-reader")
# stage -> name patterns of files a caller may create in the run directory before the stage starts, which the
# stage only reads or adds to and never deletes: the SQLite LLM response caches of a label run.
PRECREATED: dict[str, tuple[str, ...]] = {"label": ("*.sqlite", "*.sqlite-wal", "*.sqlite-shm")}
# Stages whose directory is a root over other stages' run directories (the demo's `runs/`, the benchmark's):
# subdirectories there are claimed by their own stages, so only files decide whether the root is foreign.
CONTAINERS = frozenset({"demo", "bench"})
TIERS = "tiers"  # the marker of a tier cache root (claim_cache_dir)


def read_marker(path: str | Path) -> dict | None:
    marker = Path(path) / MARKER
    if not marker.is_file():
        return None
    return read_json_state(marker, RunDirError, "run marker", "remove the directory or pick another", {"stage": str})


def _path(path: str | Path | None, stage: str) -> Path:
    if path is None or str(path).strip() == "":
        raise RunDirError(f"{stage}: output directory is empty; give a path (an empty one would mean the "
                          "current directory)")
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise RunDirError(f"{out}: output directory is a file")
    return out


def _check_contents(out: Path, stage: str) -> None:
    if not out.is_dir():
        return
    marker = read_marker(out)
    if marker is not None:
        if marker["stage"] != stage:
            raise RunDirError(f"{out}: is a {marker['stage']!r} run directory; {stage} will not write into it "
                              "(choose another output directory)")
        return
    allowed = PRECREATED.get(stage, ())

    def ours(p: Path) -> bool:
        # the marker's temporary file: a shard or rank claiming it now (lock=False) has made it, not yet renamed it
        return (p.name == LOCK or (p.is_dir() and stage in CONTAINERS) or fnmatch(p.name, staging_pattern(MARKER))
                or (p.is_file() and any(fnmatch(p.name, pat) for pat in allowed)))

    if not all(ours(p) for p in out.iterdir()):
        raise RunDirError(f"{out}: directory exists, is not empty and was not made by tiermem-router {stage} "
                          f"(no {MARKER}); refusing to delete or overwrite files in it. Choose a new or "
                          "empty output directory")


# ---- the lock ---------------------------------------------------------------------------------------------------


@dataclass
class _Held:
    fd: int
    stage: str
    pid: int
    thread: int
    count: int


_HELD: dict[str, _Held] = {}  # resolved directory -> this process's lock on it
_GUARD = threading.Lock()


def _in_use(out: Path, pid: object, stage: object) -> RunDirError:
    holder = f"pid {pid} (stage {stage})" if pid else "another process"
    return RunDirError(f"{out}: is in use by {holder}, which is writing it now; wait for it to finish or choose "
                       "another output directory")


def _holder(fd: int) -> dict:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return info if isinstance(info, dict) else {}


def _held_here(out: Path) -> _Held | None:
    held = _HELD.get(str(out.resolve()))
    return held if held is not None and held.pid == os.getpid() else None  # a forked child holds nothing


def _check_free(out: Path) -> None:
    """Refuse a directory another process or thread holds, without creating the lock file."""
    with _GUARD:
        held = _held_here(out)
        if held is not None:
            if held.thread != threading.get_ident():
                raise _in_use(out, os.getpid(), held.stage)
            return
        if fcntl is None or not (out / LOCK).is_file():
            return
        try:
            fd = open_nofollow(out / LOCK, os.O_RDONLY)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            info = _holder(fd)
            raise _in_use(out, info.get("pid"), info.get("stage")) from None
        finally:
            os.close(fd)  # closing drops the probe's shared lock


def _lock(out: Path, stage: str) -> None:
    with _GUARD:
        held = _held_here(out)
        if held is not None:
            if held.thread != threading.get_ident():
                raise _in_use(out, os.getpid(), held.stage)
            held.count += 1
            return
        if fcntl is None:
            return
        fd = open_nofollow(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)  # a planted link is refused
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            info = _holder(fd)
            os.close(fd)
            raise _in_use(out, info.get("pid"), info.get("stage")) from None
        # Who holds it, for the message a refused claim prints; the lock itself is the flock, not this text.
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "stage": stage,
                                  "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode(), 0)
        _HELD[str(out.resolve())] = _Held(fd, stage, os.getpid(), threading.get_ident(), 1)


def release_output_dir(path: str | Path) -> None:
    """Drop this process's claim on `path` (the last of nested claims unlocks it). No claim: nothing to do."""
    out = Path(path)
    with _GUARD:
        held = _held_here(out)
        if held is None:
            return
        held.count -= 1
        if held.count == 0:
            del _HELD[str(out.resolve())]
            os.close(held.fd)  # closing the descriptor releases the flock


# ---- claims -----------------------------------------------------------------------------------------------------


def _write_marker(out: Path, stage: str) -> None:
    write_atomic(out / MARKER, json.dumps({"stage": stage,
                                           "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))


def refuse_links(out: Path, stage: str) -> None:
    """No stage makes a symbolic link in a run directory, so one there was planted: a write to its name would land
    outside the directory. Refused before anything is written, naming each (safe_io refuses them at every write)."""
    links = sorted(p.name for p in out.iterdir() if p.is_symlink())
    if links:
        shown = ", ".join(f"{name} -> {os.readlink(out / name)}" for name in links[:5])
        raise RunDirError(f"{out}: holds symbolic link(s) {shown}; {stage} never writes through a link it did not "
                          "create: remove them and rerun")


def check_output_dir(path: str | Path | None, stage: str) -> Path:
    """`claim_output_dir`'s checks, touching nothing: for a stage reading its inputs before creating its directory."""
    out = _path(path, stage)
    if out.is_dir():
        _check_contents(out, stage)
        refuse_links(out, stage)
        _check_free(out)
    return out


def claim_output_dir(path: str | Path | None, stage: str, *, lock: bool = True) -> Path:
    """Create `path` as a `stage` run directory (or accept one) and lock it until `release_output_dir` or process exit
    (RunDirError otherwise). `lock=False`: a label run's shards, which claim their common directory at once."""
    if not lock:
        out = _path(path, stage)
        _check_contents(out, stage)
        out.mkdir(parents=True, exist_ok=True)
        if read_marker(out) is None:
            _write_marker(out, stage)
        return out
    out = check_output_dir(path, stage)
    out.mkdir(parents=True, exist_ok=True)
    _lock(out, stage)
    try:
        _check_contents(out, stage)  # another process may have claimed it between the check and the lock
        _write_marker(out, stage)
    except BaseException:
        release_output_dir(out)
        raise
    return out


RANK_WAIT_S = 600.0  # how long the other ranks of a launch wait for rank 0's claim


def await_claim(path: str | Path | None, stage: str) -> Path:
    """For ranks > 0 of a distributed launch: rank 0 creates, claims and locks the directory; the others write nothing
    there first (rank 0 would refuse a file of theirs as foreign), wait for its marker, then check its stage."""
    out = _path(path, stage)
    deadline = time.monotonic() + RANK_WAIT_S
    while read_marker(out) is None:
        if time.monotonic() > deadline:
            raise RunDirError(f"{out}: rank 0 of this launch did not claim it within {RANK_WAIT_S:.0f} s")
        time.sleep(0.1)
    _check_contents(out, stage)
    return out


@contextmanager
def launch_run_dir(path: str | Path | None, stage: str, leader: bool) -> Iterator[Path]:
    """The run directory of one process of a training launch: rank 0 claims and locks it, other ranks `await_claim`."""
    if leader:
        with claimed_output_dir(path, stage) as out:
            yield out
    else:
        yield await_claim(path, stage)


@contextmanager
def claimed_output_dir(path: str | Path | None, stage: str) -> Iterator[Path]:
    """`claim_output_dir` for the duration of a `with` block: the lock is released when the stage ends."""
    out = claim_output_dir(path, stage)
    try:
        yield out
    finally:
        release_output_dir(out)


def claim_cache_dir(path: str | Path | None, stage: str = TIERS) -> Path:
    """A cache root runs share (tier caches; entries built atomically): `claim_output_dir`'s marker rules, no lock."""
    out = check_output_dir(path, stage)
    out.mkdir(parents=True, exist_ok=True)
    if read_marker(out) is None:
        _write_marker(out, stage)
    return out


def claim_run_to_update(path: str | Path, stage: str, kinds: Iterable[str] = ROUTER_STAGES) -> Path:
    """Lock an existing run of one of `kinds` that `stage` changes, not owns (marker kept); else RunDirError."""
    kinds = tuple(kinds)
    out = _path(path, stage)
    if not out.is_dir():
        raise RunDirError(f"{out}: not a run directory; {stage} only updates {' / '.join(kinds)} runs")
    made_by = (read_marker(out) or {}).get("stage")
    if made_by not in kinds:
        what = f"is a {made_by!r} run directory" if made_by else "was not made by tiermem-router (no run marker)"
        raise RunDirError(f"{out}: {what}; {stage} only updates {' / '.join(kinds)} runs and will not write into it")
    refuse_links(out, stage)
    _lock(out, stage)
    return out


@contextmanager
def updating_run(path: str | Path, stage: str, kinds: Iterable[str] = ROUTER_STAGES) -> Iterator[Path]:
    out = claim_run_to_update(path, stage, kinds)
    try:
        yield out
    finally:
        release_output_dir(out)
