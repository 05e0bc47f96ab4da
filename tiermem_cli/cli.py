"""`tiermem-router <stage> [--config PATH] [key=value ...]`: one entry point for every stage."""

from __future__ import annotations

import importlib
import logging
import sys

from tiermem.runs.logs import setup_logging
from tiermem.settings.errors import EXIT_USAGE, report_error

# stage -> (module:function, one-line help). Each function takes argv and returns an exit code.
STAGES: dict[str, tuple[str, str]] = {
    "label": ("labeling.stage:main", "hindsight labeling -> a labeled DatasetDict (shard=i/n: one shard of it)"),
    "label-merge": ("labeling.merge:main", "check the shards of a sharded label run and write its DatasetDict"),
    "audit": ("labeling.audit:main", "a review sheet of sampled labels; with a judge, agreement and Cohen's kappa"),
    "sft": ("router_train.lm.sft:main", "LoRA SFT of the router (TRL SFTTrainer)"),
    "grpo": ("router_train.lm.grpo:main", "GRPO refinement from the SFT adapter (TRL GRPOTrainer)"),
    "calibrate": ("evaluation.calibrate:main", "pick and store the escalation threshold"),
    "eval": ("evaluation.evaluate:main", "routing metrics and the accuracy-cost trade-off"),
    "reader-pretrain": ("router_train.reader.pretrain:main", "pre-train the unit reader's base on SQuAD 2.0 (cached)"),
    "answer-floor": ("router_train.reader.chat_floor:main", "calibrate a reader's \"not stated\" floor for ask"),
    "unit-reader": ("router_train.reader.unit_reader:main", "train the unit reader router (a cross-encoder per unit)"),
    "fit-features": ("router_train.fit_features:main", "fit the serve-time feature router (or make a top1-score one)"),
    "push": ("serving.hub:main", "push a trained router with its model card to the hub"),
    "serve": ("serving.server:main", "HTTP endpoint over a trained router"),
    "ingest": ("tiermem_cli.ingest:main", "ingest one conversation and answer a question through the router"),
    "ask": ("tiermem_cli.ingest:main", "ask any question about a conversation (ingest's alias): route, answer, cost"),
    # its line is written from the demo's own step list (_usage), so it cannot go stale
    "demo": ("tiermem_cli.demo:main", "{demo_steps} on the embedded default"),
}


def _usage() -> str:
    lines = ["usage: tiermem-router [--verbose] <stage> [--config PATH] [key=value ...]", "", "stages:"]
    from tiermem_cli.steps import STEPS

    demo_steps = " -> ".join(STEPS)
    lines += [f"  {name:<12} {help_.format(demo_steps=demo_steps)}" for name, (_, help_) in STAGES.items()]
    lines += ["", "`tiermem-router <stage> --help` lists the stage's config keys with their defaults."]
    lines += ["", "--verbose (or -v, anywhere on the line) also shows library INFO/DEBUG logs and deprecation",
              "warnings; TIERMEM_LOG=<level> sets one level for every logger."]
    return "\n".join(lines)


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
        return EXIT_USAGE
    target, _ = STAGES[stage]
    module, func = target.split(":")
    try:
        setup_logging(verbose)
        from tiermem.text.redact import RedactingFilter

        for handler in logging.getLogger().handlers:  # every logged line: request URLs may carry user:password@
            handler.addFilter(RedactingFilter())
        fn = getattr(importlib.import_module(module), func)
        return int(fn(rest) or 0)
    except Exception as exc:  # stages without their own stage_main wrapper, and logging setup
        return report_error(stage, exc)


if __name__ == "__main__":
    sys.exit(main())
