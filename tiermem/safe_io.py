"""Writes inside a run directory that never go through a symbolic link the stage did not create.

A run directory is the stage's own, but a file in it may be a link someone planted (`README.md ->
~/.bashrc`): `open(path, "w")` would write through it to the target, outside the directory. Every write here is
write-then-rename: a new file made exclusively next to the target (mkstemp: O_CREAT | O_EXCL, which never follows a
link), then renamed over it. A path that is a link is refused first (RunDirError naming it, exit 4): replacing a
link the user made would be as surprising as writing through it. The lock file is opened with O_NOFOLLOW.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from tiermem.errors import RunDirError

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # 0 where the platform has none (Windows has no symlinks to plant there)


def refuse_link(path: str | Path) -> Path:
    path = Path(path)
    if path.is_symlink():
        raise RunDirError(f"{path} is a symbolic link (to {os.readlink(path)}); a stage never writes through a link "
                          "it did not create: remove it and rerun")
    return path


def write_atomic(path: str | Path, data: str | bytes, encoding: str = "utf-8") -> Path:
    """Write `data` to `path` by write-then-rename in its directory; refuse a link at `path`."""
    path = refuse_link(path)
    mode = path.stat().st_mode & 0o777 if path.is_file() else 0o644  # mkstemp's 0600 would hide a card or report
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode(encoding) if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def open_nofollow(path: str | Path, flags: int, mode: int = 0o644) -> int:
    """os.open with O_NOFOLLOW: a link at `path` is a RunDirError, never followed."""
    path = Path(path)
    try:
        return os.open(path, flags | NOFOLLOW, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or path.is_symlink():
            refuse_link(path)
        raise
