"""`make serve`: a small JSON API over an in-process router (POST /route, POST /ask, GET /health,
POST /v1/chat/completions); endpoints, concurrency, limits and failures: docs/serving.md."""

from __future__ import annotations

import functools
import json
import logging
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from serving.ask_api import AskServeConfig, AskService, check_readers, validate_ask_request
from serving.request_error import RequestError, check_text, checked_question
from serving.routers import RouterSpec, as_router_spec, build
from serving.routers.base import logit, sigmoid
from tiermem import contract
from tiermem.settings import ranges
from tiermem.settings.config import AT_LEAST_ONE, check_declared, parse_cli
from tiermem.settings.errors import DataError, UsageError, stage_main

log = logging.getLogger(__name__)


@dataclass
class ServeConfig:
    router: RouterSpec = field(default_factory=RouterSpec)  # a run directory / hub id, always-answer, or a mapping
    host: str = "127.0.0.1"
    port: int = field(default=8088, metadata={"ge": 0, "le": 65_535})
    max_body_bytes: int = field(default=200_000, metadata=AT_LEAST_ONE)
    max_question_chars: int = field(default=2_000, metadata=AT_LEAST_ONE)
    max_summary_chars: int = field(default=4_000, metadata=AT_LEAST_ONE)  # per summary; the contract clips further
    # per summary date: printed into an LM router's prompt whole ("Tuesday, 7 May 2023 ...")
    max_date_chars: int = field(default=64, metadata=AT_LEAST_ONE)
    chat_passthrough: bool = True
    max_chat_tokens: int = field(default=256, metadata=AT_LEAST_ONE)
    # chat: rendered prompt tokens; 413 above (bounds one request's compute)
    max_prompt_tokens: int = field(default=2_048, metadata=AT_LEAST_ONE)
    max_queue: int = field(default=32, metadata=AT_LEAST_ONE)  # per lane (route / chat): running + waiting; 503 beyond
    queue_timeout_s: float = field(default=10.0, metadata={"gt": 0})  # a request that cannot start within this: 503
    route_batch_size: int = field(default=16, metadata=AT_LEAST_ONE)  # /route requests scored together when queued
    ask: AskServeConfig = field(default_factory=AskServeConfig)  # POST /ask: the memory runtime, warm

    def __post_init__(self) -> None:
        self.router = as_router_spec(self.router)
        check_declared(self)


def validate_route_request(body: Any, cfg: ServeConfig, top_k: int | None = None,
                           summary_fields: tuple[str, ...] = (), router_kind: str = "loaded",
                           ) -> tuple[str, list[dict[str, Any]], float | None]:
    """Check a /route body; every failure names the field. `top_k`: the most summaries the router was trained on."""
    question = checked_question(body, ("question", "summaries", "threshold_prob", "threshold_logit"),
                                "'question' and 'summaries'", cfg.max_question_chars)
    summaries = body.get("summaries")
    if not isinstance(summaries, list):
        raise RequestError(422, "'summaries' must be a list of {text, date} objects (may be empty)")
    most = min(contract.MAX_SUMMARIES, top_k or contract.MAX_SUMMARIES)
    if len(summaries) > most:
        why = "it was trained on" if top_k and top_k < contract.MAX_SUMMARIES else "the contract holds"
        raise RequestError(422, f"'summaries' has {len(summaries)} items; the router reads at most {most} ({why} "
                                f"{most}; send the top-ranked ones)")
    clean = []
    for i, s in enumerate(summaries):
        if not isinstance(s, dict) or not isinstance(s.get("text"), str):
            raise RequestError(422, f"summaries[{i}] must be an object with a string 'text'")
        if len(s["text"]) > cfg.max_summary_chars:
            raise RequestError(413, f"summaries[{i}].text has {len(s['text'])} characters; "
                                    f"the limit is {cfg.max_summary_chars}")
        check_text(s["text"], f"summaries[{i}].text")
        date = s.get("date")
        if date is not None and not isinstance(date, str):
            raise RequestError(422, f"summaries[{i}].date must be a string or null")
        if date is not None:
            if len(date) > cfg.max_date_chars:  # the prompt prints it unclipped: 8 KB of date held the server 38 s
                raise RequestError(422, f"summaries[{i}].date has {len(date)} characters; the limit is "
                                        f"{cfg.max_date_chars} (max_date_chars)")
            check_text(date, f"summaries[{i}].date")
        unit = {"text": s["text"], "date": date}
        if s.get("score") is not None:  # the routers that read it were fitted on cosine similarities
            unit["score"] = ranges.retrieval_score(s["score"], f"summaries[{i}].score", _unprocessable)
        for name in summary_fields:
            if unit.get(name) is None:
                raise RequestError(422, f"summaries[{i}].{name} is required by the {router_kind} router "
                                        f"(send each summary's retrieval {name})")
        clean.append(unit)
    prob = body.get("threshold_prob")
    if prob is not None:
        prob = ranges.probability(prob, "'threshold_prob' (absent: the router's own threshold)", _unprocessable)
    logit_t = body.get("threshold_logit")
    if logit_t is not None:
        if prob is not None:
            raise RequestError(422, "give 'threshold_prob' (a probability) or 'threshold_logit', not both")
        # finite, as the stored rule (tiermem_router.json refuses an infinite threshold): ANSWER-all is a large
        # finite log-odds, never Infinity
        return question, clean, ranges.finite(logit_t, "'threshold_logit' (log-odds; absent: the router's own)",
                                              _unprocessable)
    return question, clean, None if prob is None else logit(prob)  # the edge where a probability becomes log-odds


