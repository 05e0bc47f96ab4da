"""Labeling one question into its record (the run only orders the questions and commits records)."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from labeling.answer_judges import LexicalJudge, LLMJudge, SufficiencyJudge, Verdict, all_correct, verdicts_json
from labeling.config import LabelConfig
from labeling.evidence import Reading, compute_signals
from labeling.judgments.format import Judgment, Judgments
from labeling.judgments.live import judge_missing
from labeling.reply_evidence import UNDECIDED
from labeling.roles import Roles
from labeling.rules import LabelDecision, decide
from labeling.schema import PATH_COST_FIELDS
from labeling.teacher import TeacherOutput, ask_teacher, recorded_teacher, sft_target
from tiermem.data.conversations import Conversation, Question
from tiermem.llm import LLMError
from tiermem.memory import PathCost, research_policy, summary_policy
from tiermem.memory.policies import estimated_research_input_tokens, first_round_pages, summary_messages


def _cost(prefix: str, cost: Any) -> dict[str, Any]:
    return {f"cost_{prefix}_{k}": (round(getattr(cost, k), 4) if k == "wall_s" else getattr(cost, k))
            for k in PATH_COST_FIELDS}


def empty_record(conv: Conversation, q: Question, split: str, fmt: str, rule: str) -> dict[str, Any]:
    record: dict[str, Any] = {
        "conv_id": conv.conv_id, "qid": q.qid, "split": split, "source": fmt, "question": q.question,
        "question_date": q.date, "gold_answer": q.answer, "category": str(q.category),
        "evidence_ids": list(q.evidence), "asked_before": q.asked_before,
        "question_tags": json.dumps(q.tags, sort_keys=True) if q.tags else None,
        "n_points": len(q.points) if q.points else None, "points_in_summaries": None, "points_in_research": None,
        "reply_details": None, "reply_missing_in_summaries": None, "reply_missing_after_research": None,
        "router_summaries": [], "summary_answer": None, "research_answer": None,
        "research_pages": [], "research_stop": None, "research_parse_failures": None, "summary_f1": None,
        "research_f1": None, "judges": None, "sufficiency": None, "s_ok_outcome": None, "r_ok_outcome": None,
        "s_ok_evidence": None, "r_ok_evidence": None, "answer_recall": None, "gold_in_summary_pages": None,
        "gold_in_research_pages": None, "n_gold": len(set(q.evidence)), "research_recall": None, "r_ok_by": None,
        "person_guard": None, "label_outcome": None,
        "drop_reason_outcome": None, "label_evidence": None, "drop_reason_evidence": None, "label_rule": rule,
        "label": None, "drop_reason": "error", "s_ok": None, "r_ok": None, "sufficiency_veto": None,
        "s_ok_by": None, "judgment_match": None, "judgment": None,
        "answers_generated": None, "cost_estimated": None, "teacher": None,
        "teacher_agrees": None, "sft_target": None, "sft_source": None, "label_wall_s": None, "error": None,
        "augmentation": None, "augmented_from": None, "unit_targets": [],
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
    judgments: Judgments | None = None  # careful-reading judgments (label config `judgments`)
    coverage: tuple[Any, Any] | None = None  # (the live coverage judge, the judgments file it appends to)
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


def router_input(retrieved: list[Any]) -> list[dict[str, Any]]:
    return [{"unit_id": u.unit_id, "text": u.text, "score": round(float(u.score), 6), "date": u.date,
             "page_ids": list(u.page_ids), "speakers": list(u.speakers)} for u in retrieved]


def _generated_paths(ctx: Context, memory: Any, q: Question, rec: dict[str, Any]) -> list[str]:
    """Both policies with the answerer; their answers are judged. Returns the pages research read."""
    cfg_memory, answerer = ctx.cfg.memory, ctx.roles["answerer"]
    s = summary_policy(memory, q, answerer, cfg_memory.top_k, max_tokens=cfg_memory.answer_max_tokens)
    rec["router_summaries"] = router_input(s.retrieved)
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
    return list(r.pages_read)


def summary_input_tokens(q: Question, retrieved: list[Any], count_tokens: Any) -> int:
    """Input tokens of the summary path's answer prompt over `retrieved` (its estimated cost without generation)."""
    return sum(count_tokens(m["content"]) for m in summary_messages(q.question, retrieved, q.date))


