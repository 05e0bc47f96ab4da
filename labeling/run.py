"""`make label`: hindsight labeling of benchmark questions into router training data (docs/labeling.md). Records are
committed one by one (a killed run resumes); outputs are written new, then swapped in; `shard=i/n` labels one shard,
which `label-merge` finishes."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from labeling.answer_judges import LexicalJudge
from labeling.config import LabelConfig, data_format, select
from labeling.evidence import Reading
from labeling.hub import push_dataset
from labeling.judgments.format import check_covers, check_matched, load_judgments
from labeling.judgments.live import CoverageJudge, JudgmentsCache
from labeling.judgments.verdicts import agreement, load_verdicts
from labeling.minimal_pairs import for_dataset, label_with_pairs, retrieval_depth, with_variants
from labeling.question import Context, error_record
from labeling.report import build_stats, write_report
from labeling.resume import FINAL_OUTPUTS, check_resumable
from labeling.roles import Roles, Serialized
from labeling.schema import FEATURES
from labeling.shards import STATE as SHARD_STATE
from labeling.shards import parse_shard, shard_dir, shard_of, write_state
from labeling.split import assign_splits, check_records_disjoint
from labeling.store import RecordStore, record_key
from labeling.unit_targets import for_split, unit_stats
from tiermem.data.conversations import Conversation, Question, load_conversations
from tiermem.data.time_order import time_order_stats
from tiermem.llm import LLMError
from tiermem.memory import MemoryRuntime
from tiermem.runs.rundir import RunError, check_output_dir, claim_cache_dir, claim_output_dir, claimed_output_dir
from tiermem.runs.safe_io import check_file_path, save_into, write_atomic, write_stream
from tiermem.settings.config import to_dict
from tiermem.settings.errors import UsageError

log = logging.getLogger(__name__)


def _results(workers: int, jobs: list[tuple[Question, str]], fn: Any) -> Iterator[dict[str, Any]]:
    """Records in question order; bounded concurrency for HTTP backends, one at a time otherwise."""
    if workers == 1:
        for q, split in jobs:
            yield fn(q, split)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(fn, q, split) for q, split in jobs]
        for future in futures:
            yield future.result()


def run(cfg: LabelConfig, roles: Roles | None = None, embedder: Any = None) -> dict[str, Any]:
    """Label what is not yet committed, write the outputs, return the stats (with `cfg.shard`: that shard's state)."""
    started = time.perf_counter()
    out = check_output_dir(cfg.output_dir, "label")  # a foreign or busy directory is refused before any loading
    if cfg.shard is not None:
        check_output_dir(shard_dir(out, *parse_shard(cfg.shard)), "label")
    check_judgments_file(cfg)
    if cfg.verdicts:
        load_verdicts(cfg.verdicts)  # a missing or malformed verdicts file stops the run before any labeling
    conversations = selected_conversations(cfg)
    if cfg.judgments and cfg.llm.coverage is None:  # a live judge covers what the file does not
        check_covers(cfg.judgments, load_judgments(cfg.judgments),
                     [(c.conv_id, q.qid) for c in conversations for q in c.questions])
    if cfg.shard is not None:
        return _run_shard(cfg, roles, embedder, conversations, started)
    # Held until the run ends: a second run on this directory would append every record a second time.
    with claimed_output_dir(out, "label"):
        return _run_claimed(cfg, roles, embedder, conversations, started)


def check_judgments_file(cfg: LabelConfig) -> None:
    """`judgments`: a regular file, or (a live judge writes it) a new path in an existing folder, before any work."""
    if cfg.judgments:
        check_file_path(cfg.judgments, "judgments", may_be_new=cfg.llm.coverage is not None)


def selected_conversations(cfg: LabelConfig) -> list[Conversation]:
    """The conversations and questions the config selects (every shard and the merge select the same)."""
    conversations = select(cfg, load_conversations(cfg.data_path, cfg.dataset_format))
    if not any(c.questions for c in conversations):
        raise UsageError("no questions selected: check conversations and max_questions_per_conversation")
    return conversations


def _run_claimed(cfg: LabelConfig, roles: Roles | None, embedder: Any, conversations: list[Conversation],
                 started: float) -> dict[str, Any]:
    out = Path(cfg.output_dir)
    check_resumable(cfg, out)
    recover_outputs(out)
    write_atomic(out / "config.yaml", yaml.safe_dump(to_dict(cfg), sort_keys=False))
    assignment = assign_splits([c.conv_id for c in conversations], cfg.split)
    ctx, by_key, resumed = label_conversations(cfg, roles, embedder, conversations, assignment)
    records = dataset_records(by_key, conversations, assignment)
    return finish(cfg, records, resumed, time.perf_counter() - started, dropped_turns(conversations),
                  llm_judge=ctx.roles["judge"] is not None, llm_stats=ctx.roles.stats(),
                  extra_stats={"time_order": time_order_stats(conversations)})


def _run_shard(cfg: LabelConfig, roles: Roles | None, embedder: Any, conversations: list[Conversation],
               started: float) -> dict[str, Any]:
    """One shard into `<output_dir>/shards/<i>-of-<n>/`; `<output_dir>` gets the label marker but no lock: the shards
    run at once, each locking its own directory."""
    index, count = parse_shard(cfg.shard)
    claim_output_dir(cfg.output_dir, "label", lock=False)
    here = shard_dir(cfg.output_dir, index, count)
    # The split is assigned over every selected conversation, exactly as a one-process run assigns it.
    assignment = assign_splits([c.conv_id for c in conversations], cfg.split)
    mine = [c for c in conversations if shard_of(c.conv_id, count) == index]
    # Every default path a run derives from output_dir (tiers/, llm_cache.sqlite) is the shard's own.
    shard_cfg = dataclasses.replace(cfg, output_dir=str(here))
    with claimed_output_dir(here, "label"):
        check_resumable(shard_cfg, here)
        write_atomic(here / "config.yaml", yaml.safe_dump(to_dict(cfg), sort_keys=False))
        state: dict[str, Any] = {"shard": f"{index}/{count}", "index": index, "count": count,
                                 "conversations": [c.conv_id for c in mine],
                                 "questions": sum(len(c.questions) for c in mine), "finished": False}
        write_state(here / SHARD_STATE, state)  # a shard killed from here on is not finished
        ctx, by_key, resumed = label_conversations(shard_cfg, roles, embedder, mine, assignment)
        records = dataset_records(by_key, mine, assignment)
        natural = [r for r in records if not r.get("augmentation")]
        state.update({"finished": True, "records": len(natural), "errors": sum(1 for r in natural if r["error"]),
                      "resumed_records": resumed, "elapsed_s": round(time.perf_counter() - started, 1),
                      "llm_judge": ctx.roles["judge"] is not None, "llm": ctx.roles.stats()})
        write_state(here / SHARD_STATE, state)
    return {**state, "output_dir": str(here)}


def label_conversations(cfg: LabelConfig, roles: Roles | None, embedder: Any, conversations: list[Conversation],
                        assignment: dict[str, str]) -> tuple[Context, dict[tuple[str, str], dict[str, Any]], int]:
    """Label the questions not yet committed: (the context, key -> committed record, how many were resumed)."""
    out = Path(cfg.output_dir)
    roles = roles or Roles.from_config(cfg)
    lexical = LexicalJudge(cfg.judge_threshold, cfg.evidence.date_order)
    cache = JudgmentsCache(cfg.judgments) if roles["coverage"] is not None else None  # created here when absent
    judgments = cache.load() if cache is not None else load_judgments(cfg.judgments) if cfg.judgments else None
    ctx = Context(cfg, roles, lexical, data_format(cfg, cfg.data_path), judgments=judgments,
                  coverage=None if cache is None else (CoverageJudge(roles["coverage"]), cache))
    # A tiers_dir of its own is a cache other runs may share; the default one lives inside this run.
    tiers_root = claim_cache_dir(cfg.tiers_dir) if cfg.tiers_dir else out / "tiers"
    workers = cfg.concurrency if roles.thread_safe() else 1
    total = sum(len(c.questions) for c in conversations)
    from tqdm.auto import tqdm

    with RecordStore(out / "records.jsonl") as store:
        if store.torn_lines:
            log.warning("dropped a torn record line left by an interrupted run")
        resumed = sum(1 for c in conversations for q in c.questions if store.done((c.conv_id, q.qid)))
        bar = tqdm(total=total, initial=resumed, desc="label", unit="q", file=sys.stderr)
        for conv in conversations:
            split = assignment[conv.conv_id]
            todo = [q for q in conv.questions if not store.done((conv.conv_id, q.qid))]
            if not todo:
                continue
            try:
                runtime = MemoryRuntime.open_or_build(tiers_root, conv, cfg.memory, share_turn_vectors=True,
                                                      llm=roles["answerer"],
                                                      summarizer_llm=roles["summarizer"], embedder=embedder)
                embedder = runtime.embedder  # loaded once, shared by every conversation's tiers
            except LLMError as exc:  # the summarizer failed: every question of this conversation is an error
                for q in todo:
                    store.put(error_record(conv, q, split, ctx, f"building tiers: LLMError: {exc}"))
                    bar.update(1)
                continue
            ctx.tick("tiers")
            try:
                # memory as of each question (one view of the tiers per question's turn, nothing rebuilt)
                views = {q.qid: runtime.memory.as_of(q.asked_before) for q in todo}
                # Without generation, retrieval dominates: embed the questions in one batch (research reuses each
                # vector); retrieve to deep_k (the router's top_k is a prefix of that ranking).
                for q, vector in zip(todo, runtime.memory.summaries.embed([q.question for q in todo]), strict=True):
                    views[q.qid]._query = (q.question, vector)
                retrieved = None if cfg.generate_answers else {
                    q.qid: views[q.qid].search_summaries(q.question, retrieval_depth(cfg)) for q in todo}
                work = functools.partial(_label_as_of, ctx, conv, views, AsOfReadings(), workers,
                                         count_tokens=runtime.count_tokens, retrieved=retrieved)
                for group in _results(workers, [(q, split) for q in todo], work):
                    for rec in group:  # a question's minimal pairs, then the question itself
                        if not store.done(record_key(rec)):  # pairs committed before a kill
                            store.put(rec)
                    bar.update(1)
                    bar.set_postfix({k: ctx.progress[k] for k in
                                     ("tiers", "summary", "research", "judged", "labeled", "errors")}, refresh=False)
            finally:
                runtime.close()
        bar.close()
        by_key = {(r["conv_id"], r["qid"]): r for r in store.records()}
    return ctx, by_key, resumed


class AsOfReadings:
    """Each question's `Reading`, one per point in the conversation a question is asked at, shared by the questions
    asked there."""

    def __init__(self) -> None:
        self._by_cutoff: dict[int | None, Reading] = {}
        self._lock = threading.Lock()

    def __call__(self, memory: Any) -> Reading:
        with self._lock:
            if memory.before not in self._by_cutoff:
                self._by_cutoff[memory.before] = Reading.of_pages(memory.all_pages(), memory.visible_units())
            return self._by_cutoff[memory.before]


def _label_as_of(ctx: Any, conv: Conversation, views: dict[str, Any], readings: AsOfReadings, workers: int,
                 q: Question, split: str, **kwargs: Any) -> list[dict[str, Any]]:
    view = views[q.qid]
    reading = readings(view)
    memory = view if workers == 1 else Serialized(view, _SHARED_LOCK, nested=("raw", "summaries", "keyword"))
    return label_with_pairs(ctx, memory, conv, q, split, page_turns=reading, **kwargs)


_SHARED_LOCK = threading.RLock()  # a conversation's views share its SQLite connections and embedder


def dataset_records(by_key: dict[tuple[str, str], dict[str, Any]], conversations: list[Conversation],
                    assignment: dict[str, str]) -> list[dict[str, Any]]:
    """The records in question order, each followed by its variants, with the split the current spec assigns (even
    to resumed records)."""
    wanted = [(c.conv_id, q.qid) for c in conversations for q in c.questions]
    records = with_variants(by_key, wanted)
    for rec in records:
        rec["split"] = assignment[rec["conv_id"]]
    return records


def dropped_turns(conversations: list[Conversation]) -> dict[str, list[str]]:
    return {c.conv_id: list(c.dropped_turns) for c in conversations if c.dropped_turns}


STAGING_PREFIX = ".finalize-"  # a run's new outputs, before they are swapped in
ASIDE_PREFIX = ".dataset-old-"  # the previous dataset/, between the two renames of the swap


def recover_outputs(out: Path) -> None:
    """Undo what a run killed inside the swap left: put the old dataset/ back if no new one arrived, drop staging."""
    asides = sorted(out.glob(f"{ASIDE_PREFIX}*"))
    if not (out / "dataset").exists():
        for aside in asides:
            if (aside / "dataset").is_dir():
                os.replace(aside / "dataset", out / "dataset")
                break
    for path in [*asides, *out.glob(f"{STAGING_PREFIX}*")]:
        shutil.rmtree(path, ignore_errors=True)


def _swap_in(stage: Path, out: Path) -> None:
    """Move every final output from `stage` over the ones in `out`; an output the new run has none of (a dataset
    when every record is an error) is removed, so `out` always holds the outputs of one run."""
    aside = None
    if (out / "dataset").exists():
        aside = Path(tempfile.mkdtemp(prefix=ASIDE_PREFIX, dir=out))
        os.replace(out / "dataset", aside / "dataset")
    if (stage / "dataset").exists():
        os.replace(stage / "dataset", out / "dataset")
    for name in FINAL_OUTPUTS:
        if name != "dataset":
            os.replace(stage / name, out / name)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def finish(cfg: LabelConfig, records: list[dict[str, Any]], resumed: int, elapsed_s: float,
           dropped_turns: dict[str, list[str]], *, llm_judge: bool, llm_stats: dict[str, Any],
           extra_stats: dict[str, Any]) -> dict[str, Any]:
    """Write the outputs into a staging directory, then swap them in (a one-process run and label-merge alike)."""
    out = Path(cfg.output_dir)
    records, pairs = for_dataset(records, cfg.minimal_pairs.enabled)  # minimal pairs reach the train split only
    records = for_split(records)  # deeper units' targets reach the train split only
    check_records_disjoint(records)
    good = [r for r in records if not r["error"]]
    stage = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out))
    try:
        write_stream(stage / "all_records.jsonl", lambda fh: fh.writelines(
            (json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8") for rec in records))
        stats = build_stats(records, cfg.label_rule, llm_judge=llm_judge)
        if cfg.verdicts:  # checked against careful reading (read before labeling: a bad file stopped the run there)
            stats["verdicts"] = agreement(records, load_verdicts(cfg.verdicts))
        check_matched(cfg.judgments, stats.get("judgments"))
        stats.update({"elapsed_s": round(elapsed_s, 1), "resumed_records": resumed,
                      "new_records": stats["records"] - resumed, "minimal_pairs": pairs, "llm": llm_stats,
                      "output_dir": str(out),
                      "unit_targets": unit_stats(records) if cfg.unit_targets.enabled else None,
                      "empty_turns_dropped": {"total": sum(len(v) for v in dropped_turns.values()),
                                              "by_conversation": {k: len(v) for k, v in dropped_turns.items()}},
                      **extra_stats})
        if good:
            dataset = build_dataset(good)
            save_into(stage / "dataset", lambda folder: dataset.save_to_disk(str(folder)))
            stats["dataset"] = {name: len(dataset[name]) if name in dataset else 0
                                for name in ("train", "validation", "test")}
        write_atomic(stage / "stats.json", json.dumps(stats, indent=2))
        write_report(stats, stage / "report.md", cfg)
        _swap_in(stage, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    if not good:
        raise RunError(f"every record is an error ({len(records)}); no dataset written. First error: "
                       f"{records[0]['error']}. See {out}/report.md; fix the cause and rerun (errors are retried)")
    if cfg.push_to_hub:
        push_dataset(out / "dataset", cfg.push_to_hub, private=cfg.hub_private)
    return stats


def build_dataset(records: list[dict[str, Any]]) -> Any:
    """DatasetDict of the non-empty splits: `datasets` saves an empty one without a data file, then cannot load it."""
    from datasets import Dataset, DatasetDict

    for rec in records:
        if set(rec) != set(FEATURES):
            raise ValueError(f"record {rec.get('qid')!r} does not match the schema: {sorted(set(rec) ^ set(FEATURES))}")
    return DatasetDict({
        name: Dataset.from_dict({k: [r[k] for r in records if r["split"] == name] for k in FEATURES},
                                features=FEATURES)
        for name in ("train", "validation", "test") if any(r["split"] == name for r in records)
    })
