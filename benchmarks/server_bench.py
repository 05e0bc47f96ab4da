"""`/route` latency through the real HTTP server (uvicorn on 127.0.0.1): 1 client and N concurrent clients,
and /route while a long chat request runs (the chat lane must not delay /route beyond the queue bound).

The server is the one `make serve` runs (serving.server.create_app), over the same router model the router
section uses; latencies are client-side wall times per request, errors are non-200 answers.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from benchmarks.common import table


@dataclass
class ServerBenchConfig:
    enabled: bool = True
    router: str | None = None  # a trained run dir; None: the untrained base model (speed only)
    model: str = "packaged:smollm2-135m-instruct"
    data: str | None = "runs/label/dataset"
    split: str = "test"
    data_path: str | None = None
    n_prompts: int = 16
    k_summaries: int = 5
    clients: int = 20  # the concurrent case; the single-client case always runs too
    requests_per_client: int = 3
    single_requests: int = 20
    chat_prompt_words: int = 600  # the long chat request of the interference case
    chat_max_tokens: int = 64
    route_batch_size: int = 16
    queue_timeout_s: float = 10.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _serve(app: Any) -> tuple[Any, threading.Thread, str]:
    import uvicorn

    from tests.helpers.servers import free_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    return server, thread, f"http://127.0.0.1:{port}"


def _route_calls(base: str, bodies: list[dict[str, Any]]) -> list[tuple[float, int]]:
    import httpx

    out = []
    with httpx.Client(timeout=120) as client:
        for body in bodies:
            start = time.perf_counter()
            status = client.post(f"{base}/route", json=body).status_code
            out.append((time.perf_counter() - start, status))
    return out


def _summary(name: str, calls: list[tuple[float, int]], wall_s: float) -> dict[str, Any]:
    lat = [t for t, _ in calls]
    return {"case": name, "requests": len(calls), "errors": sum(s != 200 for _, s in calls),
            "p50_s": percentile(lat, 0.5), "p95_s": percentile(lat, 0.95), "max_s": max(lat),
            "requests_per_s": len(calls) / wall_s if wall_s else None}


def run(cfg: ServerBenchConfig) -> dict[str, Any]:
    import httpx

    from benchmarks.router_bench import RouterBenchConfig, router_inputs
    from serving.routers.local import LocalRouter
    from serving.server import ServeConfig, create_app
    from tiermem.models.specs import load_causal_lm

    if cfg.router:
        router, name = LocalRouter.load(cfg.router), cfg.router
    else:
        model, tokenizer = load_causal_lm(cfg.model)
        router, name = LocalRouter(model, tokenizer, mode="fast"), f"{cfg.model} (untrained: speed only)"
    questions, summaries, source = router_inputs(RouterBenchConfig(
        data=cfg.data, split=cfg.split, data_path=cfg.data_path, n_prompts=cfg.n_prompts, k_summaries=cfg.k_summaries))
    bodies = [{"question": q, "summaries": [{"text": s.get("text", ""), "date": s.get("date")} for s in ss]}
              for q, ss in zip(questions, summaries, strict=True)]
    serve_cfg = ServeConfig(route_batch_size=cfg.route_batch_size, queue_timeout_s=cfg.queue_timeout_s,
                            max_chat_tokens=max(256, cfg.chat_max_tokens), max_queue=max(32, cfg.clients + 2))
    server, thread, base = _serve(create_app(router, serve_cfg))
    try:
        _route_calls(base, bodies[:2])  # warm-up: lazy init, allocator growth
        pick = [bodies[i % len(bodies)] for i in range(max(cfg.single_requests, cfg.clients * cfg.requests_per_client))]
        start = time.perf_counter()
        single = _summary("1 client", _route_calls(base, pick[: cfg.single_requests]), time.perf_counter() - start)
        per_client = [pick[i * cfg.requests_per_client:(i + 1) * cfg.requests_per_client] for i in range(cfg.clients)]
        start = time.perf_counter()
        with ThreadPoolExecutor(cfg.clients) as pool:
            calls = [c for chunk in pool.map(lambda b: _route_calls(base, b), per_client) for c in chunk]
        many = _summary(f"{cfg.clients} clients", calls, time.perf_counter() - start)

        chat_body = {"messages": [{"role": "user", "content": " ".join(["memory"] * cfg.chat_prompt_words)}],
                     "max_tokens": cfg.chat_max_tokens}
        chat: dict[str, Any] = {}

        def run_chat() -> None:
            t0 = time.perf_counter()
            chat["status"] = httpx.post(f"{base}/v1/chat/completions", json=chat_body, timeout=600).status_code
            chat["seconds"] = time.perf_counter() - t0

        chat_thread = threading.Thread(target=run_chat)
        chat_thread.start()
        time.sleep(0.2)  # let the chat request reach the model
        start = time.perf_counter()
        during: list[tuple[float, int]] = []
        while chat_thread.is_alive() and len(during) < cfg.single_requests:
            during += _route_calls(base, [pick[len(during) % len(pick)]])
        busy = _summary("1 client, chat running", during or [(0.0, 200)], time.perf_counter() - start)
        chat_thread.join()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    cases = [single, many, busy]
    within = busy["max_s"] <= cfg.queue_timeout_s
    text = "\n".join([
        f"server: {name}; /route bodies: {len(bodies)} from {source}; route_batch_size {cfg.route_batch_size}, "
        f"queue_timeout_s {cfg.queue_timeout_s}",
        table(["case", "requests", "errors", "p50 s", "p95 s", "max s", "req/s"],
              [[c["case"], c["requests"], c["errors"], c["p50_s"], c["p95_s"], c["max_s"], c["requests_per_s"]]
               for c in cases]),
        f"chat request ({cfg.chat_prompt_words} words, max_tokens {cfg.chat_max_tokens}): "
        f"{chat.get('seconds', 0):.2f} s, status {chat.get('status')}; /route max while it ran "
        f"{busy['max_s']:.2f} s ({'within' if within else 'OVER'} the {cfg.queue_timeout_s:g} s queue bound)",
    ])
    return {"name": name, "source": source, "cases": cases, "chat": chat, "route_within_bound_during_chat": within,
            "text": text}