def _estimated_paths(ctx: Context, memory: Any, q: Question, rec: dict[str, Any], count_tokens: Any,
                     retrieved: list[Any]) -> list[str]:
    """No generation: the router's retrieval and research's first-round pages, costs estimated (deeper rounds need a
    generator's planner)."""
    cfg_memory = ctx.cfg.memory
    started = time.perf_counter()
    pages = first_round_pages(memory, q.question, retrieved, pages_per_round=cfg_memory.pages_per_round,
                              keyword_k=cfg_memory.keyword_k, question_date=q.date,
                              turn_k=cfg_memory.turn_k, needed=cfg_memory.pages_per_round)[: cfg_memory.pages_per_round]
    read = memory.raw.get_many(pages)
    s_tokens = summary_input_tokens(q, retrieved, count_tokens)
    r_tokens = estimated_research_input_tokens(q.question, q.date, read, count_tokens, cfg_memory.max_snippets)
    wall = round(time.perf_counter() - started, 4)
    rec["router_summaries"] = router_input(retrieved)
    rec.update({"research_pages": pages, "research_stop": "not_generated", "research_parse_failures": 0,
                **_cost("summary", PathCost(input_tokens=s_tokens, wall_s=wall)),
                **_cost("research", PathCost(input_tokens=r_tokens, wall_s=wall, pages_read=len(pages),
                                             rounds=1 if pages else 0))})
    ctx.tick("retrieved")
    return pages


def label_summaries(ctx: Context, q: Question, rec: dict[str, Any], pages_read: list[str],
                    page_turns: Reading | dict[str, list[str]]) -> None:
    """The labels, teacher and SFT target from `rec["router_summaries"]` and the research pages; LLMError propagates."""
    cfg = ctx.cfg
    sufficiency = None
    if ctx.roles["sufficiency"] is not None:
        verdict = SufficiencyJudge(ctx.roles["sufficiency"]).judge(q.question, q.answer, rec["router_summaries"])
        sufficiency = dataclasses.asdict(verdict)
        rec["sufficiency"] = json.dumps(sufficiency)

    signals = compute_signals(q.answer, q.category, q.evidence, rec["router_summaries"], pages_read,
                              page_turns, cfg.evidence, ctx.fmt, question=q.question, points=q.points,
                              reply=getattr(q, "reply", None))
    rec.update({"s_ok_evidence": signals.s_ok, "r_ok_evidence": signals.r_ok,
                "answer_recall": signals.answer_recall, "gold_in_summary_pages": signals.gold_in_summary_pages,
                "gold_in_research_pages": signals.gold_in_research_pages, "n_gold": signals.n_gold,
                "research_recall": signals.research_recall, "r_ok_by": signals.r_ok_by,
                "person_guard": signals.person_guard, "points_in_summaries": signals.points_in_summaries,
                "points_in_research": signals.points_in_research,
                **({} if signals.reply is None else {
                    "reply_details": signals.reply.n_details,
                    "reply_missing_in_summaries": signals.reply.missing_from_summaries,
                    "reply_missing_after_research": signals.reply.missing_after_research})})
    # Conservative: when a sufficiency judge ran, an ANSWER label needs its agreement (None = not run).
    sufficient = None if sufficiency is None else bool(sufficiency["sufficient"])
    by_rule = {"outcome": decide(rec["s_ok_outcome"], rec["r_ok_outcome"], sufficient),
               "evidence": decide(signals.s_ok, signals.r_ok, sufficient) if signals.reply is None
               or signals.s_ok is not None else LabelDecision(None, UNDECIDED)}
    for rule, decision in by_rule.items():
        rec[f"label_{rule}"], rec[f"drop_reason_{rule}"] = decision.label, decision.drop_reason
    chosen = by_rule[cfg.label_rule]
    rec["s_ok"], rec["r_ok"] = rec[f"s_ok_{cfg.label_rule}"], rec[f"r_ok_{cfg.label_rule}"]
    judged = _judged(ctx, q, rec)
    if judged is not None:  # the careful reading of these units decides s_ok; r_ok keeps the rule's verdict
        rec["s_ok"] = judged.sufficient
        chosen = decide(rec["s_ok"], rec["r_ok"], sufficient)
    rec["label"], rec["drop_reason"] = chosen.label, chosen.drop_reason
    rec["sufficiency_veto"] = chosen.vetoed

    teacher: TeacherOutput | None = None
    if judged is not None and judged.teacher is not None:
        teacher = recorded_teacher(judged.teacher)
    elif ctx.roles["teacher"] is not None:
        teacher = ask_teacher(ctx.roles["teacher"], q.question, rec["router_summaries"])
    if teacher is not None:
        rec["teacher"] = json.dumps(teacher.to_dict())
    target = sft_target(chosen.label, teacher, signals.answer_recall, sufficiency)
    rec.update(sft_target=target.target, sft_source=target.source, teacher_agrees=target.teacher_agrees)


