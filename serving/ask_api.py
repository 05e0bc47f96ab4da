"""POST /ask: the memory runtime served warm, models and tiers opened once (docs/serving.md)."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serving.request_error import RequestError, checked_question
from tiermem.memory.extractive import answerer_mode
from tiermem.memory.memory_config import MemoryConfig
from tiermem.settings.config import AT_LEAST_ONE, check_declared
from tiermem.settings.errors import ConfigError, DataError

POLICIES = ("router", "summary", "research")
FIELDS = ("question", "conv_id", "conversation", "policy")


@dataclass
class AskServeConfig:
    enabled: bool = True
    workdir: str = "runs/memory"  # the tier cache `tiermem-router ask` builds (<workdir>/<conv_id>-<key>/)
    memory: MemoryConfig = field(default_factory=MemoryConfig)  # as `ask`'s memory: settings (configs/ingest)
    # conversations kept open (their tiers in memory); the least recently asked is closed
    max_open: int = field(default=8, metadata=AT_LEAST_ONE)
    max_turns: int = field(default=5_000, metadata=AT_LEAST_ONE)  # an inline conversation's turns (building tiers)
    # tier directories this server builds for inline conversations that it keeps on disk; past it the least recently
    # asked one it built is removed (a directory it did not build, `tiermem-router ask`'s, is never removed)
    max_inline_tiers: int = field(default=64, metadata=AT_LEAST_ONE)

    def __post_init__(self) -> None:
        if answerer_mode(self.memory.answerer, None, None) != "extractive":
            raise ConfigError("ask.memory.answerer: /ask serves the extractive answerer (no language model in the "
                              "server); set it to auto or extractive")
        check_declared(self, "ask.")


@dataclass
class AskRequest:
    question: str
    conv_id: str | None
    conversation: Any  # a parsed tiermem-format Conversation, or None
    policy: str


def validate_ask_request(body: Any, max_question_chars: int) -> AskRequest:
    """Check a /ask body; every failure names the field."""
    question = checked_question(body, FIELDS, "'question' and 'conv_id' or 'conversation'", max_question_chars)
    conv_id, raw = body.get("conv_id"), body.get("conversation")
    if (conv_id is None) == (raw is None):
        raise RequestError(422, "give 'conv_id' (a conversation already ingested) or 'conversation' (a "
                                "tiermem-format conversation), exactly one")
    if conv_id is not None and (not isinstance(conv_id, str) or not conv_id.strip()):
        raise RequestError(422, "'conv_id' must be a non-empty string")
    policy = body.get("policy", "router")
    if policy not in POLICIES:
        raise RequestError(422, f"'policy' must be one of {list(POLICIES)}, got {policy!r}")
    conversation = None
    if raw is not None:
        from tiermem.data.tiermem_format import parse_conversation

        try:
            conversation = parse_conversation(raw, "'conversation'", "request")
        except DataError as exc:
            raise RequestError(422, f"'conversation' is not a tiermem-format conversation: {exc}") from None
    return AskRequest(question.strip(), conv_id, conversation, policy)


class AskService:
    """Open conversations (LRU), one shared embedder and token counter, one reader loaded on first answer."""

    def __init__(self, cfg: AskServeConfig, router: Any, reader: Any = None) -> None:
        self.cfg, self.router = cfg, router
        self.root = Path(cfg.workdir)
        self.open: OrderedDict[str, Any] = OrderedDict()  # conv_id -> MemoryRuntime
        self.built: OrderedDict[str, Path] = OrderedDict()  # inline key -> the tier directory this server built
        self._embedder: Any = None
        self._count_tokens: Any = None
        self._reader: Any = reader  # serve loads it at start (check_readers); None: on the first answer
        self._lock = threading.Lock()
        self.answered = 0

    def health(self) -> dict[str, Any]:
        return {"workdir": str(self.root), "open_conversations": list(self.open), "answered": self.answered}

    def _shared(self) -> dict[str, Any]:
        from tiermem.memory.raw_store import make_token_counter
        from tiermem.memory.summaries import load_embedder_spec

        if self._embedder is None:
            self._embedder = load_embedder_spec(self.cfg.memory.embedder)
        if self._count_tokens is None:  # a tokenizer only: the pages of an inline conversation are sized by it
            self._count_tokens = make_token_counter(self.cfg.memory.tokenizer)
        return {"embedder": self._embedder, "count_tokens": self._count_tokens, "answer_reader": self._reader}

    def ingested(self) -> dict[str, list[Path]]:
        """conv_id -> the tier directories in the workdir that hold it (those built with this config first)."""
        out: dict[str, list[Path]] = {}
        want = self.cfg.memory.tier_fields()
        for manifest in sorted(self.root.glob("*/manifest.json")):
            try:
                meta = json.loads(manifest.read_text(encoding="utf-8"))
                conv_id, tiers = meta["conv_id"], meta["tiers"]
            except (OSError, ValueError, KeyError, TypeError):
                continue  # not a memory, or one being written: never served
            dirs = out.setdefault(str(conv_id), [])
            dirs.insert(0, manifest.parent) if tiers == want else dirs.append(manifest.parent)
        return out

    def _remember(self, key: str, runtime: Any) -> Any:
        self.open[key] = runtime
        self.open.move_to_end(key)
        while len(self.open) > self.cfg.max_open:
            self.open.popitem(last=False)[1].close()
        return runtime

    def _bound_built(self) -> None:
        """Remove the least recently asked tier directories this server built past `max_inline_tiers`: every new
        inline conversation builds one, and a long-running server would fill the disk."""
        import shutil

        while len(self.built) > self.cfg.max_inline_tiers:
            _, path = self.built.popitem(last=False)
            for key in [k for k, rt in self.open.items() if rt.workdir == path]:  # opened inline or by conv_id
                self.open.pop(key).close()
            shutil.rmtree(path, ignore_errors=True)

    def runtime(self, req: AskRequest) -> Any:
        from tiermem.memory.runtime import MemoryRuntime

        if req.conversation is not None:
            conv = req.conversation
            if len(conv.turns) > self.cfg.max_turns:
                raise RequestError(413, f"'conversation' has {len(conv.turns)} turns; the limit is "
                                        f"{self.cfg.max_turns} (ask.max_turns)")
            key = f"{conv.conv_id}\0{hash(tuple((t.turn_id, t.text) for t in conv.turns))}"
            if key not in self.open:
                before = set(self.root.iterdir()) if self.root.is_dir() else set()
                rt = MemoryRuntime.open_or_build(self.root, conv, self.cfg.memory, **self._shared())
                if rt.workdir not in before:
                    self.built[key] = rt.workdir
                self._remember(key, rt)
            self.open.move_to_end(key)
            if key in self.built:
                self.built.move_to_end(key)
                self._bound_built()
            return self.open[key]
        if req.conv_id in self.open:
            self.open.move_to_end(req.conv_id)
            return self.open[req.conv_id]
        known = self.ingested()
        if req.conv_id not in known:
            have = sorted(known)
            raise RequestError(404, f"unknown conversation {req.conv_id!r}: no tiers for it in {self.root} "
                                    f"(have {have[:20]}{' ...' if len(have) > 20 else ''}); ingest it with "
                                    f"`tiermem-router ask workdir={self.root} ...` or send it inline as "
                                    "'conversation'")
        return self._remember(req.conv_id, MemoryRuntime(known[req.conv_id][0], self.cfg.memory, **self._shared()))

    def answer(self, req: AskRequest) -> dict[str, Any]:
        with self._lock:  # one answer at a time per process (the lane runs one job at a time too)
            rt = self.runtime(req)
            base = self.cfg.memory
            rt.cfg = base if req.policy == "router" else dataclasses.replace(base, fixed_policy=req.policy)
            out = rt.answer(req.question, self.router if req.policy == "router" else None)
            if self._reader is None and rt._reader is not None:  # the configured reader: every conversation's
                self._reader = rt._reader
            self.answered += 1
        return response(rt.memory.conv_id, out)


def check_readers(cfg: AskServeConfig, router: Any) -> Any:
    """The readers /ask answers with, checked at start: one that would fail every /ask is a named error (exit 2),
    not a 500 per request."""
    from tiermem.memory.extractive import load_answer_reader, router_reader
    from tiermem.settings.errors import StoreError, UsageError

    try:
        router_reader(router)  # its floor, bound to its weights
        return load_answer_reader(cfg.memory.reader)
    except (UsageError, FileNotFoundError, StoreError) as exc:
        exc.args = (f"ask: {exc}; POST /ask would fail on every request: fix it, or serve /route alone with "
                    "ask.enabled=false",)
        raise


def response(conv_id: str, out: Any) -> dict[str, Any]:
    ev, r = out.evidence, out.reading
    quote = None if ev is None else {"text": ev.quote, "speaker": ev.speaker, "date": ev.date,
                                     "turn_id": ev.turn_id, "page_id": ev.page_id, "cite": ev.cite()}
    return {
        "conv_id": conv_id, "question": out.question, "route": out.action, "decided_by": out.decided_by,
        "answer": out.answer, "stated": bool(r is not None and r.stated), "quote": quote,
        "pages_read": list(out.research.pages_read) if out.research is not None else [],
        "escalated_once": out.escalated_once,
        "reading": None if r is None else {"logit": r.logit, "floor": r.floor, "sentences": r.sentences,
                                           "reader": r.reader},
        "cost": {**out.cost.to_dict(), "retrieval_s": round(out.retrieval_s, 6), "router_s": round(out.router_s, 6)},
        "seconds": round(out.elapsed_s, 6),
    }
