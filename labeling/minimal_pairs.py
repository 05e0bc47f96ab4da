"""Minimal pairs: train-split variants of a question's summary set one unit apart (docs/formats.md)."""

from __future__ import annotations

import copy
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from labeling.config import PAIR_KINDS, LabelConfig
from labeling.evidence import Reading, compute_signals
from labeling.question import (
    LATE_EVIDENCE,
    Context,
    _cost,
    error_record,
    label_question,
    label_summaries,
    router_input,
    summary_input_tokens,
)
from labeling.rules import ANSWER, ESCALATE
from labeling.unit_targets import unit_targets, with_judged_units
from tiermem.data.conversations import Conversation, Question
from tiermem.llm import LLMError
from tiermem.memory import PathCost
from tiermem.memory.text import content_words

SEPARATOR = "~"  # qid of a variant: <qid>~<kind>


def variant_qid(qid: str, kind: str) -> str:
    return f"{qid}{SEPARATOR}{kind}"


def retrieval_depth(cfg: LabelConfig) -> int:
    """How many units to retrieve per question: the deepest of minimal_pairs.deep_k and unit_targets.deep_k."""
    depth = max(cfg.memory.top_k, cfg.minimal_pairs.deep_k) if cfg.minimal_pairs.enabled else cfg.memory.top_k
    units = cfg.unit_targets
    return max(depth, units.deep_k) if units.enabled and units.deep_k is not None else depth


def _without(units: Sequence[Any], i: int) -> list[Any]:
    return [u for j, u in enumerate(units) if j != i]


def summary_sets(shown: Sequence[Any], deeper: Sequence[Any], label: str | None, s_ok_now: bool | None,
                 s_ok: Callable[[list[Any]], bool], question: str) -> dict[str, list[Any]]:
    """kind -> the variant's units in rank order; `shown`: the router's units, `deeper`: the ranks below them."""
    sets: dict[str, list[Any]] = {}
    if not shown:
        return sets
    if label == ANSWER:
        answer_at = next((i for i in range(len(shown)) if not s_ok(_without(shown, i))), None)
        keep_at = next((i for i in reversed(range(len(shown))) if s_ok(_without(shown, i))), None)
        if answer_at is not None:
            sets["drop_answer"] = _without(shown, answer_at)
        if keep_at is not None:
            sets["drop_irrelevant"] = _without(shown, keep_at)
        if answer_at is not None:
            about = set(content_words(question))
            rest = _without(shown, answer_at)
            near = next((u for u in deeper if about & set(content_words(u.text)) and not s_ok([*rest, u])), None)
            if near is not None:
                sets["near_miss"] = [*rest, near]
    elif label == ESCALATE and s_ok_now is False:  # an ESCALATE vetoed by the sufficiency judge has s_ok true
        bring = next((u for u in deeper if s_ok([*shown[:-1], u])), None)
        if bring is not None:
            sets["bring_answer"] = [*shown[:-1], bring]
    return {kind: sets[kind] for kind in PAIR_KINDS if kind in sets}


