"""Writes inside a run directory that never go through a symbolic link the stage did not create: write-then-rename,
a link refused (RunDirError), library folder saves made in a fresh folder and moved into place (docs/serving.md)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from tiermem.settings.errors import ConfigError, MissingFileError, RunDirError

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # 0 where the platform has none (Windows has no symlinks to plant there)


def refuse_link(path: str | Path) -> Path:
    path = Path(path)
    if path.is_symlink():
        raise RunDirError(f"{path} is a symbolic link (to {os.readlink(path)}); a stage never writes through a link "
                          "it did not create: remove it and rerun")
    return path


def check_file_path(path: str | Path, key: str, may_be_new: bool = False,
                    made_here: str | Path | None = None) -> Path:
    """A file a stage reads (and may write): a regular file, or with `may_be_new` a path not there yet in a folder
    that exists (or is `made_here`). Checked before any work: reading a FIFO blocks forever, and a directory or a
    missing folder fails only where the file is opened, perhaps after training."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if not may_be_new:
            raise MissingFileError(f"{key}={path}: no such file") from None
        folder = path.parent
        if folder.is_dir() or (made_here is not None and folder.resolve() == Path(made_here).resolve()):
            return path
        raise ConfigError(f"{key}={path}: its folder {folder} does not exist (a new file is made only in an "
                          "existing folder)") from None
    except OSError as exc:  # a file where a folder of the path should be, no permission to look
        raise ConfigError(f"{key}={path}: cannot be read ({exc.strerror})") from None
    if stat.S_ISDIR(mode):
        raise ConfigError(f"{key}={path}: a directory, not a file")
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{key}={path}: not a regular file (a FIFO, socket or device, which a stage would block "
                          "on or read without end)")
    return path


def write_atomic(path: str | Path, data: str | bytes, encoding: str = "utf-8") -> Path:
    """Write `data` to `path` by write-then-rename in its directory; refuse a link at `path`."""
    payload = data.encode(encoding) if isinstance(data, str) else data
    return write_stream(path, lambda fh: fh.write(payload))


def create_exclusive(path: str | Path, data: str, encoding: str = "utf-8") -> bool:
    """Make `path` holding `data` in one step, only if nothing is there: written beside it, then hard-linked into
    place (unlike a rename, a link never replaces a file another process made meanwhile). False when one was."""
    path = Path(path)
    prefix, _, suffix = staging_pattern(path.name).partition("*")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=suffix)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w", encoding=encoding) as fh:
            fh.write(data)
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        Path(tmp).unlink(missing_ok=True)


def open_nofollow(path: str | Path, flags: int, mode: int = 0o644) -> int:
    """os.open with O_NOFOLLOW: a link at `path` is a RunDirError, never followed."""
    path = Path(path)
    try:
        return os.open(path, flags | NOFOLLOW, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or path.is_symlink():
            refuse_link(path)
        raise


def staging_pattern(name: str) -> str:
    """The names (fnmatch) of the new files `write_stream` makes beside `name` before renaming one over it."""
    return f".{name}.*.tmp"


def write_stream(path: str | Path, write: Callable[[BinaryIO], object]) -> Path:
    """`write_atomic` for a writer that needs a file object (torch.save, a figure, a long JSONL)."""
    path = refuse_link(path)
    mode = path.stat().st_mode & 0o777 if path.is_file() else 0o644  # mkstemp's 0600 would hide a card or report
    prefix, _, suffix = staging_pattern(path.name).partition("*")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=suffix)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def move_into(source: str | Path, directory: str | Path) -> list[Path]:
    """Move every file under `source` to the same relative path under `directory` by rename: a link at a target
    (or at a folder on the way) is refused, and rename replaces a name, never writing through one planted later."""
    source, directory = Path(source), Path(directory)
    moved = []
    for src in sorted(source.rglob("*")):
        target = directory / src.relative_to(source)
        for folder in reversed(target.relative_to(directory).parents[:-1]):
            refuse_link(directory / folder)
        if src.is_dir():
            refuse_link(target).mkdir(exist_ok=True)
            continue
        os.replace(src, refuse_link(target))
        moved.append(target)
    return moved


def save_into(directory: str | Path, write: Callable[[Path], object]) -> list[Path]:
    """Files a library writes by plain open() (save_pretrained): made in a fresh mkdtemp folder, then moved in."""
    directory = refuse_link(directory)
    directory.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=directory, prefix=".saving."))
    try:
        write(staging)
        for path in staging.rglob("*"):  # a library's 0600 (safetensors) would hide the weights from a service
            if not path.is_symlink():
                path.chmod(0o755 if path.is_dir() else 0o644)
        return move_into(staging, directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def save_pretrained(obj: Any, directory: str | Path, **kwargs: Any) -> list[Path]:
    """`obj.save_pretrained(directory, **kwargs)` through `save_into` (no planted link followed); the files written."""
    return save_into(directory, lambda folder: obj.save_pretrained(str(folder), **kwargs))


def read_json_state(path: str | Path, error: type[Exception], what: str, fix: str,
                    need: Mapping[str, type | tuple[type, ...]] | None = None) -> dict[str, Any]:
    """A JSON object a stage wrote and reads back (a marker, a shard state, a manifest): unreadable, not UTF-8 or JSON,
    not an object, or a `need` field missing or mistyped is `error` naming the file, what it should be and the fix."""
    try:
        doc = json.loads(Path(path).read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise error(f"{path}: unreadable {what}, not valid JSON ({type(exc).__name__}: {exc}); {fix}") from None
    if not isinstance(doc, dict):
        raise error(f"{path}: holds a JSON {type(doc).__name__}, not an object ({what}); {fix}")
    for key, kind in (need or {}).items():
        if isinstance(doc.get(key), bool) is not (kind is bool) or not isinstance(doc.get(key), kind):
            raise error(f"{path}: not a {what} (no {key!r} of the right type); {fix}")
    return doc
