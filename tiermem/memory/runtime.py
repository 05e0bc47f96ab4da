"""The memory runtime: ingest a conversation into its two tiers (built in a temporary sibling directory renamed into
place, `manifest.json` last, so a crash never leaves a half-ingested workdir), then answer through a router."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tiermem.contract import ACTIONS
from tiermem.data.conversations import Conversation, Question
from tiermem.llm import LLM
from tiermem.memory.extractive import (
    AnswerReader,
    Reading,
    answer_extractively,
    answerer_mode,
    load_answer_reader,
    router_reader,
)
from tiermem.memory.grounding import Evidence, ground, page_candidates, summary_candidates, with_similarity
from tiermem.memory.memory_config import MemoryConfig
from tiermem.memory.policies import (
    LinkedQuote,
    PathCost,
    ResearchResult,
    SummaryResult,
    question_text,
    research_policy,
    summary_policy,
)
from tiermem.memory.raw_store import RawPageStore, StoreError, TokenCounter, make_token_counter, paginate
from tiermem.memory.summaries import (
    Embedder,
    RetrievedUnit,
    SummaryIndex,
    build_summarizer,
    load_embedder_spec,
)
from tiermem.memory.tier_build import (
    TIERS_VERSION,
    TURN_VECTOR_CACHE,
    TURN_VECTOR_TOKENS,
    cached_turn_vectors,
    imported_units,
    imports_units,
    save_turn_vectors,
    tier_key,
)
from tiermem.memory.tiers import TwoTierMemory
from tiermem.memory.turns import TURN_VECTORS, page_turns, turn_text
from tiermem.memory.writeback import WriteBack, write_back
from tiermem.models.specs import spec_digest
from tiermem.runs.safe_io import write_atomic

MANIFEST = "manifest.json"
LONG_HISTORY_TURNS = 500  # a history this long shows progress bars while its tiers are built
log = logging.getLogger(__name__)


class RouterLike(Protocol):
    def route(self, question: str, summaries: list[RetrievedUnit]) -> Any: ...


@dataclass
class IngestStats:
    conv_id: str
    turns: int
    pages: int
    units: int
    page_tokens_max: int
    page_tokens_mean: float
    seconds: float
    summarizer: dict[str, Any] = field(default_factory=dict)


@dataclass
class RuntimeAnswer:
    question: str
    answer: str | None
    action: str  # "ANSWER" (summary path) | "ESCALATE" (research path)
    decided_by: str  # "router" | "fixed:summary" | "fixed:research"
    retrieved: list[RetrievedUnit]
    cost: PathCost  # the path taken
    retrieval_s: float
    router_s: float = 0.0
    router_parsed_ok: bool | None = None
    router_error: str | None = None  # the router's own failure (it then escalates, flagged)
    summary: SummaryResult | None = None
    research: ResearchResult | None = None
    writeback: list[WriteBack] = field(default_factory=list)
    error: str | None = None
    # `answer`: the LM's reply ("lm") or, unusable for `fallback_reason`, the extractive quote; `evidence`: its quote
    lm_answer: str | None = None
    answer_source: str | None = None  # "lm" | "extractive"; None after an LLM error
    fallback_reason: str | None = None
    evidence: Evidence | None = None
    extractive_answer: str | None = None  # the fallback, computed on every answer (evaluated on its own)
    reading: Reading | None = None  # the extractive answerer's reading (answer_source "reader"; None: the LM answered)
    escalated_once: bool = False  # ANSWER found nothing above the reader's floor in the summaries and read pages
    elapsed_s: float = 0.0  # this call's own time; cost.wall_s prices cached calls at their original latency


class MemoryRuntime:
    def __init__(self, workdir: str | Path, cfg: MemoryConfig | None = None, *, llm: LLM | None = None,
                 embedder: Embedder | None = None, count_tokens: TokenCounter | None = None,
                 summarizer_llm: LLM | None = None, answer_reader: AnswerReader | None = None) -> None:
        self.workdir = Path(workdir)
        self.cfg = cfg or MemoryConfig()
        self.llm = llm
        self.summarizer_llm = summarizer_llm or llm
        self._embedder = embedder
        self._count_tokens = count_tokens
        self._reader = answer_reader  # loaded from cfg.reader on the first extractive answer without a router's
        self.memory: TwoTierMemory | None = None
        self.manifest: dict[str, Any] = {}
        self.vector_cache: Path | None = None  # turn vectors by content, shared by tiers built in one root
        if (self.workdir / MANIFEST).is_file():
            self._open()
        elif self.workdir.exists() and not self.workdir.is_dir():
            raise StoreError(f"{self.workdir}: memory directory is a file")
        elif self.workdir.exists() and any(self.workdir.iterdir()):
            raise StoreError(f"{self.workdir}: not a complete memory (no {MANIFEST}); delete it and ingest again")

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = load_embedder_spec(self.cfg.embedder)
        return self._embedder

    @property
    def count_tokens(self) -> TokenCounter:
        if self._count_tokens is None:
            self._count_tokens = make_token_counter(self.cfg.tokenizer)
        return self._count_tokens

    # ------------------------------------------------------------------------------------------ build / open

    def ingest(self, conv: Conversation) -> IngestStats:
        if self.memory is not None:
            raise RuntimeError(f"{self.workdir}: already holds conversation {self.manifest['conv_id']!r}")
        if not conv.turns:
            raise ValueError(f"conversation {conv.conv_id!r} has no turns")
        count_tokens, embedder = self.count_tokens, self.embedder  # load models outside the ingest timing
        start = time.perf_counter()
        progress = len(conv.turns) >= LONG_HISTORY_TURNS  # a long history shows where its build stands
        pages = paginate(conv.conv_id, conv.turns, count_tokens, self.cfg.page_tokens)
        if imports_units(conv, self.cfg):
            summarizer: Any = None
            units = imported_units(conv, pages)
        else:
            summarizer = build_summarizer(self.cfg.summarizer, self.summarizer_llm, self.cfg.keep_ratio,
                                          self.cfg.max_units_per_page, self.cfg.summarizer_max_tokens)
            units = summarizer.summarize_pages(pages)  # LLM errors raise here, before anything is written
        self.workdir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{self.workdir.name}.tmp-", dir=self.workdir.parent))
        try:
            with closing(RawPageStore(tmp / "raw.db")) as raw:
                raw.append(pages)
                root_hash = raw.root_hash()
            if progress:
                log.info("tiers of %s: %d turns -> %d pages (%.1f s); embedding %d tier-1 units%s", conv.conv_id,
                         len(conv.turns), len(pages), time.perf_counter() - start, len(units),
                         "" if summarizer is None else ", then the turns")
            index = SummaryIndex(tmp / "tier1", embedder)
            index.add(units, progress=progress)
            turn_vectors_sha = None
            if summarizer is not None:  # an imported Tier 1's research follows its provenance: turns on demand
                texts = [turn_text(t) for _, t in page_turns(pages)]
                vectors = cached_turn_vectors(
                    self.vector_cache, spec_digest(self.cfg.embedder), texts, lambda some: index.embed(
                        some, max_tokens=TURN_VECTOR_TOKENS, progress=progress and len(some) == len(texts)),
                    TIERS_VERSION)
                turn_vectors_sha = save_turn_vectors(tmp / TURN_VECTORS, vectors)
            tier1_root = index.root_hash()
            index.close()
            stats = IngestStats(
                conv.conv_id, len(conv.turns), len(pages), len(units), max(p.token_count for p in pages),
                round(sum(p.token_count for p in pages) / len(pages), 1), round(time.perf_counter() - start, 3),
                dict(getattr(summarizer, "stats", {})),
            )
            manifest = {"version": TIERS_VERSION, "conv_id": conv.conv_id,
                        "tier_key": tier_key(conv, self.cfg, self.summarizer_llm),
                        "tiers": self.cfg.tier_fields(), "tier1": "imported" if summarizer is None else "built",
                        "root_hash": root_hash, "tier1_root_hash": tier1_root,
                        "turn_vectors_sha256": turn_vectors_sha,
                        **({"turn_vectors": "on_demand"} if turn_vectors_sha is None else {}), "stats": asdict(stats)}
            write_atomic(tmp / MANIFEST, json.dumps(manifest, indent=2))
            if self.workdir.exists() and not any(self.workdir.iterdir()):
                self.workdir.rmdir()
            os.replace(tmp, self.workdir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._open()
        return stats

    def _read_manifest(self) -> dict[str, Any]:
        path = self.workdir / MANIFEST
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
            for key in ("conv_id", "tiers", "root_hash", "tier1_root_hash", "stats"):
                manifest[key]  # noqa: B018  (presence check)
            manifest["tiers"]["embedder"]  # noqa: B018
            int(manifest["stats"]["pages"])
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise StoreError(f"{path}: unreadable or incomplete memory manifest ({type(exc).__name__}: {exc}); "
                             "delete the memory directory and ingest again") from None
        return manifest

    def _open(self) -> None:
        self.manifest = self._read_manifest()
        built_with = self.manifest["tiers"]["embedder"]
        if built_with != self.cfg.embedder:
            raise RuntimeError(f"{self.workdir}: tier 1 was embedded with {built_with!r}, but memory.embedder is "
                               f"{self.cfg.embedder!r}; queries must use the same embedder")
        conv_id = self.manifest["conv_id"]
        raw = RawPageStore(self.workdir / "raw.db")
        try:
            bad = raw.verify({conv_id: int(self.manifest["stats"]["pages"])})
            if bad or raw.root_hash() != self.manifest["root_hash"]:
                raise StoreError(f"{raw.db_path}: tier-2 integrity check failed (pages changed or missing: "
                                 f"{bad or 'rehashed, root hash differs from the manifest'}); rebuild this memory")
            summaries = SummaryIndex(self.workdir / "tier1", self.embedder)
        except BaseException:
            raw.close()
            raise
        try:
            if summaries.root_hash() != self.manifest["tier1_root_hash"]:
                raise StoreError(f"{summaries.path}: tier-1 integrity check failed (units added, removed or "
                                 "rehashed since the manifest was written); rebuild this memory")
            pages = {p.page_id for p in raw.pages(conv_id)}
            dangling = [u.unit_id for u in summaries.units if not set(u.page_ids) <= pages]
            if dangling:
                raise StoreError(f"{summaries.path}: summary unit(s) {dangling[:5]} link to pages missing from "
                                 f"{raw.db_path}; rebuild this memory")
        except BaseException:
            raw.close()
            summaries.close()
            raise
        on_demand = self.manifest.get("turn_vectors") == "on_demand"
        self.memory = TwoTierMemory.open(conv_id, raw, summaries, self._turn_vectors(), embed_turns=(
            (lambda texts: summaries.embed(texts, max_tokens=TURN_VECTOR_TOKENS)) if on_demand else None))
        tier1 = self.manifest.get("tier1", "built")  # a memory built before imported units: built
        if tier1 not in ("imported", "built"):
            self.memory.close()
            raise StoreError(f"{self.workdir / MANIFEST}: field 'tier1' is {tier1!r}, not 'imported' or 'built'; "
                             "rebuild this memory")
        self.memory.tier1 = tier1

    def _turn_vectors(self) -> np.ndarray | None:
        """The turn vectors written at ingest, checked against the manifest; None for a memory built before them."""
        want = self.manifest.get("turn_vectors_sha256")
        if want is None:
            return None
        path = self.workdir / TURN_VECTORS
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != want:
            raise StoreError(f"{path}: turn vectors missing or changed since the manifest was written; rebuild this "
                             "memory")
        return np.load(path, allow_pickle=False)

    @classmethod
    def open_or_build(cls, root: str | Path, conv: Conversation, cfg: MemoryConfig | None = None,
                      share_turn_vectors: bool = False, **kwargs: Any) -> MemoryRuntime:
        """The conversation's tiers from `root/<conv_id>-<key>` (the tier key: a changed setting builds anew), built
        first if absent. `share_turn_vectors` keeps turn vectors in `root/.turn_vectors` for the history's next variant
        (labeling's tier cache; a server building inline conversations keeps nothing it would have to bound)."""
        cfg = cfg or MemoryConfig()
        key = tier_key(conv, cfg, kwargs.get("summarizer_llm") or kwargs.get("llm"))
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", conv.conv_id)
        runtime = cls(Path(root) / f"{slug}-{key[:16]}", cfg, **kwargs)
        runtime.vector_cache = Path(root) / TURN_VECTOR_CACHE if share_turn_vectors else None
        if runtime.memory is None:
            try:
                runtime.ingest(conv)
            except OSError:
                if not (runtime.workdir / MANIFEST).is_file():
                    raise
                runtime._open()  # another process finished the same build first
        runtime._check_built_for(key, "imported" if imports_units(conv, cfg) else "built")
        return runtime

    def _check_built_for(self, key: str, tier1: str) -> None:
        """A directory under this request's name is used only if built for it (same tier key and Tier 1 source)."""
        found = {"tier_key": self.manifest.get("tier_key"), "tier1": self.manifest.get("tier1", "built")}
        want = {"tier_key": key, "tier1": tier1}
        wrong = [k for k in want if found[k] != want[k]]
        if wrong:
            self.close()
            raise StoreError(f"{self.workdir / MANIFEST}: built for another request (field {wrong[0]!r} is "
                             f"{found[wrong[0]]!r}, this request's is {want[wrong[0]]!r}); delete {self.workdir} "
                             "and rerun to build it")

    def close(self) -> None:
        if self.memory is not None:
            self.memory.close()
            self.memory = None

    # ------------------------------------------------------------------------------------------ answering

    def _require(self) -> TwoTierMemory:
        if self.memory is None:
            raise RuntimeError(f"{self.workdir}: nothing ingested yet")
        return self.memory

    def memory_for(self, question: str | Question) -> TwoTierMemory:
        """The memory a question reads: as of its turn when it says when it was asked, else the whole history."""
        return self._require().as_of(getattr(question, "asked_before", None))

    def _configured_reader(self) -> AnswerReader:
        if self._reader is None:
            self._reader = load_answer_reader(self.cfg.reader)
        return self._reader

    def answerer(self) -> str:
        return answerer_mode(self.cfg.answerer, *((self.llm.backend, self.llm.model) if self.llm else (None, None)))

    def answer(self, question: str | Question, router: RouterLike | None = None) -> RuntimeAnswer:
        memory = self.memory_for(question)
        extractive = self.answerer() == "extractive"
        if self.llm is None and not extractive:
            raise RuntimeError("MemoryRuntime needs an llm to answer questions")
        q, _ = question_text(question)
        start = began = time.perf_counter()
        retrieved = memory.search_summaries(q, self.cfg.top_k)
        retrieval_s = time.perf_counter() - start
        router_s, parsed_ok, router_error = 0.0, None, None
        if router is not None:
            start = time.perf_counter()
            decision = router.route(q, retrieved)
            router_s = time.perf_counter() - start
            action = getattr(decision, "action", None)
            parsed_ok = bool(getattr(decision, "parsed_ok", True)) and action in ACTIONS
            action = action if action in ACTIONS else "ESCALATE"  # unreadable decision: faithfulness first
            decided_by = "router"
            router_error = getattr(decision, "error", None)
        else:
            action = "ANSWER" if self.cfg.fixed_policy == "summary" else "ESCALATE"
            decided_by = f"fixed:{self.cfg.fixed_policy}"
        out = RuntimeAnswer(q, None, action, decided_by, retrieved, PathCost(), retrieval_s, router_s, parsed_ok,
                            router_error)
        if extractive:
            reader = router_reader(router) or self._configured_reader()
            got = answer_extractively(memory, question, action, retrieved, reader, self.cfg)
            out.answer, out.evidence, out.cost, out.summary, out.research = (got.answer, got.evidence, got.cost,
                                                                             got.summary, got.research)
            out.reading, out.escalated_once, out.answer_source = got.reading, got.escalated_once, "reader"
            out.extractive_answer = got.answer
        elif action == "ANSWER":
            out.summary = summary_policy(memory, question, self.llm, self.cfg.top_k, retrieved=retrieved,
                                         max_tokens=self.cfg.answer_max_tokens)
            out.answer, out.cost, out.error = out.summary.answer, out.summary.cost, out.summary.error
        else:
            cfg = self.cfg
            out.research = research_policy(
                memory, question, self.llm, retrieved, cfg.max_rounds, pages_per_round=cfg.pages_per_round,
                keyword_k=cfg.keyword_k, search_k=cfg.search_k, max_snippets=cfg.max_snippets,
                step_max_tokens=cfg.step_max_tokens, answer_max_tokens=cfg.answer_max_tokens, turn_k=cfg.turn_k,
            )
            out.answer, out.cost, out.error = out.research.answer, out.research.cost, out.research.error
            if self.cfg.write_back and out.error is None:
                out.writeback = self.write_back(out.research.linked)
        if out.error is None and not extractive:  # an LLM error stays an error: no quote is passed off as its answer
            self._ground(out, memory)
        out.elapsed_s = time.perf_counter() - began
        return out

    def _ground(self, out: RuntimeAnswer, memory: TwoTierMemory) -> None:
        """Attach the quote the answer rests on; replace an unusable LM answer by the extractive one."""
        if out.research is not None:
            candidates = page_candidates(memory.raw.get_many(out.research.pages_read))
            if candidates:  # one batched call of the tier-1 embedder: the question and every sentence read
                vectors = memory.summaries.embed([out.question] + [c.evidence.quote for c in candidates])
                with_similarity(candidates, vectors[1:] @ vectors[0])
        else:
            turns = {tid for u in out.retrieved for tid in u.turn_ids}
            pages = memory.raw.get_many(list(dict.fromkeys(p for u in out.retrieved for p in u.page_ids)))
            speakers = {t.turn_id: t.speaker for p in pages for t in p.turns if t.turn_id in turns}
            candidates = summary_candidates(out.retrieved, speakers)
        grounded = ground(out.question, out.answer, candidates)
        out.lm_answer, out.evidence, out.extractive_answer = out.answer, grounded.evidence, grounded.extractive
        out.fallback_reason = grounded.reason
        if grounded.source == "extractive" and self.cfg.answer_fallback == "extractive":
            out.answer, out.answer_source = grounded.answer, "extractive"
        else:
            out.answer_source = "lm"

    def write_back(self, quotes: list[LinkedQuote]) -> list[WriteBack]:
        """Verified write-back of the linked facts into tier 1; the manifest's tier-1 root hash follows the index."""
        actions = write_back(self._require(), quotes, self.cfg)
        if any(a.action != "skip" for a in actions):
            self.manifest["tier1_root_hash"] = self._require().summaries.root_hash()
            write_atomic(self.workdir / MANIFEST, json.dumps(self.manifest, indent=2))
        return actions
