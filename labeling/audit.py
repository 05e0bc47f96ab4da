"""`tiermem-router audit`: a stratified review sheet of labeled records and their agreement with a judge."""

from __future__ import annotations

import json
import random
import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from labeling.answer_judges import SufficiencyJudge
from labeling.dataset import action_label, check_records, jsonl_label_records, record_key, summary_units, text
from labeling.report import unlabeled, unlabeled_lines
from tiermem import stats
from tiermem.llm import LLMConfig, LLMError
from tiermem.runs.safe_io import write_atomic
from tiermem.settings.config import check_declared
from tiermem.settings.errors import EXIT_NETWORK, EXIT_SOME_ERRORS, DataError, RunError, stage_main

ACTIONS = ("ANSWER", "ESCALATE")
# Below this many judged records a kappa says little (its 95% interval spans most of [-1, 1]): it is printed with
# a warning, beside n and its interval, never alone.
MIN_KAPPA_N = 30


@dataclass
class AuditConfig:
    data: str = "runs/label"  # a label run directory (its all_records.jsonl) or a records .jsonl file
    n: int = field(default=60, metadata={"ge": 1})  # labeled questions in the sheet, split evenly over the strata
    seed: int = 0  # the sample's seed
    output_dir: str = "runs/audit"
    baseline: str | None = None  # another label run of the same questions: sample only those whose label changed
    judge: LLMConfig | None = None  # fill the verdicts with this LLM (the strict sufficiency judge); null = leave empty

    def __post_init__(self) -> None:
        check_declared(self)


def records_path(data: str) -> Path:
    path = Path(data)
    path = path / "all_records.jsonl" if path.is_dir() else path
    if not path.is_file():
        raise DataError(f"{data}: no label records (expected a label run directory or a .jsonl file)")
    return path


