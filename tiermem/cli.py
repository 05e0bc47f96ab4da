"""`tiermem-router <stage> [--config PATH] [key=value ...]`: one entry point for every stage."""

from __future__ import annotations

import importlib
import os
import sys

from tiermem.config import ConfigError
from tiermem.logs import setup_logging

# stage -> (module:function, one-line help). Each function takes argv and returns an exit code.
STAGES: dict[str, tuple[str, str]] = {
    "label": ("labeling.run:main", "hindsight labeling -> a labeled DatasetDict"),
    "sft": ("router_train.sft:main", "LoRA SFT of the router (TRL SFTTrainer)"),
    "grpo": ("router_train.grpo:main", "GRPO refinement from the SFT adapter (TRL GRPOTrainer)"),
    "calibrate": ("serving.calibrate:main", "pick and store the escalation threshold"),
    "eval": ("router_train.evaluate:main", "routing metrics and the accuracy-cost trade-off"),
    "push": ("serving.hub:main", "push a trained router with its model card to the hub"),
    "serve": ("serving.server:main", "HTTP endpoint over a trained router"),
    "ingest": ("tiermem.ingest:main", "ingest one conversation and answer a question through the router"),
    "ask": ("tiermem.ingest:main", "ask any question about a conversation (ingest's alias): route, answer, cost"),
    "demo": ("tiermem.demo:main", "label -> sft -> grpo -> calibrate -> eval on the embedded default"),
}

# configs/<folder>/*.yaml -> the dataclass each file must parse into (tests/test_configs.py validates them all).
CONFIG_CLASSES: dict[str, str] = {
    "label": "labeling.run:LabelConfig",
    "sft": "router_train.sft:SFTRecipeConfig",
    "grpo": "router_train.grpo:GRPORecipeConfig",
    "calibrate": "serving.calibrate:CalibrateConfig",
    "eval": "router_train.evaluate:EvalConfig",
    "push": "serving.hub:PushConfig",
    "serve": "serving.server:ServeConfig",
    "ingest": "tiermem.ingest:IngestConfig",
    "memory": "tiermem.memory.runtime:MemoryConfig",
    "demo": "tiermem.demo:DemoConfig",
    "bench": "benchmarks.run:BenchConfig",
}

# Errors that mean "bad input", reported as one line instead of a traceback.
_USER_ERRORS = (ConfigError, FileNotFoundError, ValueError, PermissionError)


def _usage() -> str:
    lines = ["usage: tiermem-router [--verbose] <stage> [--config PATH] [key=value ...]", "", "stages:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in STAGES.items()]
    lines += ["", "--verbose (or -v, anywhere on the line) also shows library INFO/DEBUG logs and deprecation",
              "warnings; TIERMEM_LOG=<level> sets one level for every logger."]
    return "\n".join(lines)


def _user_error_types() -> tuple[type[BaseException], ...]:
    extra: list[type[BaseException]] = []
    for mod, name in (("tiermem.models", "ModelSpecError"), ("tiermem.llm.base", "LLMError"),
                      ("serving.contract", "ContractVersionError")):
        try:
            extra.append(getattr(importlib.import_module(mod), name))
        except (ImportError, AttributeError):
            pass
    try:
        from tiermem.data.conversations import DataError

        extra.append(DataError)
    except ImportError:
        pass
    return _USER_ERRORS + tuple(extra)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = any(a in ("--verbose", "-v") for a in argv)
    argv = [a for a in argv if a not in ("--verbose", "-v")]
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    stage, rest = argv[0], argv[1:]
    if stage not in STAGES:
        print(f"tiermem-router: unknown stage {stage!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    target, _ = STAGES[stage]
    module, func = target.split(":")
    try:
        setup_logging(verbose)
        fn = getattr(importlib.import_module(module), func)
        return int(fn(rest) or 0)
    except _user_error_types() as exc:
        if os.environ.get("TIERMEM_DEBUG"):
            raise
        print(f"tiermem-router {stage}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