def _unprocessable(message: str) -> RequestError:
    return RequestError(422, message)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Lane:
    """One model call at a time, at most `max_queue` requests running or waiting; waiting ones run together in the
    next batch (`batch_size`)."""

    def __init__(self, run_batch: Any, max_queue: int, batch_size: int, timeout_s: float) -> None:
        self.run_batch, self.max_queue, self.batch_size, self.timeout_s = run_batch, max_queue, batch_size, timeout_s
        self.lock = threading.Lock()  # held while the model runs
        self.cv = threading.Lock()  # guards the queue below
        self.pending: list[_Job] = []
        self.in_flight = 0

    def submit(self, item: Any) -> Any:
        """Run `item` (in a batch with others waiting); RequestError(503) when full or it cannot start in time."""
        job = _Job(item)
        with self.cv:
            if self.in_flight >= self.max_queue:
                raise RequestError(503, f"server busy: {self.in_flight} requests queued (limit {self.max_queue}); "
                                        "retry later")
            self.in_flight += 1
            self.pending.append(job)
        try:
            deadline = time.monotonic() + self.timeout_s
            while not job.done.is_set():
                if self.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                    try:
                        self._drain_one_batch()
                    finally:
                        self.lock.release()
                    continue
                with self.cv:
                    if job in self.pending:  # not started: give up its place
                        self.pending.remove(job)
                        raise RequestError(503, f"server busy: the request did not start within "
                                                f"{self.timeout_s:g} s; retry later")
                job.done.wait()  # already running in another thread's batch
        finally:
            with self.cv:
                self.in_flight -= 1
        if job.error is not None:
            raise job.error
        return job.result

    def _drain_one_batch(self) -> None:
        with self.cv:
            batch, self.pending = self.pending[: self.batch_size], self.pending[self.batch_size:]
        if not batch:
            return
        try:
            self._run(batch)
        except Exception as exc:
            if len(batch) == 1:
                batch[0].error = exc
            else:  # one request's failure must not fail its neighbours: rerun them one by one
                log.warning("batch of %d failed (%s: %s); rerunning its requests one by one", len(batch),
                            type(exc).__name__, exc)
                for job in batch:
                    try:
                        self._run([job])
                    except Exception as one:
                        job.error = one
        for job in batch:
            job.done.set()

    def _run(self, batch: list[_Job]) -> None:
        results = self.run_batch([j.item for j in batch])
        if len(results) != len(batch):
            raise RuntimeError(f"internal: {len(results)} results for {len(batch)} requests")
        for job, res in zip(batch, results, strict=True):
            job.result = res


class _Job:
    def __init__(self, item: Any) -> None:
        self.item, self.result, self.error, self.done = item, None, None, threading.Event()


