"""Start real local servers for integration tests, on 127.0.0.1 only, stopped by PID."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode} before {url} was healthy")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} not healthy after {timeout_s}s")


@contextlib.contextmanager
def transformers_serve(model_dir: str | Path, log_path: Path) -> Iterator[str]:
    """`transformers serve MODEL` on a free loopback port; yields the OpenAI base_url."""
    exe = shutil.which("transformers", path=os.path.dirname(sys.executable)) or shutil.which("transformers")
    if exe is None:
        raise RuntimeError("the `transformers` CLI is missing: pip install 'transformers[serving]'")
    port = free_port()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [exe, "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu",
             "--dtype", "float32", "--default-seed", "0"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        try:
            wait_healthy(f"http://127.0.0.1:{port}/health", proc)
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
