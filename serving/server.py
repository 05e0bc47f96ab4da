"""`make serve`: a small JSON API over an in-process router.

POST /route {question, summaries: [{text, date, score?}], threshold? | threshold_logit?} -> the Decision as JSON
     (`threshold` is a probability, `threshold_logit` log-odds; the router decides score >= threshold_logit;
     `score` is the retrieval score the top1-score and features routers read)
GET  /health                                                   -> router kind, contract version, threshold
POST /v1/chat/completions                                      -> OpenAI-style greedy completion from the router
                                                                  model (with token log-probs), so RemoteRouter and
                                                                  other OpenAI clients can talk to it
Binds 127.0.0.1 unless told otherwise. Requests are served one at a time under a lock: on CPU two concurrent
forward passes only contend for the same cores.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from serving import contract
from serving.router import logit, sigmoid


@dataclass
class ServeConfig:
    router: str = "runs/grpo"  # run directory or hub id; or "always-answer" / "always-escalate"
    revision: str | None = None
    mode: str = "fast"  # fast | generate
    threshold: float | None = None  # log-odds; default: the calibrated one stored with the router
    host: str = "127.0.0.1"
    port: int = 8088
    max_body_bytes: int = 200_000
    max_question_chars: int = 2_000
    max_summary_chars: int = 4_000  # per summary; the contract clips what the model sees further
    chat_passthrough: bool = True
    max_chat_tokens: int = 256


class RequestError(ValueError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def validate_route_request(body: Any, cfg: ServeConfig) -> tuple[str, list[dict[str, Any]], float | None]:
    """Check a /route body; every failure names the field. Returns (question, summaries, threshold)."""
    if not isinstance(body, dict):
        raise RequestError(400, "body must be a JSON object with 'question' and 'summaries'")
    unknown = sorted(set(body) - {"question", "summaries", "threshold", "threshold_logit"})
    if unknown:
        raise RequestError(422, f"unknown field(s) {unknown}; allowed: question, summaries, threshold, "
                                "threshold_logit")
    question = body.get("question")
    if not isinstance(question, str) or not question.strip():
        raise RequestError(422, "'question' must be a non-empty string")
    if len(question) > cfg.max_question_chars:
        raise RequestError(413, f"'question' has {len(question)} characters; the limit is {cfg.max_question_chars}")
    summaries = body.get("summaries")
    if not isinstance(summaries, list):
        raise RequestError(422, "'summaries' must be a list of {text, date} objects (may be empty)")
    if len(summaries) > contract.MAX_SUMMARIES:
        raise RequestError(422, f"'summaries' has {len(summaries)} items; the router reads at most "
                                f"{contract.MAX_SUMMARIES} (send the top-ranked ones)")
    clean = []
    for i, s in enumerate(summaries):
        if not isinstance(s, dict) or not isinstance(s.get("text"), str):
            raise RequestError(422, f"summaries[{i}] must be an object with a string 'text'")
        if len(s["text"]) > cfg.max_summary_chars:
            raise RequestError(413, f"summaries[{i}].text has {len(s['text'])} characters; "
                                    f"the limit is {cfg.max_summary_chars}")
        date = s.get("date")
        if date is not None and not isinstance(date, str):
            raise RequestError(422, f"summaries[{i}].date must be a string or null")
        unit = {"text": s["text"], "date": date}
        if s.get("score") is not None:
            if isinstance(s["score"], bool) or not isinstance(s["score"], int | float) \
                    or not math.isfinite(s["score"]):
                raise RequestError(422, f"summaries[{i}].score must be a number or absent")
            unit["score"] = float(s["score"])
        clean.append(unit)
    threshold = body.get("threshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int | float)
                                  or not 0.0 <= threshold <= 1.0):
        raise RequestError(422, "'threshold' must be a number in [0, 1] or absent")
    logit_t = body.get("threshold_logit")
    if logit_t is not None:
        if threshold is not None:
            raise RequestError(422, "give 'threshold' (a probability) or 'threshold_logit', not both")
        if isinstance(logit_t, bool) or not isinstance(logit_t, int | float) or math.isnan(logit_t):
            raise RequestError(422, "'threshold_logit' must be a number or absent")
        return question, clean, float(logit_t)
    return question, clean, None if threshold is None else logit(threshold)


def _chat_response(router: Any, body: Any, cfg: ServeConfig) -> dict[str, Any]:
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
        raise RequestError(422, "'messages' must be a non-empty list of {role, content}")
    for i, m in enumerate(body["messages"]):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant") \
                or not isinstance(m.get("content"), str):
            raise RequestError(422, f"messages[{i}] must be {{role: system|user|assistant, content: string}}")
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or 64
    if not isinstance(max_tokens, int) or not 1 <= max_tokens <= cfg.max_chat_tokens:
        raise RequestError(422, f"'max_tokens' must be an integer in [1, {cfg.max_chat_tokens}]")
    top = int(body.get("top_logprobs") or 0) if body.get("logprobs") else 0
    if not 0 <= top <= 20:
        raise RequestError(422, "'top_logprobs' must be in [0, 20]")
    if (body.get("temperature") or 0) != 0:
        raise RequestError(422, "this endpoint decodes greedily; send temperature 0 or omit it")
    prompt = router.tokenizer.apply_chat_template(body["messages"], tokenize=False, add_generation_prompt=True)
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


def create_app(router: Any, cfg: ServeConfig | None = None) -> Any:
    cfg = cfg or ServeConfig()
    lock = threading.Lock()
    app = FastAPI(title="tiermem router", docs_url=None, redoc_url=None)
    meta = getattr(router, "meta", None)

    async def read_json(request: Request) -> Any:
        raw = await request.body()
        if len(raw) > cfg.max_body_bytes:
            raise RequestError(413, f"body has {len(raw)} bytes; the limit is {cfg.max_body_bytes}")
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RequestError(400, f"body is not valid JSON: {exc}") from None

    @app.exception_handler(RequestError)
    async def _request_error(_: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=exc.status)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "router": router.kind, "mode": getattr(router, "mode", None),
                "contract_version": contract.CONTRACT_VERSION, "threshold_logit": router.threshold,
                "threshold": sigmoid(router.threshold),
                "base_model": meta.base_model if meta else None, "chat_passthrough": _chat_enabled()}

    def _chat_enabled() -> bool:
        return cfg.chat_passthrough and hasattr(router, "generate")

    @app.post("/route")
    async def route(request: Request) -> dict[str, Any]:
        question, summaries, threshold = validate_route_request(await read_json(request), cfg)
        def _run() -> Any:
            with lock:
                return router.route(question, summaries, threshold=threshold)

        return asdict(await run_in_threadpool(_run))

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict[str, Any]:
        if not _chat_enabled():
            raise RequestError(404, "chat passthrough is off (or the router has no local model)")
        body = await read_json(request)
        def _run() -> Any:
            with lock:
                return _chat_response(router, body, cfg)

        return await run_in_threadpool(_run)

    return app


def load_router(cfg: ServeConfig) -> Any:
    from serving.router import ROUTERS, Router

    if cfg.router in ("always-answer", "always-escalate"):
        return ROUTERS[cfg.router]()
    # any saved router: an LM run directory / hub id, or a features / top1-score directory
    return Router.from_pretrained(cfg.router, revision=cfg.revision, mode=cfg.mode, threshold=cfg.threshold)


def main(argv: list[str] | None = None) -> int:
    from tiermem.config import ConfigError, parse_cli

    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = parse_cli(ServeConfig, argv, default_config=None)
        router = load_router(cfg)
    except (ConfigError, FileNotFoundError, ValueError, RuntimeError) as exc:
        print(f"serve: error: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    if cfg.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"serve: warning: binding {cfg.host}; the API has no authentication", file=sys.stderr)
    print(f"serve: router {cfg.router} ({router.kind}, threshold {router.threshold}) on http://{cfg.host}:{cfg.port}",
          file=sys.stderr)
    uvicorn.run(create_app(router, cfg), host=cfg.host, port=cfg.port, log_level="info")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
