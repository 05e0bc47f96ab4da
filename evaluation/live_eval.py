"""Live end-to-end evaluation: the memory runtime answers held-out questions with the router in the loop.

Unlike replay, every policy really runs: summary-only, raw-only (always research) and routed each go
through MemoryRuntime.answer with fresh LLM calls (no response cache, so the measured latency is real),
and each answer is judged. Correctness is reported under both rules labeling uses: `outcome` (the
lexical LoCoMo-F1 judge on the answer) and `evidence` (the generator-free evidence signals of the path
taken: gold answer tokens in the retrieved summaries, gold evidence turns in the pages research read).
Each answer's two halves are judged alone as well (tiermem.memory.grounding): the LM's reply and the extractive
quote, with the research steps' parse failures. `python -m evaluation.live_main` runs it without the replay, on
named conversations (configs/eval/live_embedded.yaml).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any

from tiermem.runs.safe_io import write_atomic
from tiermem.settings.config import ConfigError
from tiermem.settings.errors import MissingFileError

POLICIES = ("summary_only", "raw_only", "routed")


class _RecordingRouter:
    """Passes decisions through and keeps the last one: the runtime does not return the router's tokens."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.last: Any = None

    def route(self, question: str, summaries: Any, threshold_logit: float | None = None) -> Any:
        self.last = self.inner.route(question, summaries, threshold_logit)
        return self.last


def _label_config(cfg: Any) -> Any:
    """The labeling config that built the dataset (saved next to it), so the runtime matches labeling."""
    from labeling.config import LabelConfig
    from tiermem.settings.config import config_path, parse_config

    path = config_path(cfg.live.label_config) if cfg.live.label_config else Path(cfg.data).parent / "config.yaml"
    if not path.is_file():
        raise MissingFileError(f"live eval: label config {path} not found (set live.label_config=PATH)")
    return parse_config(LabelConfig, path)


def held_out(cfg: Any, label_cfg: Any) -> list[Any]:
    from labeling.dataset import load_split
    from tiermem.data.conversations import load_conversations

    data = cfg.live.data_path if cfg.live.data_path is not None else label_cfg.data_path
    convs = load_conversations(data, label_cfg.dataset_format)
    if cfg.live.conversations:  # named outright: no labeled dataset is read
        by_id = {c.conv_id: c for c in convs}
        missing = [c for c in cfg.live.conversations if c not in by_id]
        if missing:
            raise ConfigError(f"live eval: conversations {missing} are not in {data}")
        convs = [by_id[c] for c in cfg.live.conversations]
    elif cfg.live.split_from_dataset:
        wanted = list(dict.fromkeys(r["conv_id"] for r in load_split(cfg.data, cfg.split)))
        by_id = {c.conv_id: c for c in convs}
        missing = [c for c in wanted if c not in by_id]
        if missing:
            raise ConfigError(f"live eval: conversations {missing} of split {cfg.split!r} are not in {data}")
        convs = [by_id[c] for c in wanted]
    if not convs:
        raise ConfigError(f"live eval: no held-out conversations (split {cfg.split!r} of {cfg.data} is empty)")
    convs = convs[: cfg.live.max_conversations]
    return [dataclasses.replace(c, questions=c.questions[: cfg.live.max_questions]) for c in convs]


def _judged(q: Any, ans: Any, page_turns: dict[str, list[str]], label_cfg: Any, judge: Any,
            fmt: str) -> dict[str, Any]:
    from labeling.evidence import answer_recall, compute_signals

    verdict = judge.judge(q.question, q.answer, ans.answer or "", q.category, fmt)
    research_pages = list(ans.research.pages_read) if ans.research is not None else []
    signals = compute_signals(q.answer, q.category, q.evidence, ans.retrieved, research_pages,
                              lambda p: page_turns.get(p, []), label_cfg.evidence, fmt, points=q.points)
    evidence_ok = signals.s_ok if ans.research is None else signals.r_ok  # escalated once: the pages count
    # the two halves of a grounded answer, judged alone: the model's reply, and the extractive quote
    lm_ok = judge.judge(q.question, q.answer, ans.lm_answer or "", q.category, fmt).correct
    extractive_ok = (judge.judge(q.question, q.answer, ans.extractive_answer, q.category, fmt).correct
                     if ans.extractive_answer else False)
    # F1 punishes a whole quoted sentence for its length; "contains" asks whether it states the gold answer
    # (the share of gold tokens in it, as the evidence rule reads summaries)
    contains = answer_recall(q.answer, [{"text": ans.answer or ""}], q.category, fmt)
    return {"outcome_ok": verdict.correct, "f1": verdict.score, "evidence_ok": evidence_ok, "lm_ok": lm_ok,
            "extractive_ok": extractive_ok,
            "contains_ok": None if contains is None else contains >= label_cfg.evidence.recall_threshold}


