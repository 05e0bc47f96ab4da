"""Named errors shared across stages, one per kind of failure, and the one table that maps them to exit codes
(README "Run directories and exit codes"). Errors of upper floors subclass these, so this table never imports up."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable

EXIT_OK = 0
EXIT_SOME_ERRORS = 1  # done, with some error records
EXIT_USAGE = 2  # bad config, override, argument or value
EXIT_DATA = 3  # a data file (conversations, label records) that does not have the expected shape
EXIT_RUN_DIR = 4  # refused output directory: not made by this stage
EXIT_STORE = 5  # unreadable, incomplete or tampered store: SQLite, manifest, records file
EXIT_FAILED = 6  # the stage ran but produced nothing usable, or an LLM call failed after retries
EXIT_NETWORK = 7  # an endpoint or hub that cannot be reached


class UsageError(ValueError):
    """A value the user gave that cannot work (a router directory without a model, a hub without a token)."""


class DataError(ValueError):
    """A data file whose shape is wrong; the message names the file, the record and the field."""


class RunDirError(ValueError):
    """An output directory a stage may not write into (not made by this stage, or no path at all)."""


class RunError(RuntimeError):
    """A stage ran but produced nothing usable (e.g. every labeled record is an error)."""


class StoreError(RuntimeError):
    """A store (SQLite file, manifest, LLM cache) that is unreadable, incomplete or fails its integrity check.
    The message names the file."""


def _named_errors() -> tuple[tuple[type[BaseException], int], ...]:
    # Ground-floor classes only; the most specific first, the first isinstance match decides.
    from tiermem.contract import ContractVersionError
    from tiermem.llm.base import LLMError
    from tiermem.models import ModelSpecError

    table: list[tuple[type[BaseException], int]] = [
        (RunDirError, EXIT_RUN_DIR), (StoreError, EXIT_STORE), (RunError, EXIT_FAILED), (DataError, EXIT_DATA),
        (LLMError, EXIT_FAILED), (ModelSpecError, EXIT_USAGE), (ContractVersionError, EXIT_USAGE),
    ]
    try:
        import httpx

        table.append((httpx.TransportError, EXIT_NETWORK))
    except ImportError:
        pass
    try:
        import requests

        table.append((requests.exceptions.ConnectionError, EXIT_NETWORK))
    except ImportError:
        pass
    return tuple(table)


# Plain bad input (a config key, a value, a missing file) that is not one of the named kinds.
_USAGE = (ValueError, FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError)


def exit_code(exc: BaseException) -> int | None:
    """The exit code for a named error, or None for an unexpected one (which keeps its traceback)."""
    for cls, code in _named_errors():
        if isinstance(exc, cls):
            return code
    return EXIT_USAGE if isinstance(exc, _USAGE) else None


def error_line(stage: str, exc: BaseException) -> str:
    from tiermem.config import ConfigError
    from tiermem.redact import redact_text

    kind = "" if isinstance(exc, ConfigError) else f"{type(exc).__name__}: "
    return f"tiermem-router {stage}: error: {kind}{redact_text(str(exc))}"


def stage_main(stage: str) -> Callable[[Callable[[list[str]], int | None]], Callable[[list[str] | None], int]]:
    """Every stage's `main(argv)`: a named error becomes one line on stderr and its exit code; anything else
    keeps its traceback (TIERMEM_DEBUG=1 keeps it for named errors too)."""

    def deco(fn: Callable[[list[str]], int | None]) -> Callable[[list[str] | None], int]:
        @functools.wraps(fn)
        def main(argv: list[str] | None = None) -> int:
            try:
                return int(fn(list(sys.argv[1:] if argv is None else argv)) or 0)
            except Exception as exc:
                code = exit_code(exc)
                if code is None or os.environ.get("TIERMEM_DEBUG"):
                    raise
                print(error_line(stage, exc), file=sys.stderr)
                return code

        return main

    return deco
