"""`make label`: hindsight labeling of benchmark questions into router training data.

For each conversation: build (or reuse) its two tiers. For each question: summary-only policy (its retrieved
units are logged verbatim as the router's input), research policy, judges on both answers, the strict
sufficiency judge, generator-free evidence signals, labels under both rules, the teacher, and per-path costs.
Each record is committed (fsync) before the next, so a killed run restarts where it stopped; LLM calls go
through the response cache, so a rerun makes no new calls. Outputs in `output_dir`: records.jsonl (the
working store), all_records.jsonl, dataset/ (DatasetDict split by conversation), stats.json, report.md.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import random
import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from labeling.evidence import EvidenceConfig, compute_signals
from labeling.judges import LexicalJudge, LLMJudge, SufficiencyJudge, Verdict, all_correct, verdicts_json
from labeling.report import build_stats, write_report
from labeling.rules import check_rule, decide
from labeling.schema import FEATURES, PATH_COST_FIELDS
from labeling.split import SplitSpec, assign_splits, check_records_disjoint
from labeling.store import RecordStore
from labeling.teacher import ask_teacher, sft_target
from tiermem.config import parse_cli, to_dict
from tiermem.data.conversations import Conversation, Question, detect_format, load_conversations
from tiermem.llm import LLM, LLMConfig, LLMError, build_llm
from tiermem.memory import MemoryConfig, MemoryRuntime, PathCost, research_policy, summary_policy
from tiermem.memory.policies import estimated_research_input_tokens, first_round_pages, summary_messages
from tiermem.rundir import RunError, claim_output_dir

log = logging.getLogger(__name__)
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "label" / "locomo_local.yaml"


@dataclass
class LLMRoles:
    answerer: LLMConfig | None = field(default_factory=LLMConfig)  # answers on both paths, plans the research loop
    summarizer: LLMConfig | None = None  # memory.summarizer=llm only; None = the answerer
    judge: LLMConfig | None = None  # CORRECT/WRONG judge; None = lexical judge alone
    sufficiency: LLMConfig | None = None  # strict sufficiency judge; None = not run
    teacher: LLMConfig | None = None  # router-contract teacher; None = templated SFT targets


@dataclass
class LabelConfig:
    data_path: str | None = None  # None: the sample conversation shipped in tiermem/data
    dataset_format: str = "auto"  # auto | locomo | longmemeval
    conversations: list[str] = field(default_factory=list)  # subset by id; empty = all
    max_conversations: int | None = None
    max_questions_per_conversation: int | None = None
    question_sampling: str = "random"  # random (seeded) | first
    categories: list[str] = field(default_factory=list)  # keep only these categories; empty = all
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    llm: LLMRoles = field(default_factory=LLMRoles)
    judge_threshold: float = 0.3  # LoCoMo F1 threshold of the lexical judge
    evidence: EvidenceConfig = field(default_factory=EvidenceConfig)
    label_rule: str = "outcome"  # outcome (the paper's) | evidence; both are always recorded
    # false: no answer is generated on either path (the evidence rule needs none). Research cost fields then hold
    # the input tokens of the first round's pages and prompts, flagged `cost_estimated`; outcome labels stay empty.
    generate_answers: bool = True
    split: SplitSpec = field(default_factory=SplitSpec)
    seed: int = 0
    output_dir: str = "runs/label"
    tiers_dir: str | None = None  # tier cache; None = <output_dir>/tiers
    llm_cache: str | None = None  # response cache for roles without cache_path; None = <output_dir>/llm_cache.sqlite
    concurrency: int = 1  # questions in flight (HTTP backends only; the local backend runs one at a time)
    retry_errors: bool = True  # a rerun retries error records
    teacher_max_tokens: int = 128
    push_to_hub: str | None = None  # dataset repo id
    hub_private: bool = True

    def __post_init__(self) -> None:
        check_rule(self.label_rule)
        if not self.generate_answers and self.label_rule != "evidence":
            raise ValueError("generate_answers=false labels without answers: it needs label_rule=evidence "
                             f"(got {self.label_rule!r}); the outcome rule judges generated answers")
        if self.dataset_format not in ("auto", "locomo", "longmemeval"):
            raise ValueError(f"dataset_format must be auto|locomo|longmemeval, got {self.dataset_format!r}")
        if self.question_sampling not in ("random", "first"):
            raise ValueError(f"question_sampling must be random|first, got {self.question_sampling!r}")
        if self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if any(v is not None and v < 1 for v in (self.max_conversations, self.max_questions_per_conversation)):
            raise ValueError("max_conversations and max_questions_per_conversation must be >= 1 (null = all)")
        if not 0 <= self.judge_threshold <= 1:
            raise ValueError(f"judge_threshold must be in [0, 1], got {self.judge_threshold}")


# ---------------------------------------------------------------------------------------------- data


def select(cfg: LabelConfig, conversations: list[Conversation]) -> list[Conversation]:
    """The conversation subset and, per conversation, the question subset (seeded, stable order)."""
    if cfg.conversations:
        known = {c.conv_id for c in conversations}
        missing = [c for c in cfg.conversations if c not in known]
        if missing:
            raise ValueError(f"conversations {missing} are not in {cfg.data_path or 'the sample'}")
        conversations = [c for c in conversations if c.conv_id in set(cfg.conversations)]
    if cfg.max_conversations is not None:
        conversations = conversations[: cfg.max_conversations]
    out = []
    for conv in conversations:
        questions = [q for q in conv.questions if not cfg.categories or q.category in set(map(str, cfg.categories))]
        limit = cfg.max_questions_per_conversation
        if limit is not None and len(questions) > limit:
            if cfg.question_sampling == "random":
                # a seeded permutation's prefix: a larger limit extends a smaller one (resumed runs reuse records)
                order = list(range(len(questions)))
                random.Random(f"{cfg.seed}:{conv.conv_id}").shuffle(order)
                keep = set(order[:limit])
                questions = [q for i, q in enumerate(questions) if i in keep]
            else:
                questions = questions[:limit]
        out.append(dataclasses.replace(conv, questions=questions))
    return out


def data_format(cfg: LabelConfig, path: str | Path | None) -> str:
    if cfg.dataset_format != "auto":
        return cfg.dataset_format
    from tiermem.data.conversations import SAMPLE_PATH

    file = Path(path) if path else SAMPLE_PATH
    return detect_format(json.loads(file.read_text(encoding="utf-8")), file)


# ---------------------------------------------------------------------------------------------- LLM roles


class Roles:
    """The LLM behind each role; one instance per distinct config (roles sharing a model share its weights)."""

    NAMES = ("answerer", "summarizer", "judge", "sufficiency", "teacher")

    def __init__(self, roles: dict[str, LLM | None], need_answerer: bool = True) -> None:
        if need_answerer and roles.get("answerer") is None:
            raise ValueError("labeling needs an answerer LLM (llm.answerer)")
        unknown = set(roles) - set(self.NAMES)
        if unknown:
            raise ValueError(f"unknown LLM role(s) {sorted(unknown)}; roles are {self.NAMES}")
        self.roles = {name: roles.get(name) for name in self.NAMES}
        self.roles["summarizer"] = self.roles["summarizer"] or self.roles["answerer"]

    @classmethod
    def from_config(cls, cfg: LabelConfig) -> Roles:
        default_cache = cfg.llm_cache or str(Path(cfg.output_dir) / "llm_cache.sqlite")
        built: dict[str, LLM] = {}
        roles: dict[str, LLM | None] = {}
        for name in cls.NAMES:
            role_cfg: LLMConfig | None = getattr(cfg.llm, name)
            if role_cfg is None or (name == "summarizer" and cfg.memory.summarizer != "llm") or (
                    name == "answerer" and not cfg.generate_answers):
                roles[name] = None
                continue
            if role_cfg.cache_path is None:
                role_cfg = dataclasses.replace(role_cfg, cache_path=default_cache)
            key = json.dumps(dataclasses.asdict(role_cfg), sort_keys=True)
            if key not in built:
                built[key] = build_llm(role_cfg)
            roles[name] = built[key]
        return cls(roles, need_answerer=cfg.generate_answers)

    def _distinct(self) -> list[LLM]:
        return list({id(llm): llm for llm in self.roles.values() if llm is not None}.values())

    def __getitem__(self, name: str) -> LLM | None:
        return self.roles[name]

    def thread_safe(self) -> bool:
        """HTTP clients (and the test double) may be called from several threads; in-process models may not."""
        return all(getattr(llm, "backend", "") in ("openai", "scripted") for llm in self._distinct())

    def stats(self) -> dict[str, Any]:
        out = {}
        for i, llm in enumerate(self._distinct()):
            names = [n for n, r in self.roles.items() if r is llm]
            out[llm.name if llm.name not in out else f"{llm.name}#{i}"] = {"roles": names, **llm.stats.as_dict()}
        return out


# ---------------------------------------------------------------------------------------------- one question


def _cost(prefix: str, cost: Any) -> dict[str, Any]:
    return {f"cost_{prefix}_{k}": (round(getattr(cost, k), 4) if k == "wall_s" else getattr(cost, k))
            for k in PATH_COST_FIELDS}


def empty_record(conv: Conversation, q: Question, split: str, fmt: str, rule: str) -> dict[str, Any]:
    record: dict[str, Any] = {
        "conv_id": conv.conv_id, "qid": q.qid, "split": split, "source": fmt, "question": q.question,
        "question_date": q.date, "gold_answer": q.answer, "category": str(q.category),
        "evidence_ids": list(q.evidence), "router_summaries": [], "summary_answer": None, "research_answer": None,
        "research_pages": [], "research_stop": None, "research_parse_failures": None, "summary_f1": None,
        "research_f1": None, "judges": None, "sufficiency": None, "s_ok_outcome": None, "r_ok_outcome": None,
        "s_ok_evidence": None, "r_ok_evidence": None, "answer_recall": None, "gold_in_summary_pages": None,
        "gold_in_research_pages": None, "n_gold": len(set(q.evidence)), "label_outcome": None,
        "drop_reason_outcome": None, "label_evidence": None, "drop_reason_evidence": None, "label_rule": rule,
        "label": None, "drop_reason": "error", "s_ok": None, "r_ok": None, "sufficiency_veto": None,
        "answers_generated": None, "cost_estimated": None, "teacher": None,
        "teacher_agrees": None, "sft_target": None, "sft_source": None, "label_wall_s": None, "error": None,
    }
    for prefix in ("summary", "research"):
        record.update({f"cost_{prefix}_{k}": None for k in PATH_COST_FIELDS})
    return record


@dataclass
class Context:
    cfg: LabelConfig
    roles: Roles
    lexical: LexicalJudge
    fmt: str
    progress: Counter = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def tick(self, stage: str) -> None:
        with self.lock:
            self.progress[stage] += 1


def _judge(ctx: Context, q: Question, answer: str | None) -> list[Verdict]:
    verdicts = [ctx.lexical.judge(q.question, q.answer, answer or "", q.category, ctx.fmt)]
    if ctx.roles["judge"] is not None:
        verdicts.append(LLMJudge(ctx.roles["judge"]).judge(q.question, q.answer, answer or ""))
    return verdicts


def _router_input(retrieved: list[Any]) -> list[dict[str, Any]]:
    return [{"unit_id": u.unit_id, "text": u.text, "score": round(float(u.score), 6), "date": u.date,
             "page_ids": list(u.page_ids)} for u in retrieved]


def _generated_paths(ctx: Context, memory: Any, q: Question, rec: dict[str, Any]) -> tuple[list[Any], list[str]]:
    """Both policies with the answerer; their answers are judged. Returns (retrieved units, pages read)."""
    cfg_memory, answerer = ctx.cfg.memory, ctx.roles["answerer"]
    s = summary_policy(memory, q, answerer, cfg_memory.top_k, max_tokens=cfg_memory.answer_max_tokens)
    rec["router_summaries"] = _router_input(s.retrieved)
    rec["summary_answer"] = s.answer
    rec.update(_cost("summary", s.cost))
    if s.error:
        raise LLMError(f"summary path: {s.error}")
    ctx.tick("summary")
    r = research_policy(
        memory, q, answerer, s.retrieved, cfg_memory.max_rounds, pages_per_round=cfg_memory.pages_per_round,
        keyword_k=cfg_memory.keyword_k, search_k=cfg_memory.search_k, max_snippets=cfg_memory.max_snippets,
        step_max_tokens=cfg_memory.step_max_tokens, answer_max_tokens=cfg_memory.answer_max_tokens,
    )
    rec.update({"research_answer": r.answer, "research_pages": list(r.pages_read), "research_stop": r.stop_reason,
                "research_parse_failures": r.parse_failures})
    rec.update(_cost("research", r.cost))
    if r.error:
        raise LLMError(f"research path: {r.error}")
    ctx.tick("research")
    s_verdicts, r_verdicts = _judge(ctx, q, s.answer), _judge(ctx, q, r.answer)
    rec["summary_f1"], rec["research_f1"] = s_verdicts[0].score, r_verdicts[0].score
    rec["judges"] = json.dumps({"summary": verdicts_json(s_verdicts), "research": verdicts_json(r_verdicts)})
    rec["s_ok_outcome"], rec["r_ok_outcome"] = all_correct(s_verdicts), all_correct(r_verdicts)
    return s.retrieved, list(r.pages_read)


def _estimated_paths(ctx: Context, memory: Any, q: Question, rec: dict[str, Any], count_tokens: Any,
                     retrieved: list[Any] | None = None) -> tuple[list[Any], list[str]]:
    """No generation: the router's retrieval and the research policy's first-round pages, costs estimated.

    With memory.max_rounds=1 these are exactly the pages a generated run reads; deeper runs also read pages
    chosen by the planner, which only a generator can pick."""
    cfg_memory = ctx.cfg.memory
    started = time.perf_counter()
    if retrieved is None:
        retrieved = memory.search_summaries(q.question, cfg_memory.top_k)
    pages = first_round_pages(memory, q.question, retrieved, pages_per_round=cfg_memory.pages_per_round,
                              keyword_k=cfg_memory.keyword_k)[: cfg_memory.pages_per_round]
    read = memory.raw.get_many(pages)
    s_tokens = sum(count_tokens(m["content"]) for m in summary_messages(q.question, retrieved, q.date))
    r_tokens = estimated_research_input_tokens(q.question, q.date, read, count_tokens, cfg_memory.max_snippets)
    wall = round(time.perf_counter() - started, 4)
    rec["router_summaries"] = _router_input(retrieved)
    rec.update({"research_pages": pages, "research_stop": "not_generated", "research_parse_failures": 0,
                **_cost("summary", PathCost(input_tokens=s_tokens, wall_s=wall)),
                **_cost("research", PathCost(input_tokens=r_tokens, wall_s=wall, pages_read=len(pages),
                                             rounds=1 if pages else 0))})
    ctx.tick("retrieved")
    return retrieved, pages


def label_question(ctx: Context, memory: Any, conv: Conversation, q: Question, split: str,
                   page_turns: dict[str, list[str]], count_tokens: Any = None,
                   retrieved: dict[str, list[Any]] | None = None) -> dict[str, Any]:
    """Every stage for one question. LLMError anywhere -> an error record (never a verdict)."""
    cfg = ctx.cfg
    started = time.perf_counter()
    rec = empty_record(conv, q, split, ctx.fmt, cfg.label_rule)
    try:
        if cfg.generate_answers:
            _, pages_read = _generated_paths(ctx, memory, q, rec)
        else:
            _, pages_read = _estimated_paths(ctx, memory, q, rec, count_tokens, (retrieved or {}).get(q.qid))
        rec["answers_generated"], rec["cost_estimated"] = cfg.generate_answers, not cfg.generate_answers
        sufficiency = None
        if ctx.roles["sufficiency"] is not None:
            verdict = SufficiencyJudge(ctx.roles["sufficiency"]).judge(q.question, q.answer, rec["router_summaries"])
            sufficiency = dataclasses.asdict(verdict)
            rec["sufficiency"] = json.dumps(sufficiency)
        ctx.tick("judged")

        signals = compute_signals(q.answer, q.category, q.evidence, rec["router_summaries"], pages_read,
                                  page_turns.__getitem__, cfg.evidence, ctx.fmt, question=q.question)
        rec.update({"s_ok_evidence": signals.s_ok, "r_ok_evidence": signals.r_ok,
                    "answer_recall": signals.answer_recall, "gold_in_summary_pages": signals.gold_in_summary_pages,
                    "gold_in_research_pages": signals.gold_in_research_pages, "n_gold": signals.n_gold})
        # Conservative: when a sufficiency judge ran, an ANSWER label needs its agreement (None = not run).
        sufficient = None if sufficiency is None else bool(sufficiency["sufficient"])
        by_rule = {"outcome": decide(rec["s_ok_outcome"], rec["r_ok_outcome"], sufficient),
                   "evidence": decide(signals.s_ok, signals.r_ok, sufficient)}
        for rule, decision in by_rule.items():
            rec[f"label_{rule}"], rec[f"drop_reason_{rule}"] = decision.label, decision.drop_reason
        chosen = by_rule[cfg.label_rule]
        rec["label"], rec["drop_reason"] = chosen.label, chosen.drop_reason
        rec["s_ok"], rec["r_ok"] = rec[f"s_ok_{cfg.label_rule}"], rec[f"r_ok_{cfg.label_rule}"]
        rec["sufficiency_veto"] = chosen.vetoed

        teacher = None
        if ctx.roles["teacher"] is not None:
            teacher = ask_teacher(ctx.roles["teacher"], q.question, rec["router_summaries"], cfg.teacher_max_tokens)
            rec["teacher"] = json.dumps(teacher.to_dict())
        target = sft_target(chosen.label, teacher, signals.answer_recall, sufficiency)
        rec.update(sft_target=target.target, sft_source=target.source, teacher_agrees=target.teacher_agrees)
        ctx.tick("labeled")
    except LLMError as exc:
        for key in ("label_outcome", "label_evidence", "label", "s_ok_outcome", "r_ok_outcome", "s_ok_evidence",
                    "r_ok_evidence", "s_ok", "r_ok", "sft_target", "sft_source", "teacher_agrees", "sufficiency_veto",
                    "answers_generated", "cost_estimated"):
            rec[key] = None
        rec["drop_reason"], rec["error"] = "error", f"{type(exc).__name__}: {exc}"
        ctx.tick("errors")
    rec["label_wall_s"] = round(time.perf_counter() - started, 3)
    return rec


# ---------------------------------------------------------------------------------------------- the run


class Serialized:
    """Proxy that runs every method of the wrapped object (and of the named attributes) under one lock.

    Questions in flight share a conversation's memory: SQLite connections, the embedder's tokenizer and the
    page cache are not safe under concurrent calls, while the LLM calls between them are what runs in parallel.
    """

    def __init__(self, target: Any, lock: threading.RLock, nested: tuple[str, ...] = ()) -> None:
        self._target, self._lock = target, lock
        self._nested = {name: Serialized(getattr(target, name), lock) for name in nested}

    def __getattr__(self, name: str) -> Any:
        if name in self._nested:
            return self._nested[name]
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call


def _workers(ctx: Context) -> int:
    return ctx.cfg.concurrency if ctx.roles.thread_safe() else 1


def _results(ctx: Context, jobs: list[tuple[Question, str]], fn: Any) -> Iterator[dict[str, Any]]:
    """Records in question order; bounded concurrency for HTTP backends, one at a time otherwise."""
    workers = _workers(ctx)
    if workers == 1:
        for q, split in jobs:
            yield fn(q, split)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(fn, q, split) for q, split in jobs]
        for future in futures:
            yield future.result()


FINAL_OUTPUTS = ("dataset", "all_records.jsonl", "stats.json", "report.md")
# Settings that change no committed record: run mechanics, the question subset and the split (reassigned at the end).
RESUME_IGNORED = {"output_dir", "tiers_dir", "llm_cache", "concurrency", "retry_errors", "push_to_hub", "hub_private",
                  "split", "conversations", "max_conversations", "max_questions_per_conversation",
                  "question_sampling", "categories", "seed"}
LLM_RESUME_IGNORED = {"max_concurrency", "timeout_s", "max_retries", "cache_path", "batch_size", "base_url"}


def resume_fingerprint(cfg: LabelConfig) -> dict[str, Any]:
    """The settings a committed record depends on, flattened to dotted keys."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                if prefix.startswith("llm.") and key in LLM_RESUME_IGNORED:
                    continue
                walk(f"{prefix}.{key}" if prefix else key, sub)
        else:
            flat[prefix] = value

    walk("", {k: v for k, v in to_dict(cfg).items() if k not in RESUME_IGNORED})
    return flat


