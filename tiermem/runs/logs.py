"""One place that sets up the console: the project's loggers at INFO, every other one at WARNING (`--verbose` or
TIERMEM_LOG lowers both), the level kept on a handler filter because bm25s resets its own logger on import."""

from __future__ import annotations

import json
import logging
import os
import warnings
from typing import Any

from tiermem.settings.errors import UsageError

OUR_LOGGERS = ("tiermem", "labeling", "router_train", "serving", "benchmarks", "__main__")
FORMAT = "%(levelname)s %(name)s: %(message)s"
ENV = "TIERMEM_LOG"

# Deprecations libraries raise by their own calls, which nothing on our side avoids (peft 0.21 reads transformers'
# deprecated `is_gradient_checkpointing` in PeftModel.__init__): silenced unless --verbose.
LIBRARY_DEPRECATIONS = (
    (r"`is_gradient_checkpointing` is deprecated", FutureWarning, r"transformers\.modeling_utils"),
)


def _is_ours(name: str) -> bool:
    return any(name == root or name.startswith(root + ".") for root in OUR_LOGGERS)


class _ConsoleFilter(logging.Filter):
    def __init__(self, ours: int, libraries: int) -> None:
        super().__init__()
        self.ours, self.libraries = ours, libraries

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= (self.ours if _is_ours(record.name) else self.libraries)


def _level(name: str) -> int:
    level = logging.getLevelName(name.strip().upper())
    if not isinstance(level, int):
        raise UsageError(f"{ENV}={name!r} is not a logging level (DEBUG, INFO, WARNING, ERROR)")
    return level


def setup_logging(verbose: bool = False) -> None:
    """Idempotent: a second call (a stage main after the CLI) replaces the handler instead of adding one."""
    env = os.environ.get(ENV, "").strip()
    if env:
        ours = libraries = _level(env)
    elif verbose:
        ours = libraries = logging.DEBUG
    else:
        ours, libraries = logging.INFO, logging.WARNING
    quiet = libraries >= logging.WARNING
    for message, category, module in LIBRARY_DEPRECATIONS:
        warnings.filterwarnings("ignore" if quiet else "default", message=message, category=category,
                                module=module)
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "_tiermem", False)]:
        root.removeHandler(handler)
    if root.handlers:  # the host process (an application, pytest) configured logging: leave its console alone
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(_ConsoleFilter(ours, libraries))
    handler._tiermem = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(min(ours, libraries))
    # transformers and datasets log through their own handlers; keep them at warnings unless asked.
    for name in ("transformers", "datasets", "huggingface_hub"):
        logging.getLogger(name).setLevel(libraries)


def print_result(result: Any) -> int:
    """A stage's result on stdout as indented JSON (what the command prints last), and its exit code 0."""
    print(json.dumps(result, indent=2), flush=True)
    return 0