def load_questions(data: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The run's question records (no minimal pairs) by (conv_id, qid), each field the sheet shows checked."""
    located = jsonl_label_records(records_path(data))
    for where, rec in located:
        record_key(rec, where)
        text(rec, "question", where)
        text(rec, "gold_answer", where)
        if "question_date" in rec:
            text(rec, "question_date", where, allow_none=True)
        summary_units(rec, where)
        action_label(rec, where)
    return {record_key(rec, ""): rec for rec in check_records(located) if not rec.get("augmentation")}


def sample(records: list[dict[str, Any]], n: int, seed: int) -> list[dict[str, Any]]:
    """`n` records taken round-robin over the (source, label) strata, each stratum in seeded random order."""
    strata: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for rec in records:
        strata[(str(rec.get("source")), str(rec["label"]))].append(rec)
    rng = random.Random(seed)
    queues = []
    for key in sorted(strata):
        items = sorted(strata[key], key=lambda r: (r["conv_id"], r["qid"]))
        rng.shuffle(items)
        queues.append(items)
    picked: list[dict[str, Any]] = []
    while len(picked) < n and any(queues):
        for queue in queues:
            if queue and len(picked) < n:
                picked.append(queue.pop(0))
    return sorted(picked, key=lambda r: (r["conv_id"], r["qid"]))


def cohen_kappa(pairs: list[tuple[str, str]]) -> float | None:
    """Cohen's kappa of two readings; None when chance agreement is 1 (both always say the same one thing)."""
    if not pairs:
        return None
    n = len(pairs)
    observed = sum(a == b for a, b in pairs) / n
    first, second = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    chance = sum(first[c] * second[c] for c in ACTIONS) / (n * n)
    return None if chance == 1 else (observed - chance) / (1 - chance)


def sheet_row(rec: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "conv_id": rec["conv_id"], "qid": rec["qid"], "source": rec.get("source"), "split": rec.get("split"),
        "question": rec["question"], "question_date": rec.get("question_date"), "gold_answer": rec["gold_answer"],
        "summaries": [{"date": u.get("date"), "text": u.get("text"), "speakers": u.get("speakers")}
                      for u in rec["router_summaries"]],
        "signals": {k: rec.get(k) for k in ("answer_recall", "gold_in_summary_pages", "gold_in_research_pages",
                                            "n_gold", "s_ok", "r_ok", "research_recall", "r_ok_by",
                                            "person_guard")},
        "label": rec["label"], "baseline_label": None if previous is None else previous.get("label"),
        "judge_verdict": None, "judge_reason": None, "judge_status": None, "verdict": None,
    }


def judge_rows(rows: list[dict[str, Any]], judge: SufficiencyJudge) -> list[LLMError]:
    """Fill each row's verdict; the LLM errors, in row order (each also recorded in its row)."""
    errors = []
    for row in rows:
        try:
            result = judge.judge(row["question"], row["gold_answer"], row["summaries"])
        except LLMError as exc:
            row["judge_status"], row["judge_reason"] = "error", f"LLMError: {exc}"
            errors.append(exc)
            continue
        if not result.parsed_ok:
            row["judge_status"], row["judge_reason"] = "unparsed", result.reason
            continue
        row["judge_status"], row["judge_reason"] = "ok", result.reason
        row["judge_verdict"] = "ANSWER" if result.sufficient else "ESCALATE"
    return errors


def kappa_reps(pairs: list[tuple[str, str]], counts: np.ndarray) -> np.ndarray:
    """Cohen's kappa under each row of bootstrap draw counts (NaN where chance agreement is 1)."""
    a = np.asarray([x == "ANSWER" for x, _ in pairs], dtype=np.float64)
    b = np.asarray([y == "ANSWER" for _, y in pairs], dtype=np.float64)
    n = counts.sum(axis=1)
    observed = counts @ (a == b) / n
    pa, pb = counts @ a / n, counts @ b / n
    chance = pa * pb + (1 - pa) * (1 - pb)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(chance < 1, (observed - chance) / (1 - chance), np.nan)


def kappa_warnings(pairs: list[tuple[str, str]]) -> list[str]:
    """Why the kappa of these pairs means little: too few of them, or a side that always says the same."""
    out = []
    if len(pairs) < MIN_KAPPA_N:
        out.append(f"only {len(pairs)} judged record(s) (< {MIN_KAPPA_N}): the kappa is too uncertain to read")
    for side, values in (("the judge", {b for _, b in pairs}), ("the labels", {a for a, _ in pairs})):
        if len(values) == 1:
            out.append(f"{side} always said {next(iter(values))}: kappa cannot tell agreement from chance")
    return out


def agreement(rows: list[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    judged = [r for r in rows if r["judge_status"] == "ok"]
    pairs = [(r["label"], r["judge_verdict"]) for r in judged]
    confusion = {label: {verdict: sum(1 for p in pairs if p == (label, verdict)) for verdict in ACTIONS}
                 for label in ACTIONS}
    kappa = cohen_kappa(pairs)
    reps = kappa_reps(pairs, stats.bootstrap_counts([r["conv_id"] for r in judged], seed=seed)) if pairs else None
    return {"judged": len(pairs), "unparsed": sum(r["judge_status"] == "unparsed" for r in rows),
            "errors": sum(r["judge_status"] == "error" for r in rows),
            "agreement": round(sum(a == b for a, b in pairs) / len(pairs), 4) if pairs else None,
            "cohen_kappa": None if kappa is None else round(kappa, 4),
            "kappa_interval": None if reps is None else stats.interval(kappa, reps),
            "kappa_warnings": kappa_warnings(pairs) if pairs else [], "confusion": confusion}


def kappa_text(judge: dict[str, Any]) -> str:
    """"Cohen's kappa K (n=N, 95% interval [lo, hi])" and its warnings: how the kappa is printed, never alone."""
    span = judge.get("kappa_interval") or {}
    bounds = f"[{span['lo']:.2f}, {span['hi']:.2f}]" if span.get("lo") is not None else "none"
    line = f"Cohen's kappa {judge['cohen_kappa']} (n={judge['judged']}, 95% interval {bounds})"
    return line + "".join(f"; warning: {w}" for w in judge.get("kappa_warnings", []))


def _cell(text: Any) -> str:
    return " ".join(str(text if text is not None else "").split()).replace("|", "\\|")


def render(rows: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    lines = [f"# Label audit: {summary['sampled']} of {summary['labeled']} labeled questions",
             "", f"Records: `{summary['data']}`; sample seed {summary['seed']}, stratified by (source, label): "
             + ", ".join(f"{k} {v}" for k, v in summary["strata"].items()) + "."]
    if summary.get("baseline"):
        b = summary["baseline"]
        lines += ["", f"Compared with `{b['data']}`: {b['changed']} of {b['shared']} shared questions changed label "
                  f"({', '.join(f'{k}: {v}' for k, v in b['changes'].items()) or 'none'}); the sheet samples them."]
    if summary.get("judge"):
        a = summary["judge"]
        lines += ["", f"Judge `{a['model']}`: {a['judged']} judged, {a['unparsed']} unparsed, {a['errors']} errors; "
                  f"agreement {a['agreement']}, {kappa_text(a)}.", "",
                  "| label \\ judge | ANSWER | ESCALATE |", "|---|---|---|"]
        lines += [f"| {label} | {a['confusion'][label]['ANSWER']} | {a['confusion'][label]['ESCALATE']} |"
                  for label in ACTIONS]
    lines += ["", "Unlabeled questions by drop reason (share of all questions):", "",
              "| run | drop reason | questions | share |", "|---|---|---|---|"]
    lines += unlabeled_lines(summary["unlabeled"], "this run")
    if summary.get("baseline"):
        lines += unlabeled_lines(summary["baseline"]["unlabeled"], "baseline")
    lines += ["", "Fill the verdict column with ANSWER (the summaries alone give the gold answer) or ESCALATE.", ""]
    for i, r in enumerate(rows, 1):
        s = r["signals"]
        lines += [f"## {i}. {r['conv_id']} / {r['qid']} ({r['source']}, {r['split']})", "",
                  f"- question: {_cell(r['question'])}" + (f" (asked {r['question_date']})" if r["question_date"]
                                                           else ""),
                  f"- gold: {_cell(r['gold_answer'])}",
                  f"- rule: **{r['label']}**" + (f" (baseline: {r['baseline_label']})" if r["baseline_label"] or
                                                 summary.get("baseline") else "")
                  + f"; answer recall {s['answer_recall']}, gold turns in summary pages {s['gold_in_summary_pages']}"
                  f"/{s['n_gold']}, in research pages {s['gold_in_research_pages']}/{s['n_gold']}; answer recall "
                  f"over the text research read {s['research_recall']} (research right by: {s['r_ok_by']})"
                  + (f"; person guard: {_cell(s['person_guard'])}" if s["person_guard"] else ""),
                  "", "| # | date | summary (speaker: text) |", "|---|---|---|"]
        lines += [f"| {j} | {_cell(u['date'] or 'undated')} | {_cell(u['text'])} |"
                  for j, u in enumerate(r["summaries"], 1)]
        judge = f"{r['judge_verdict']} ({_cell(r['judge_reason'])})" if r["judge_status"] == "ok" else \
            f"{r['judge_status']}: {_cell(r['judge_reason'])}" if r["judge_status"] else "not run"
        lines += ["", f"- judge: {judge}", "- verdict: ______", ""]
    return "\n".join(lines)


def audit(cfg: AuditConfig, judge_llm: Any = None) -> dict[str, Any]:
    from tiermem.runs.rundir import claimed_output_dir

    with claimed_output_dir(cfg.output_dir, "audit") as out:
        records = load_questions(cfg.data)
        labeled = {k: r for k, r in records.items() if r["label"] in ACTIONS}
        summary: dict[str, Any] = {"data": cfg.data, "seed": cfg.seed, "labeled": len(labeled),
                                   "unlabeled": unlabeled(list(records.values()))}
        previous: dict[tuple[str, str], dict[str, Any]] = {}
        pool = list(labeled.values())
        if cfg.baseline:
            previous = load_questions(cfg.baseline)
            shared = [k for k in records if k in previous]
            changed = [k for k in shared if records[k]["label"] != previous[k]["label"]]
            changes = Counter(f"{previous[k]['label']} -> {records[k]['label']}" for k in changed)
            summary["baseline"] = {"data": cfg.baseline, "shared": len(shared), "changed": len(changed),
                                   "changes": dict(sorted(changes.items())),
                                   "unlabeled": unlabeled(list(previous.values()))}
            pool = [labeled[k] for k in changed if k in labeled]
        rows = [sheet_row(r, previous.get((r["conv_id"], r["qid"]))) for r in sample(pool, cfg.n, cfg.seed)]
        summary["sampled"] = len(rows)
        summary["strata"] = dict(sorted(Counter(f"{r['source']}/{r['label']}" for r in rows).items()))
        if judge_llm is None and cfg.judge is not None:
            from tiermem.llm import build_llm

            judge_llm = build_llm(cfg.judge)
        errors: list[LLMError] = []
        if judge_llm is not None:
            errors = judge_rows(rows, SufficiencyJudge(judge_llm))
            summary["judge"] = {"model": getattr(judge_llm, "model", type(judge_llm).__name__),
                                **agreement(rows, cfg.seed)}
        # never through a link planted in the claimed directory
        write_atomic(out / "audit.jsonl", "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
        write_atomic(out / "audit.md", render(rows, summary) + "\n")
        write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    _judge_failures(summary.get("judge"), errors)
    return summary


def _judge_failures(judge: dict[str, Any] | None, errors: list[LLMError]) -> None:
    """No verdict at all from a judge that was asked: the sheet is written, then the stage fails (exit 7 or 6)."""
    if judge is None or judge["judged"] or not (judge["errors"] or judge["unparsed"]):
        return
    what = f"every judge call failed ({judge['errors']} LLM error(s), {judge['unparsed']} unreadable repl(ies))"
    first = f"; first: {errors[0]}" if errors else ""
    failure = RunError(f"{what}{first}; no agreement computed")
    if errors and len(errors) == judge["errors"] and not judge["unparsed"] and \
            all(getattr(e, "exit_code", None) == EXIT_NETWORK for e in errors):
        failure.exit_code = EXIT_NETWORK
    raise failure


@stage_main("audit")
def main(argv: list[str]) -> int:
    from tiermem.settings.config import parse_cli

    cfg = parse_cli(AuditConfig, argv, default_config=None)
    summary = audit(cfg)
    judge = summary.get("judge")
    print(f"audit: {summary['sampled']} of {summary['labeled']} labeled questions -> {cfg.output_dir}/audit.md"
          + (f"; judge agreement {judge['agreement']}, {kappa_text(judge)} ({judge['judged']} "
             f"judged, {judge['unparsed']} unparsed, {judge['errors']} errors)" if judge else ""))
    print(json.dumps({"config": asdict(cfg), **summary}, indent=2, default=str))
    if judge and (judge["errors"] or judge["unparsed"]):  # some verdicts are missing: done, with error records
        print(f"audit: {judge['errors'] + judge['unparsed']} of {summary['sampled']} judge call(s) gave no verdict "
              "(judge_status in audit.jsonl)", file=sys.stderr)
        return EXIT_SOME_ERRORS
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