def check_resumable(cfg: LabelConfig, out: Path) -> None:
    """Refuse to mix records made under different settings in one output_dir."""
    out.mkdir(parents=True, exist_ok=True)
    path, current = out / "resume_fingerprint.json", json.loads(json.dumps(resume_fingerprint(cfg)))
    if path.exists() and (out / "records.jsonl").exists():
        saved = json.loads(path.read_text())
        changed = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
        if changed:
            raise ValueError(f"{out} holds records labeled with other settings ({', '.join(changed)}); "
                             "use a new output_dir or delete the old one")
    path.write_text(json.dumps(current, indent=2, sort_keys=True))


def _error_record(conv: Conversation, q: Question, split: str, ctx: Context, error: str) -> dict[str, Any]:
    rec = empty_record(conv, q, split, ctx.fmt, ctx.cfg.label_rule)
    rec["error"] = error
    ctx.tick("errors")
    return rec


def run(cfg: LabelConfig, roles: Roles | None = None, embedder: Any = None) -> dict[str, Any]:
    """Label everything not yet committed, then write the dataset, stats and report. Returns the stats.

    `roles` and `embedder` replace the ones the config would build (tests, or reuse across runs)."""
    started = time.perf_counter()
    out = Path(cfg.output_dir)
    conversations = select(cfg, load_conversations(cfg.data_path, cfg.dataset_format))
    if not any(c.questions for c in conversations):
        raise ValueError("no questions selected: check conversations, categories and max_questions_per_conversation")
    claim_output_dir(out, "label")  # refuses a directory this stage did not make, before touching it
    check_resumable(cfg, out)
    (out / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    for stale in FINAL_OUTPUTS:  # until this run finishes, nothing in output_dir looks finished
        path = out / stale
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    assignment = assign_splits([c.conv_id for c in conversations], cfg.split)
    roles = roles or Roles.from_config(cfg)
    ctx = Context(cfg, roles, LexicalJudge(cfg.judge_threshold), data_format(cfg, cfg.data_path))
    tiers_root = Path(cfg.tiers_dir or out / "tiers")
    total = sum(len(c.questions) for c in conversations)
    from tqdm.auto import tqdm

    with RecordStore(out / "records.jsonl") as store:
        if store.torn_lines:
            log.warning("dropped a torn record line left by an interrupted run")
        resumed = sum(1 for c in conversations for q in c.questions if store.done((c.conv_id, q.qid), cfg.retry_errors))
        bar = tqdm(total=total, initial=resumed, desc="label", unit="q", file=sys.stderr)
        for conv in conversations:
            split = assignment[conv.conv_id]
            todo = [q for q in conv.questions if not store.done((conv.conv_id, q.qid), cfg.retry_errors)]
            if not todo:
                continue
            try:
                runtime = MemoryRuntime.open_or_build(tiers_root, conv, cfg.memory, llm=roles["answerer"],
                                                      summarizer_llm=roles["summarizer"], embedder=embedder)
            except LLMError as exc:  # the summarizer failed: every question of this conversation is an error
                for q in todo:
                    store.put(_error_record(conv, q, split, ctx, f"building tiers: LLMError: {exc}"))
                    bar.update(1)
                continue
            ctx.tick("tiers")
            page_turns = {p.page_id: p.turn_ids for p in runtime.memory.raw.pages(conv.conv_id)}
            try:
                memory = runtime.memory if _workers(ctx) == 1 else Serialized(
                    runtime.memory, threading.RLock(), nested=("raw", "summaries", "keyword"))
                # Without generation, retrieval dominates: embed the conversation's questions in one batch.
                retrieved = None if cfg.generate_answers else dict(zip(
                    [q.qid for q in todo], memory.search_summaries_many([q.question for q in todo], cfg.memory.top_k),
                    strict=True))
                work = functools.partial(label_question, ctx, memory, conv, page_turns=page_turns,
                                         count_tokens=runtime.count_tokens, retrieved=retrieved)
                for rec in _results(ctx, [(q, split) for q in todo], work):
                    store.put(rec)
                    bar.update(1)
                    bar.set_postfix({k: ctx.progress[k] for k in
                                     ("tiers", "summary", "research", "judged", "labeled", "errors")}, refresh=False)
            finally:
                runtime.close()
        bar.close()
        by_key = {(r["conv_id"], r["qid"]): r for r in store.records()}
    wanted = [(c.conv_id, q.qid) for c in conversations for q in c.questions]
    records = [by_key[k] for k in wanted]
    for rec in records:
        rec["split"] = assignment[rec["conv_id"]]  # the current split spec decides, even for resumed records
    return finish(cfg, ctx, records, resumed, time.perf_counter() - started)


def finish(cfg: LabelConfig, ctx: Context, records: list[dict[str, Any]], resumed: int,
           elapsed_s: float) -> dict[str, Any]:
    out = Path(cfg.output_dir)
    check_records_disjoint(records)
    with open(out / "all_records.jsonl", "w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    stats = build_stats(records, cfg.label_rule, llm_judge=ctx.roles["judge"] is not None)
    stats.update({"elapsed_s": round(elapsed_s, 1), "resumed_records": resumed,
                  "new_records": len(records) - resumed, "llm": ctx.roles.stats(),
                  "output_dir": str(out)})
    good = [r for r in records if not r["error"]]
    if good:
        dataset = build_dataset(good)
        dataset.save_to_disk(str(out / "dataset"))
        stats["dataset"] = {name: len(dataset[name]) if name in dataset else 0
                            for name in ("train", "validation", "test")}
    (out / "stats.json").write_text(json.dumps(stats, indent=2))
    write_report(stats, out / "report.md", cfg)
    if not good:
        raise RunError(f"every record is an error ({len(records)}); no dataset written. First error: "
                       f"{records[0]['error']}. See {out}/report.md; fix the cause and rerun (errors are retried)")
    if cfg.push_to_hub:
        push_dataset(out / "dataset", cfg.push_to_hub, cfg.hub_private)
    return stats


def build_dataset(records: list[dict[str, Any]]) -> Any:
    """DatasetDict with the non-empty splits of train / validation / test.

    An empty split is left out: `datasets` saves it without a data file and then cannot load the DatasetDict
    back. stats.json lists every split's size, zeros included."""
    from datasets import Dataset, DatasetDict

    for rec in records:
        if set(rec) != set(FEATURES):
            raise ValueError(f"record {rec.get('qid')!r} does not match the schema: {sorted(set(rec) ^ set(FEATURES))}")
    return DatasetDict({
        name: Dataset.from_dict({k: [r[k] for r in records if r["split"] == name] for k in FEATURES},
                                features=FEATURES)
        for name in ("train", "validation", "test") if any(r["split"] == name for r in records)
    })


def push_dataset(path: Path, repo_id: str, private: bool) -> None:
    try:
        from serving.hub import push_dataset as hub_push  # the project's one hub helper, when present
    except ImportError:
        hub_push = None
    if hub_push is not None:
        hub_push(path, repo_id, private=private)
        return
    from datasets import load_from_disk

    load_from_disk(str(path)).push_to_hub(repo_id, private=private)


def main(argv: list[str] | None = None) -> int:
    cfg = parse_cli(LabelConfig, list(argv or []), default_config=DEFAULT_CONFIG)
    stats = run(cfg)
    rule = cfg.label_rule
    counts = stats["labels"][rule]["all"]
    print(f"labeled {stats['records']} questions ({stats['errors']} errors) in {stats['elapsed_s']} s; "
          f"rule {rule}: ANSWER {counts.get('ANSWER', 0)}, ESCALATE {counts.get('ESCALATE', 0)}, "
          f"dropped {counts.get('dropped', 0)}")
    print(f"outputs: {cfg.output_dir}/dataset, all_records.jsonl, stats.json, report.md")
    return 0 if stats["errors"] == 0 else 1
