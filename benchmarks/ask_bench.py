"""`POST /ask` latency through the real HTTP server: the memory runtime warm. The first request sends the
shipped example's conversation inline (the server builds or opens its tiers and loads the embedder and the reader:
the one cold request of the process), then `requests` questions are asked by conv_id, warm, on each policy.

Latencies are client-side wall seconds per request, beside the CPU seconds the process spent on it (the server runs
in this process, one request at a time: on cores shared with other jobs the CPU seconds are what the request costs,
the wall seconds what it waited too); errors are non-200 answers. With no trained reader at `reader`,
the packaged MiniLM with an untrained head and a throwaway floor stands in (same model size: speed only).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import table
from benchmarks.server_bench import _serve, percentile


@dataclass
class AskBenchConfig:
    enabled: bool = True
    router: str | None = None  # a router run dir for policy `router` (e.g. runs/reader); None: always-escalate
    reader: str = "runs/reader_pretrain"  # the extractive answerer's reader; missing: untrained MiniLM (speed only)
    workdir: str = "runs/bench/ask_memory"  # the server's tier cache (the inline conversation is built here once)
    conversation: str = "tomas-assistant"  # a conversation of the shipped example (tiermem/data/example_tiermem.json)
    requests: int = 20  # warm requests per policy, the conversation's questions cycled
    policies: list[str] = field(default_factory=lambda: ["summary", "research"])


def speed_reader(path: Path) -> Path:
    """The packaged MiniLM with an untrained one-logit head and a floor file bound to it: /ask's cost, not answers."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from router_train.reader.answer_floor import write_floor
    from tiermem.models.specs import resolve_model
    from tiermem.runs import safe_io

    if (path / "answer_floor.json").is_file():
        return path
    base = str(resolve_model("packaged:all-minilm-l6-v2"))
    path.mkdir(parents=True, exist_ok=True)
    safe_io.save_pretrained(AutoModelForSequenceClassification.from_pretrained(base, num_labels=1), path)
    safe_io.save_pretrained(AutoTokenizer.from_pretrained(base), path)
    write_floor(path, {"floor": 0.0, "method": "speed only: an untrained head, no calibration"})
    return path


def _calls(base: str, bodies: list[dict[str, Any]]) -> list[tuple[float, int, float]]:
    """(wall s, status, process CPU s) per request, one after another."""
    import httpx

    out = []
    with httpx.Client(timeout=1800) as client:
        for body in bodies:
            start, cpu = time.perf_counter(), time.process_time()
            status = client.post(f"{base}/ask", json=body).status_code
            out.append((time.perf_counter() - start, status, time.process_time() - cpu))
    return out


def run(cfg: AskBenchConfig) -> dict[str, Any]:
    from serving.ask_api import AskServeConfig
    from serving.routers.base import Router
    from serving.routers.fixed import AlwaysEscalate
    from serving.server import ServeConfig, create_app
    from tiermem.data.tiermem_format import EXAMPLE_PATH
    from tiermem.memory.memory_config import MemoryConfig

    reader = Path(cfg.reader)
    trained = (reader / "model.safetensors").is_file()
    if not trained:
        reader = speed_reader(Path(cfg.workdir).parent / "ask_speed_reader")
    doc = json.loads(EXAMPLE_PATH.read_text(encoding="utf-8"))
    conv = next(c for c in doc["conversations"] if c["id"] == cfg.conversation)
    questions = [q["question"] for q in conv.get("questions", [])] or ["What happened?"]
    router = Router.from_pretrained(cfg.router) if cfg.router else AlwaysEscalate()
    serve = ServeConfig(ask=AskServeConfig(workdir=cfg.workdir, memory=MemoryConfig(reader=str(reader))))
    server, thread, base = _serve(create_app(router, serve))
    try:
        inline = {k: v for k, v in conv.items() if k != "questions"}
        cold = _calls(base, [{"question": questions[0], "conversation": inline, "policy": cfg.policies[0]}])[0]
        cases = []
        for policy in cfg.policies:
            bodies = [{"question": questions[i % len(questions)], "conv_id": cfg.conversation, "policy": policy}
                      for i in range(cfg.requests)]
            calls = _calls(base, bodies)
            lat, cpu = [t for t, _, _ in calls], [c for _, _, c in calls]
            cases.append({"policy": policy, "requests": len(calls), "errors": sum(s != 200 for _, s, _ in calls),
                          "p50_s": percentile(lat, 0.5), "p95_s": percentile(lat, 0.95), "max_s": max(lat),
                          "cpu_p50_s": percentile(cpu, 0.5), "cpu_p95_s": percentile(cpu, 0.95)})
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    what = f"reader {reader}" + ("" if trained else " (untrained MiniLM head: speed only)")
    text = "\n".join([
        f"/ask: conversation {cfg.conversation} of the shipped example, {what}; first request (inline: tiers and "
        f"models loaded in the process) {cold[0]:.2f} s ({cold[2]:.2f} CPU s), status {cold[1]}",
        table(["policy", "warm requests", "errors", "p50 s", "p95 s", "max s", "CPU p50 s", "CPU p95 s"],
              [[c["policy"], c["requests"], c["errors"], c["p50_s"], c["p95_s"], c["max_s"], c["cpu_p50_s"],
                c["cpu_p95_s"]] for c in cases])])
    return {"reader": str(reader), "trained_reader": trained, "first_request_s": cold[0],
            "first_request_cpu_s": cold[2], "first_request_status": cold[1], "cases": cases, "text": text}