def _judged(ctx: Context, q: Question, rec: dict[str, Any]) -> Judgment | None:
    """The judgment of exactly this record's router units, recorded on it; None: the lexical rule decides."""
    if ctx.judgments is None:
        return None
    texts = [u["text"] for u in rec["router_summaries"]]
    judged, rec["judgment_match"] = ctx.judgments.match(rec["conv_id"], rec["qid"], q.question, texts)
    if judged is None and ctx.coverage is not None and rec["judgment_match"] == "no_judgment" \
            and not rec.get("augmentation"):  # a question never judged: the live judge, once (LLMError propagates)
        judge, cache = ctx.coverage
        judge_missing(judge, cache, ctx.judgments, rec["conv_id"], rec["qid"], q.question, q.answer,
                      rec["router_summaries"])
        # another run sharing the file may have judged it first, over other units: matched as any judgment
        judged, rec["judgment_match"] = ctx.judgments.match(rec["conv_id"], rec["qid"], q.question, texts)
    rec["s_ok_by"] = "lexical" if judged is None else "judgment"
    if judged is not None:
        rec["judgment"] = json.dumps(judged.to_record())
    return judged


def label_question(ctx: Context, memory: Any, conv: Conversation, q: Question, split: str,
                   page_turns: Reading | dict[str, list[str]], count_tokens: Any,
                   retrieved: dict[str, list[Any]] | None) -> dict[str, Any]:
    """Every stage for one question. LLMError anywhere -> an error record (never a verdict)."""
    cfg = ctx.cfg
    started = time.perf_counter()
    rec = empty_record(conv, q, split, ctx.fmt, cfg.label_rule)
    if late_evidence(memory, q, conv):  # memory as of the question cannot hold what it needs: no label says otherwise
        for key in ("drop_reason", "drop_reason_evidence", "drop_reason_outcome"):
            rec[key] = LATE_EVIDENCE
        rec["answers_generated"], rec["cost_estimated"] = cfg.generate_answers, not cfg.generate_answers
        rec["label_wall_s"] = round(time.perf_counter() - started, 3)
        ctx.tick("late_evidence")
        return rec
    try:
        if cfg.generate_answers:
            pages_read = _generated_paths(ctx, memory, q, rec)
        else:
            pages_read = _estimated_paths(ctx, memory, q, rec, count_tokens, retrieved[q.qid])
        rec["answers_generated"], rec["cost_estimated"] = cfg.generate_answers, not cfg.generate_answers
        label_summaries(ctx, q, rec, pages_read, page_turns)
        ctx.tick("judged")
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


LATE_EVIDENCE = "evidence_after_question"  # the drop reason of a question whose gold evidence comes after it


def late_evidence(memory: Any, q: Question, conv: Conversation) -> list[str]:
    """The gold turns of `q` said at or after its turn. A gold point without source turns is late (`point:<text>`)
    when none of its conversation's units of that text has all its turns before the question."""
    history, before = getattr(memory, "history", None), getattr(memory, "before", None)
    if q.asked_before is None or history is None or before is None:
        return []
    late = [t for t in q.evidence if history.position.get(t, before) >= before]
    for point in (p for p in q.points if not p.turn_ids):
        links = [u.turn_ids for u in conv.summaries if u.text == point.text and u.turn_ids]
        if links and all(any(history.position.get(t, before) >= before for t in ids) for ids in links):
            late.append(f"point:{point.text[:60]}")
    return late


def error_record(conv: Conversation, q: Question, split: str, ctx: Context, error: str) -> dict[str, Any]:
    rec = empty_record(conv, q, split, ctx.fmt, ctx.cfg.label_rule)
    rec["error"] = error
    ctx.tick("errors")
    return rec
