"""The client side of the hub tests: subprocesses with their own HF_* environment, against
tests/helpers/hub_server.py."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


TOKEN = "hf_test_secret_token_123"


PULL = """
import json, sys
from huggingface_hub import ModelCard
from serving.hub import pull
from serving.routers import Router
repo, rev, q, s = sys.argv[1], sys.argv[2] or None, sys.argv[3], json.loads(sys.argv[4])
path = pull(repo, revision=rev)
card = ModelCard.load(repo)  # README.md downloaded from the hub, metadata parsed by huggingface_hub
out = {"path": str(path), "card": card.data.to_dict(), "text": card.text}
if sys.argv[5] == "route":
    options = {"base_model": sys.argv[6]} if len(sys.argv) > 6 else {}  # a base that was a local directory
    router = Router.from_pretrained(repo, revision=rev, **options)
    out.update(p=router.route(q, s).p_escalate, threshold_logit=router.threshold_logit)
print(json.dumps(out))
"""


def _env(endpoint: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE"))}
    env.update(HF_ENDPOINT=endpoint, HF_TOKEN=TOKEN, HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1",
               PYTHONPATH=str(ROOT), TIERMEM_THREADS="1")
    return env


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert TOKEN not in proc.stdout + proc.stderr  # the token is never printed
    return proc