def run_live(cfg: Any, router: Any, router_name: str, answerer: Any = None) -> dict[str, Path]:
    """`answerer`: the LLM for both paths; None builds the label config's answerer without its cache."""
    from evaluation.report import POLICY_TITLES, _fmt
    from labeling.answer_judges import LexicalJudge
    from labeling.config import data_format
    from tiermem.llm import build_llm
    from tiermem.memory import MemoryRuntime
    from tiermem.memory.extractive import answerer_mode, load_answer_reader

    policies = list(cfg.live.policies)
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise ConfigError(f"live.policies: {unknown or 'none'}; choose from {list(POLICIES)}")
    if router is None and "routed" in policies:
        raise ConfigError("live eval needs a router (router.kind=local, teacher, remote, features, ...) for its "
                          "routed policy; or leave it out (live.policies=[summary_only,raw_only])")
    label_cfg = _label_config(cfg)
    if cfg.live.memory:  # e.g. the embedded `ask` default's research settings instead of labeling's
        from tiermem.memory import MemoryConfig
        from tiermem.settings.config import from_dict

        memory = from_dict(MemoryConfig, {**dataclasses.asdict(label_cfg.memory), **cfg.live.memory}, "live.memory")
        label_cfg = dataclasses.replace(label_cfg, memory=memory)
    convs = held_out(cfg, label_cfg)
    fmt = data_format(label_cfg, cfg.live.data_path if cfg.live.data_path is not None else label_cfg.data_path)
    # No response cache: a cached call would make the second policy on the same path look free.
    llm_cfg = label_cfg.llm.answerer
    llm_of = answerer if answerer is not None else llm_cfg  # a given answerer decides `auto`, as in the runtime
    extractive = answerer_mode(label_cfg.memory.answerer, llm_of.backend, llm_of.model) == "extractive"
    if answerer is None and not extractive:
        answerer = build_llm(dataclasses.replace(llm_cfg, cache_path=None))
    reader = load_answer_reader(label_cfg.memory.reader) if extractive else None  # one load for every conversation
    judge = LexicalJudge(cfg.live.judge_threshold)
    recorder = _RecordingRouter(router)
    rows: list[dict[str, Any]] = []
    from tqdm.auto import tqdm

    total = sum(len(c.questions) for c in convs)
    bar = tqdm(total=total * len(policies), desc="live eval", unit="answer")
    for conv in convs:
        runtime = MemoryRuntime.open_or_build(Path(cfg.live.workdir) / "tiers", conv, label_cfg.memory, llm=answerer,
                                              answer_reader=reader)
        page_turns = {p.page_id: list(p.turn_ids) for p in runtime.memory.raw.pages(conv.conv_id)}
        try:
            for q in conv.questions:
                for policy in policies:
                    fixed = {"summary_only": "summary", "raw_only": "research"}.get(policy)
                    if fixed:
                        runtime.cfg = dataclasses.replace(runtime.cfg, fixed_policy=fixed)
                    recorder.last = None
                    ans = runtime.answer(q, recorder if policy == "routed" else None)
                    d = recorder.last
                    row = {"conv_id": conv.conv_id, "qid": q.qid, "category": q.category, "policy": policy,
                           "action": ans.action, "answer": ans.answer, "error": ans.error,
                           "router_error": ans.router_error, "router_parsed_ok": ans.router_parsed_ok,
                           # the answering model's; the router's own cost in its own keys, for every router alike
                           "input_tokens": ans.cost.input_tokens, "latency_s": ans.retrieval_s + ans.cost.wall_s,
                           "router_tokens": int(d.prompt_tokens) if d is not None else 0,
                           "router_latency_s": ans.router_s,
                           "p_escalate": getattr(d, "p_escalate", None), "score": getattr(d, "score", None),
                           "parse_failures": ans.research.parse_failures if ans.research is not None else 0,
                           "stop_reason": ans.research.stop_reason if ans.research is not None else None,
                           "lm_answer": ans.lm_answer, "answer_source": ans.answer_source,
                           "fallback_reason": ans.fallback_reason, "extractive_answer": ans.extractive_answer,
                           "escalated_once": ans.escalated_once,
                           "not_stated": ans.reading is not None and not ans.reading.stated}
                    if ans.error is None:
                        row.update(_judged(q, ans, page_turns, label_cfg, judge, fmt))
                    rows.append(row)
                    bar.update(1)
        finally:
            runtime.close()
    bar.close()
    summary = summarize(rows)
    meta = {"router": router_name, "split": cfg.split, "conversations": [c.conv_id for c in convs],
            "questions": total, "label_rule": label_cfg.label_rule,
            "answerer": f"extractive (reader {label_cfg.memory.reader})" if extractive else answerer.name,
            "judge": f"lexical LoCoMo F1 >= {cfg.live.judge_threshold}",
            "memory": dataclasses.asdict(label_cfg.memory)}
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = {"meta": meta, "policies": summary, "rows": rows}
    json_path = out / "live_eval.json"
    write_atomic(json_path, json.dumps(report, indent=2, default=str) + "\n")
    lines = [f"# Live end-to-end evaluation: {router_name}", "",
             f"- held-out conversations ({cfg.split}): {', '.join(meta['conversations'])}; questions: {total}",
             f"- answerer: {meta['answerer']} (fresh calls, no cache); judge: {meta['judge']}",
             f"- labels were made with rule `{meta['label_rule']}`; both rules are shown", "",
             "| policy | accuracy (outcome) | accuracy (evidence) | LM reply alone | extractive alone "
             "| answer contains gold | fallback rate | parse failures (research steps) | escalation rate "
             "| mean input tokens | mean latency (s) | router tokens | router latency (s) | errors |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for policy in policies:
        m = summary[policy]
        lines.append(f"| {POLICY_TITLES.get(policy, policy)} | {_fmt(m['accuracy_outcome'])} "
                     f"| {_fmt(m['accuracy_evidence'])} | {_fmt(m['accuracy_lm'])} | {_fmt(m['accuracy_extractive'])} "
                     f"| {_fmt(m['contains_gold'])} "
                     f"| {_fmt(m['fallback_rate'])} | {m['parse_failures']} in {m['researched']} "
                     f"| {_fmt(m['escalation_rate'])} "
                     f"| {_fmt(m['mean_input_tokens'], 1)} | {_fmt(m['mean_latency_s'], 2)} "
                     f"| {_fmt(m['mean_router_tokens'], 1)} | {_fmt(m['mean_router_latency_s'], 3)} | {m['errors']} |")
    md_path = out / "live_eval.md"
    write_atomic(md_path, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return {"live_json": json_path, "live_markdown": md_path}


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per policy: accuracy under both rules (errors count as wrong), escalation rate, tokens, latency."""
    out = {}
    for policy in POLICIES:
        sub = [r for r in rows if r["policy"] == policy]
        if not sub:
            continue
        known_ev = [r for r in sub if r.get("evidence_ok") is not None]
        out[policy] = {
            "n": len(sub),
            "errors": sum(r["error"] is not None for r in sub),
            "accuracy_outcome": sum(bool(r.get("outcome_ok")) for r in sub) / len(sub),
            # evidence verdicts are undefined for research on questions without gold turns: left out, counted
            "accuracy_evidence": (sum(bool(r["evidence_ok"]) for r in known_ev) / len(known_ev)) if known_ev else None,
            "n_evidence_unknown": len(sub) - len(known_ev),
            "escalation_rate": sum(r["action"] == "ESCALATE" or bool(r.get("escalated_once")) for r in sub) / len(sub),
            "mean_input_tokens": statistics.mean(r["input_tokens"] for r in sub),
            "mean_latency_s": statistics.mean(r["latency_s"] for r in sub),
            "mean_router_tokens": statistics.mean(r["router_tokens"] for r in sub),
            "mean_router_latency_s": statistics.mean(r["router_latency_s"] for r in sub),
            "router_unparseable": sum(r.get("router_parsed_ok") is False for r in sub),
            # grounding (errors count as wrong, as above): the model's reply alone, the extractive quote alone
            "accuracy_lm": sum(bool(r.get("lm_ok")) for r in sub) / len(sub),
            "accuracy_extractive": sum(bool(r.get("extractive_ok")) for r in sub) / len(sub),
            "fallback_rate": sum(r.get("answer_source") == "extractive" for r in sub) / len(sub),
            "contains_gold": sum(bool(r.get("contains_ok")) for r in sub) / len(sub),
            "researched": sum(r["action"] == "ESCALATE" or bool(r.get("escalated_once")) for r in sub),
            "not_stated": sum(bool(r.get("not_stated")) for r in sub),  # answers whose research steps could fail
            "parse_failures": sum(int(r.get("parse_failures") or 0) for r in sub),
        }
    return out