def _route_many(router: Any, items: list[tuple[str, list[dict[str, Any]], float | None]]) -> list[Any]:
    """Route queued requests with one route_batch call per distinct threshold, answers in request order."""
    out: list[Any] = [None] * len(items)
    for threshold in dict.fromkeys(t for _, _, t in items):
        idx = [i for i, (_, _, t) in enumerate(items) if t == threshold]
        decisions = router.route_batch([items[i][0] for i in idx], [items[i][1] for i in idx],
                                       threshold_logit=threshold)
        for i, d in zip(idx, decisions, strict=True):
            out[i] = d
    return out


def _chat_prepare(router: Any, body: Any, cfg: ServeConfig) -> Any:
    """Validate a chat body (RequestError naming the field) and return the generation to run in the chat lane."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
        raise RequestError(422, "'messages' must be a non-empty list of {role, content}")
    for i, m in enumerate(body["messages"]):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant") \
                or not isinstance(m.get("content"), str):
            raise RequestError(422, f"messages[{i}] must be {{role: system|user|assistant, content: string}}")
        check_text(m["content"], f"messages[{i}].content")
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    max_tokens = 64 if max_tokens is None else max_tokens
    if not _is_int(max_tokens) or not 1 <= max_tokens <= cfg.max_chat_tokens:
        raise RequestError(422, f"'max_tokens' must be an integer in [1, {cfg.max_chat_tokens}]")
    if not isinstance(body.get("logprobs", False), bool | None):
        raise RequestError(422, "'logprobs' must be true or false")
    top = body.get("top_logprobs") or 0
    if not _is_int(top) or not 0 <= top <= 20:
        raise RequestError(422, "'top_logprobs' must be an integer in [0, 20]")
    top = top if body.get("logprobs") else 0
    temperature = body.get("temperature") or 0
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or temperature != 0:
        raise RequestError(422, "this endpoint decodes greedily; send temperature 0 or omit it")
    prompt = router.tokenizer.apply_chat_template(body["messages"], tokenize=False, add_generation_prompt=True)
    n_prompt = len(router.tokenizer(prompt, add_special_tokens=False).input_ids)
    if n_prompt > cfg.max_prompt_tokens:
        raise RequestError(413, f"prompt has {n_prompt} tokens; the limit is {cfg.max_prompt_tokens}")
    return functools.partial(_chat_generate, router, body, prompt, max_tokens, top)


def _chat_generate(router: Any, body: dict[str, Any], prompt: str, max_tokens: int, top: int) -> dict[str, Any]:
    gen = router.generate([prompt], max_new_tokens=max_tokens, top_logprobs=max(top, 1) if body.get("logprobs")
                          else 0)[0]
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": gen["text"]},
                              "finish_reason": gen["finish_reason"], "logprobs": None}
    if body.get("logprobs"):
        choice["logprobs"] = {"content": [
            {"token": s["token"], "logprob": s["logprob"], "bytes": list(s["token"].encode()),
             "top_logprobs": [{**t, "bytes": list(t["token"].encode())} for t in s["top_logprobs"][:top]]}
            for s in gen["logprobs"]]}
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:16]}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model") or "router", "choices": [choice],
            "usage": {"prompt_tokens": gen["prompt_tokens"], "completion_tokens": gen["completion_tokens"],
                      "total_tokens": gen["prompt_tokens"] + gen["completion_tokens"]}}


def _submit(lane: Lane, item: Any) -> Any:
    """Run `item` in `lane`; its failure is its own response (internal: a 500 with an error id, traceback logged)."""
    try:
        return lane.submit(item)
    except RequestError:
        raise
    except (UsageError, DataError) as exc:
        raise RequestError(422, f"the router refused this request: {exc}") from None
    except Exception:
        error_id = uuid.uuid4().hex[:12]
        log.exception("internal error while serving a request (error id %s)", error_id)
        raise RequestError(500, f"internal error (error id {error_id}); the server log has the details",
                           error_id) from None


def create_app(router: Any, cfg: ServeConfig | None = None, answer_reader: Any = None) -> Any:
    cfg = cfg or ServeConfig()
    app = FastAPI(title="tiermem router", docs_url=None, redoc_url=None)
    meta = getattr(router, "meta", None)
    route_lane = Lane(functools.partial(_route_many, router), cfg.max_queue, cfg.route_batch_size,
                      cfg.queue_timeout_s)
    chat_lane = Lane(lambda jobs: [job() for job in jobs], cfg.max_queue, 1, cfg.queue_timeout_s)
    ask_lane = Lane(lambda jobs: [job() for job in jobs], cfg.max_queue, 1, cfg.queue_timeout_s)
    app.state.lanes = {"route": route_lane, "chat": chat_lane, "ask": ask_lane}
    asker = AskService(cfg.ask, router, answer_reader) if cfg.ask.enabled else None
    app.state.ask = asker

    async def read_json(request: Request) -> Any:
        limit = cfg.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise RequestError(413, f"body has {declared} bytes; the limit is {limit}")
        raw = bytearray()
        async for chunk in request.stream():  # counted as it arrives: an oversized body is never held whole
            raw += chunk
            if len(raw) > limit:
                raise RequestError(413, f"body has more than {limit} bytes; the limit is {limit}")
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RequestError(400, f"body is not valid JSON: {exc}") from None
        except RecursionError:
            raise RequestError(400, "body is not valid JSON: nested too deeply") from None

    @app.exception_handler(RequestError)
    async def _request_error(_: Request, exc: RequestError) -> JSONResponse:
        body: dict[str, Any] = {"error": str(exc)}
        if exc.error_id is not None:
            body["error_id"] = exc.error_id
        return JSONResponse(body, status_code=exc.status)

    # /route decisions since start, and how many read a signal outside the router's training range (clipped)
    served = {"decisions": 0, "clipped": 0}

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "router": router.kind, "mode": getattr(router, "mode", None),
                "contract_version": contract.CONTRACT_VERSION, "threshold_logit": router.threshold_logit,
                "threshold_prob": sigmoid(router.threshold_logit),
                "base_model": meta.base_model if meta else None, "chat_passthrough": _chat_enabled(),
                "route_decisions": served["decisions"], "route_decisions_clipped": served["clipped"],
                "ask": asker.health() if asker is not None else None}

    def _chat_enabled() -> bool:
        return cfg.chat_passthrough and hasattr(router, "generate")

    @app.post("/route")
    async def route(request: Request) -> dict[str, Any]:
        question, summaries, threshold = validate_route_request(
            await read_json(request), cfg, getattr(router, "top_k", None),
            tuple(getattr(router, "summary_fields", ())), str(getattr(router, "kind", "loaded")))
        decision = await run_in_threadpool(_submit, route_lane, (question, summaries, threshold))
        served["decisions"] += 1  # counted on the event loop: one coroutine at a time, no lock needed
        served["clipped"] += bool(decision.clipped)
        return asdict(decision)

    @app.post("/ask")
    async def ask(request: Request) -> dict[str, Any]:
        if asker is None:
            raise RequestError(404, "POST /ask is off (ask.enabled=false)")
        item = validate_ask_request(await read_json(request), cfg.max_question_chars)
        return await run_in_threadpool(_submit, ask_lane, functools.partial(asker.answer, item))

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict[str, Any]:
        if not _chat_enabled():
            raise RequestError(404, "chat passthrough is off (or the router has no local model)")
        job = _chat_prepare(router, await read_json(request), cfg)
        return await run_in_threadpool(_submit, chat_lane, job)

    return app


@stage_main("serve")
def main(argv: list[str]) -> int:
    cfg = parse_cli(ServeConfig, argv, default_config=None)
    router = build(cfg.router)
    reader = check_readers(cfg.ask, router) if cfg.ask.enabled else None  # at start, as the router is
    import uvicorn

    if cfg.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"serve: warning: binding {cfg.host}; the API has no authentication", file=sys.stderr)
    where = cfg.router.path or cfg.router.kind
    print(f"serve: router {where} ({router.kind}, threshold_logit {router.threshold_logit}) on http://{cfg.host}:{cfg.port}",
          file=sys.stderr)
    uvicorn.run(create_app(router, cfg, reader), host=cfg.host, port=cfg.port, log_level="info")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
