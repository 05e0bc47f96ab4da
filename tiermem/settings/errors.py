"""Named errors, one per kind of failure, and the one table that maps them to exit codes (docs/serving.md "Exit
codes"); any other exception is a bug, reported with its traceback. Imports only tiermem.text.redact."""

from __future__ import annotations

import functools
import importlib
import os
import sys
import traceback
from collections.abc import Callable

from tiermem.text.redact import redact_text

EXIT_OK = 0
EXIT_SOME_ERRORS = 1  # done, with some error records
EXIT_USAGE = 2  # bad config, override, argument or value
EXIT_DATA = 3  # a data file (conversations, label records) that does not have the expected shape
EXIT_RUN_DIR = 4  # refused output directory: not made by this stage
EXIT_STORE = 5  # unreadable, incomplete or tampered store: SQLite, manifest, records file
EXIT_FAILED = 6  # the stage ran but produced nothing usable, or an LLM call failed after retries
EXIT_NETWORK = 7  # an endpoint or hub that cannot be reached
# An internal error (none of the named kinds: a bug, not bad input). 70 is sysexits.h's EX_SOFTWARE, clear of 0-7 and
# of 1 (the interpreter's uncaught exception), so a script can tell "fix your input" from "report this".
EXIT_INTERNAL = 70


class UsageError(ValueError):
    """A value the user gave that cannot work (a router directory without a model, a hub without a token)."""

    exit_code = EXIT_USAGE


class ConfigError(UsageError):
    """A config file or override that does not fit its dataclass (also importable from tiermem.settings.config)."""


class MissingExtraError(UsageError):
    """A setting that needs an optional extra this environment lacks; the message names the pip command."""


class MissingFileError(FileNotFoundError):
    """A file or directory the user named that is not there (a FileNotFoundError, so code catching those still does)."""

    exit_code = EXIT_USAGE


class RouterLoadError(UsageError):
    """A router directory or model that cannot be served (missing files, tokenizer mismatch, bad fitted model)."""


class HubError(UsageError):
    """A push or pull that the hub refused or could not serve."""


class UnreachableError(ConnectionError):
    """An endpoint or hub that cannot be reached; the message names the address and the variable that sets it."""

    exit_code = EXIT_NETWORK


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
    """A store (SQLite file, manifest, LLM cache) that is unreadable, incomplete or fails its integrity check."""

    exit_code = EXIT_STORE


def _network_errors() -> tuple[type[BaseException], ...]:
    # Third-party transport failures: an endpoint or hub that cannot be reached.
    found: list[type[BaseException]] = []
    # httpx2: the client huggingface_hub >= 2 talks to the hub with (its own exception types, not httpx's)
    for name in ("httpx", "httpx2"):
        try:
            found.append(importlib.import_module(name).TransportError)
        except (ImportError, AttributeError):
            pass
    try:
        import requests

        found.append(requests.exceptions.ConnectionError)
    except ImportError:
        pass
    return tuple(found)


def exit_code(exc: BaseException) -> int | None:
    """The exit code for a named error or an unreachable endpoint; None for an internal error."""
    code = getattr(exc, "exit_code", None)
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    if isinstance(exc, _network_errors()):
        return EXIT_NETWORK
    return None


def error_line(stage: str, exc: BaseException) -> str:
    kind = "" if isinstance(exc, ConfigError) else f"{type(exc).__name__}: "
    return f"tiermem-router {stage}: error: {kind}{redact_text(str(exc))}"


class HelpShown(Exception):
    """`--help`, no failure: raised where the config is parsed, printed where the stage is known (report_error)."""

    exit_code = EXIT_OK

    def __init__(self, render: Callable[[str], str]) -> None:
        super().__init__("--help")
        self.render = render


def report_error(stage: str, exc: Exception) -> int:
    """A stage main's exception: a named error becomes one line on stderr and its exit code; anything else is internal,
    printed with its traceback, EXIT_INTERNAL. TIERMEM_DEBUG=1 re-raises every exception (named ones too)."""
    if isinstance(exc, HelpShown):
        print(exc.render(stage))
        return EXIT_OK
    code = exit_code(exc)
    if os.environ.get("TIERMEM_DEBUG"):
        raise exc
    if code is not None:
        print(error_line(stage, exc), file=sys.stderr)
        return code
    # The traceback can hold what the user passed (URLs with user:password@): masked like every error line.
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    print(redact_text(text), end="", file=sys.stderr)
    print(f"tiermem-router {stage}: internal error (a bug, please report it with the traceback above)",
          file=sys.stderr)
    return EXIT_INTERNAL


def stage_main(stage: str) -> Callable[[Callable[[list[str]], int | None]], Callable[[list[str] | None], int]]:
    """Every stage's `main(argv)`: an exception that reaches it goes through `report_error`."""

    def deco(fn: Callable[[list[str]], int | None]) -> Callable[[list[str] | None], int]:
        @functools.wraps(fn)
        def main(argv: list[str] | None = None) -> int:
            try:
                return int(fn(list(sys.argv[1:] if argv is None else argv)) or 0)
            except Exception as exc:
                return report_error(stage, exc)

        return main

    return deco
