"""Named errors shared across stages, one per kind of failure, and the one table that maps them to exit codes
(docs/serving.md "Exit codes"): each kind carries its `exit_code`; errors elsewhere subclass a kind or set
`exit_code` themselves (contract, models, LLM layer), so this module imports nothing of the project."""

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

    exit_code = EXIT_USAGE


class RouterLoadError(UsageError):
    """A router directory or model that cannot be served (missing files, tokenizer mismatch, bad fitted model)."""


class HubError(UsageError):
    """A push or pull that the hub refused or could not serve (dataset push in labeling, router push/pull in
    serving)."""


class DataError(ValueError):
    """A data file whose shape is wrong; the message names the file, the record and the field."""

    exit_code = EXIT_DATA


class RunDirError(ValueError):
    """An output directory a stage may not write into (not made by this stage, or no path at all)."""

    exit_code = EXIT_RUN_DIR


class RunError(RuntimeError):
    """A stage ran but produced nothing usable (e.g. every labeled record is an error)."""

    exit_code = EXIT_FAILED


class StoreError(RuntimeError):
    """A store (SQLite file, manifest, LLM cache) that is unreadable, incomplete or fails its integrity check.
    The message names the file."""

    exit_code = EXIT_STORE


def _network_errors() -> tuple[type[BaseException], ...]:
    # Third-party transport failures: an endpoint or hub that cannot be reached.
    found: list[type[BaseException]] = []
    try:
        import httpx

        found.append(httpx.TransportError)
    except ImportError:
        pass
    try:
        import requests

        found.append(requests.exceptions.ConnectionError)
    except ImportError:
        pass
    return tuple(found)


# Plain bad input (a config key, a value, a missing file) that is not one of the named kinds.
_USAGE = (ValueError, FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError)


def exit_code(exc: BaseException) -> int | None:
    """The exit code for a named error, or None for an unexpected one (which keeps its traceback)."""
    code = getattr(exc, "exit_code", None)
    if isinstance(code, int):
        return code
    if isinstance(exc, _network_errors()):
        return EXIT_NETWORK
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
