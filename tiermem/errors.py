"""Named errors shared across stages; tiermem_cli.cli maps each to its own exit code (see README "Exit codes")."""

from __future__ import annotations


class RunDirError(ValueError):
    """An output directory a stage may not write into (not made by this stage, or no path at all)."""


class RunError(RuntimeError):
    """A stage ran but produced nothing usable (e.g. every labeled record is an error)."""


class StoreError(RuntimeError):
    """A store (SQLite file, manifest, LLM cache) that is unreadable, incomplete or fails its integrity check.
    The message names the file."""
