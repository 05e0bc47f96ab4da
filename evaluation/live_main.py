"""`python -m evaluation.live_main [--config PATH] [key=value ...]`: the live evaluation alone (evaluation.live_eval),
on named conversations (`live.conversations=[...]`) or a labeled dataset's split, without the replay metrics.
Its own module: evaluation.evaluate (EvalConfig) already imports evaluation.live_eval.
"""

from __future__ import annotations

import sys

from evaluation.evaluate import EvalConfig
from evaluation.live_eval import run_live


def main(argv: list[str]) -> int:
    from serving.routers import build
    from tiermem.settings.config import parse_cli

    cfg = parse_cli(EvalConfig, argv)
    router = None if cfg.router.kind == "none" or "routed" not in cfg.live.policies else build(cfg.router)
    run_live(cfg, router, "none" if router is None else router.name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