def variants(ctx: Context, q: Question, rec: dict[str, Any], ranked: Sequence[Any],
             page_turns: Reading | dict[str, list[str]], count_tokens: Any) -> list[dict[str, Any]]:
    """The labeled variants of one labeled record; `ranked`: the question's retrieval to deep_k."""
    cfg = ctx.cfg
    k = len(rec["router_summaries"])
    shown, deeper = list(ranked[:k]), list(ranked[k:])
    if [u.unit_id for u in shown] != [s["unit_id"] for s in rec["router_summaries"]]:
        raise AssertionError(f"{rec['qid']}: the deep retrieval does not start with the router's units")
    pages = rec["research_pages"]

    def s_ok(units: list[Any]) -> bool:
        return compute_signals(q.answer, q.category, q.evidence, units, pages, page_turns, cfg.evidence,
                               ctx.fmt, question=q.question, points=q.points).s_ok

    out = []
    original_ids = {u.unit_id for u in shown}
    for kind, units in summary_sets(shown, deeper, rec["label"], rec["s_ok"], s_ok, q.question).items():
        if {u.unit_id for u in units} == original_ids:
            continue
        started = time.perf_counter()
        var = copy.deepcopy(rec)
        var.update({"qid": variant_qid(rec["qid"], kind), "augmentation": kind, "augmented_from": rec["qid"],
                    "router_summaries": router_input(units),
                    # the retrieval is the question's own: its time stands; the prompt is the new set's
                    **_cost("summary", PathCost(input_tokens=summary_input_tokens(q, units, count_tokens),
                                                wall_s=rec["cost_summary_wall_s"]))})
        label_summaries(ctx, q, var, pages, page_turns)
        if var["label"] is None:
            continue
        var["label_wall_s"] = round(time.perf_counter() - started, 3)
        out.append(var)
    return out


def label_with_pairs(ctx: Context, memory: Any, conv: Conversation, q: Question, split: str,
                     page_turns: Reading | dict[str, list[str]], count_tokens: Any = None,
                     retrieved: dict[str, list[Any]] | None = None) -> list[dict[str, Any]]:
    """`label_question`, its variants first (committed in order, a question is never without them) and its unit
    targets. An LLMError in a variant makes the question an error record, never one with variants missing."""
    cfg = ctx.cfg
    depth = retrieval_depth(cfg)
    ranked = (retrieved or {}).get(q.qid)
    if ranked is None and depth > cfg.memory.top_k:
        ranked = memory.search_summaries(q.question, depth)
    shown = None if ranked is None else {q.qid: ranked[: cfg.memory.top_k]}
    rec = label_question(ctx, memory, conv, q, split, page_turns, count_tokens, shown)
    if rec["error"] or rec["drop_reason"] == LATE_EVIDENCE:
        return [rec]
    out = []
    if cfg.minimal_pairs.enabled:
        try:
            # the variants' candidates stop at minimal_pairs.deep_k, however deep the unit targets retrieve
            out = variants(ctx, q, rec, ranked[: cfg.minimal_pairs.deep_k], page_turns, count_tokens)
        except LLMError as exc:
            return [error_record(conv, q, split, ctx, f"minimal pairs: {type(exc).__name__}: {exc}")]
    if cfg.unit_targets.enabled:  # after the variants copied rec: they keep an empty list
        rec["unit_targets"] = unit_targets(rec, q, ranked, page_turns, cfg.evidence, ctx.fmt, cfg.unit_targets.deep_k)
        with_judged_units(rec, ctx.judgments)
    return [*out, rec]


def with_variants(by_key: dict[tuple[str, str], dict[str, Any]],
                  wanted: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """The wanted questions' records, each followed by its committed variants (in kind order)."""
    out = []
    for conv_id, qid in wanted:
        out.append(by_key[(conv_id, qid)])
        out += [by_key[key] for kind in PAIR_KINDS if (key := (conv_id, variant_qid(qid, kind))) in by_key]
    return out


def for_dataset(records: list[dict[str, Any]], enabled: bool) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(natural records and the train split's variants; per kind: `emitted` over every split, `train` by label)."""
    kept = [r for r in records if not r.get("augmentation") or r["split"] == "train"]
    if not enabled:
        return kept, None
    augmented = [r for r in records if r.get("augmentation")]
    emitted = Counter(r["augmentation"] for r in augmented)
    train = Counter((r["augmentation"], r["label"]) for r in augmented if r["split"] == "train")
    kinds = {kind: {"emitted": emitted[kind], "train": {label: train[(kind, label)] for label in (ANSWER, ESCALATE)}}
             for kind in PAIR_KINDS}
    return kept, {"kinds": kinds, "emitted": len(augmented), "train_rows": sum(train.values()),
                  "held_out": len(augmented) - sum(train.values())}
