"""The console: our INFO lines, library warnings; library INFO/DEBUG (bm25s's "Building index from tokens")
only with --verbose or TIERMEM_LOG. Run in subprocesses: logging setup is process-global."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import logging, sys, warnings
import tiermem_cli.cli as cli

def probe(argv):
    import bm25s  # sets its own logger to DEBUG on import, after our setup
    from tiermem.memory.keyword import KeywordIndex  # noqa: F401  (imports bm25s the way stages do)
    logging.getLogger("bm25s").debug("Building index from tokens")
    logging.getLogger("matplotlib.font_manager").info("generated new fontManager")
    logging.getLogger("urllib3").warning("a library warning")
    logging.getLogger("router_train.lm.sft").info("our progress line")
    logging.getLogger("labeling.run").debug("our debug line")
    warnings.warn_explicit("`is_gradient_checkpointing` is deprecated and will be removed in v6.", FutureWarning,
                           "modeling_utils.py", 3312, module="transformers.modeling_utils")  # as peft triggers it
    return 0

cli.STAGES["probe"] = ("__main__:probe", "test probe")
sys.modules["__main__"].probe = probe
sys.exit(cli.main(sys.argv[1:]))
"""


def _console(*args: str, env: dict | None = None) -> str:
    import os

    base = {k: v for k, v in os.environ.items() if k != "TIERMEM_LOG"}
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, capture_output=True, text=True,
                          env={**base, "PYTHONPATH": str(ROOT), **(env or {})}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


def test_default_console_is_quiet_but_keeps_ours_and_library_warnings():
    out = _console("probe")
    assert "INFO router_train.lm.sft: our progress line" in out and "WARNING urllib3: a library warning" in out
    assert "Building index from tokens" not in out and "fontManager" not in out and "our debug line" not in out
    assert "is_gradient_checkpointing" not in out  # a library-internal deprecation, not ours to fix


def test_verbose_and_tiermem_log_let_everything_through():
    for args, env in ((("--verbose", "probe"), None), (("probe", "-v"), None), (("probe",), {"TIERMEM_LOG": "DEBUG"})):
        out = _console(*args, env=env)
        assert "DEBUG bm25s: Building index from tokens" in out, args
        assert "INFO matplotlib.font_manager: generated new fontManager" in out
        assert "DEBUG labeling.run: our debug line" in out and "is_gradient_checkpointing" in out
    out = _console("probe", env={"TIERMEM_LOG": "WARNING"})
    assert "our progress line" not in out and "a library warning" in out


def test_bad_tiermem_log_is_one_clear_error():
    import os

    proc = subprocess.run([sys.executable, "-c", PROBE, "probe"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "TIERMEM_LOG": "loud"}, timeout=120)
    assert proc.returncode == 2 and "TIERMEM_LOG='loud' is not a logging level" in proc.stderr
