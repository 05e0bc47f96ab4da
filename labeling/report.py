"""stats.json and report.md for a labeling run: every number is computed from the committed records."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from labeling.judgments import format as judged
from labeling.judgments.verdicts import agreement_lines
from labeling.rules import RULES
from labeling.schema import PATH_COST_FIELDS
from labeling.unit_targets import report_lines
from tiermem.runs.safe_io import write_atomic

SPLITS = ("train", "validation", "test")


def _mean(values: Iterable[Any]) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return round(sum(vals) / len(vals), 4) if vals else None


def _share(flags: Iterable[Any]) -> float | None:
    return _mean(1.0 if f else 0.0 for f in flags if f is not None)


def unlabeled(records: list[dict[str, Any]], label: str = "label", reason: str = "drop_reason") -> dict[str, Any]:
    """How many questions are left without a label, and the share of all questions each drop reason takes."""
    dropped = Counter(r.get(reason) or "unknown" for r in records if not r[label])
    n = len(records)
    return {"questions": n, "unlabeled": sum(dropped.values()),
            "share": round(sum(dropped.values()) / n, 4) if n else None,
            "by_drop_reason": {k: {"n": v, "share": round(v / n, 4)} for k, v in dropped.most_common()}}


def unlabeled_lines(cell: dict[str, Any], what: str) -> list[str]:
    lines = [f"| {what} | all reasons | {cell['unlabeled']} of {cell['questions']} | {fmt(cell['share'])} |"]
    return lines + [f"| {what} | {k} | {v['n']} | {fmt(v['share'])} |" for k, v in cell["by_drop_reason"].items()]


def _labels(records: list[dict[str, Any]], rule: str) -> dict[str, Any]:
    def count(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
        c = Counter(r[f"label_{rule}"] or "dropped" for r in rows)
        return {k: c.get(k, 0) for k in ("ANSWER", "ESCALATE", "dropped")}

    return {
        "all": count(records),
        "by_split": {s: count(r for r in records if r["split"] == s) for s in SPLITS},
        "by_category": {c: count(r for r in records if r["category"] == c)
                        for c in sorted({r["category"] for r in records})},
        "drop_reasons": dict(Counter(r[f"drop_reason_{rule}"] for r in records if not r[f"label_{rule}"])),
        "unlabeled": unlabeled(records, f"label_{rule}", f"drop_reason_{rule}"),
    }


def _verdicts(record: dict[str, Any], path: str) -> dict[str, dict[str, Any]]:
    return {v["judge"]: v for v in json.loads(record["judges"])[path]} if record["judges"] else {}


def _judge_agreement(good: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in ("summary", "research"):
        pairs = [(v["lexical"]["correct"], v["llm"]["correct"], v["llm"]["parsed_ok"])
                 for r in good for v in [_verdicts(r, path)] if "llm" in v]
        out[path] = {"n": len(pairs), "agreement": _share(a == b for a, b, _ in pairs),
                     "llm_correct": _share(b for _, b, _ in pairs), "lexical_correct": _share(a for a, _, _ in pairs),
                     "llm_unparseable": sum(1 for *_, ok in pairs if not ok)}
    return out


def build_stats(records: list[dict[str, Any]], rule: str, llm_judge: bool = False) -> dict[str, Any]:
    """Every count is over natural questions: minimal pairs (rows with `augmentation`) are counted apart, by the run."""
    records = [r for r in records if not r.get("augmentation")]
    good = [r for r in records if not r["error"]]
    with_gold = [r for r in good if r["n_gold"]]
    stats: dict[str, Any] = {
        "records": len(records),
        "errors": len(records) - len(good),
        "error_examples": [{"qid": r["qid"], "error": r["error"]} for r in records if r["error"]][:5],
        "label_rule": rule,
        "labels": {name: _labels(good, name) for name in RULES},
        "kept": {name: sum(1 for r in good if r[f"label_{name}"]) for name in RULES},
        "records_by_split": {s: sum(1 for r in good if r["split"] == s) for s in SPLITS},
        "conversations_by_split": {s: sorted({r["conv_id"] for r in records if r["split"] == s}) for s in SPLITS},
        "accuracy": {
            name: {"summary": _share(r[f"s_ok_{name}"] for r in good),
                   "research": _share(r[f"r_ok_{name}"] for r in good),
                   "research_unknown": sum(1 for r in good if r[f"r_ok_{name}"] is None)}
            for name in RULES
        },
        "mean_f1": {"summary": _mean(r["summary_f1"] for r in good), "research": _mean(r["research_f1"] for r in good)},
        "cost_per_question": {
            path: {k: _mean(r[f"cost_{path}_{k}"] for r in good) for k in PATH_COST_FIELDS}
            for path in ("summary", "research")
        },
        "evidence": {
            "questions_with_gold": len(with_gold),
            "mean_answer_recall": _mean(r["answer_recall"] for r in good),
            "gold_turn_share_in_summary_pages": _ratio(with_gold, "gold_in_summary_pages"),
            "gold_turn_share_in_research_pages": _ratio(with_gold, "gold_in_research_pages"),
            # questions whose retrieved summaries do not state the gold answer while tier 2 holds every gold turn
            "unverifiable_omission_rate": _share(not r["s_ok_evidence"] for r in with_gold),
            "omissions_recovered_by_research": _share(bool(r["r_ok_evidence"]) for r in with_gold
                                                      if not r["s_ok_evidence"]),
        },
        "rule_agreement": {
            "s_ok_outcome_vs_evidence": _share(r["s_ok_outcome"] == r["s_ok_evidence"] for r in good),
            "label_agreement_both_labeled": _share(
                r["label_outcome"] == r["label_evidence"] for r in good if r["label_outcome"] and r["label_evidence"]),
        },
        "judges": {"lexical": True, "llm": llm_judge,
                   "agreement": _judge_agreement(good) if llm_judge else None},
        "research_signals": {
            "r_ok_by": dict(Counter(r.get("r_ok_by") for r in good if r.get("r_ok_by"))),
            "mean_research_recall": _mean(r.get("research_recall") for r in good),
            "guard_unmatched": sum(1 for r in good if "does not narrow" in (r.get("person_guard") or "")),
        },
        "research": {"parse_failures": sum(r["research_parse_failures"] or 0 for r in good),
                     "stop_reasons": dict(Counter(r["research_stop"] for r in good))},
    }
    suff = [json.loads(r["sufficiency"]) | {"rec": r} for r in good if r["sufficiency"]]
    stats["sufficiency"] = None if not suff else {
        "n": len(suff), "sufficient": _share(s["sufficient"] for s in suff),
        "unparseable": sum(1 for s in suff if not s["parsed_ok"]),
        "agrees_with_s_ok_outcome": _share(s["sufficient"] == s["rec"]["s_ok_outcome"] for s in suff),
        "agrees_with_s_ok_evidence": _share(s["sufficient"] == s["rec"]["s_ok_evidence"] for s in suff),
        "vetoed_answer_labels": sum(1 for s in suff if s["rec"].get("sufficiency_veto")),
    }
    generated = {r.get("answers_generated") for r in good}
    stats["answers"] = (None if not good else "generated" if generated == {True} else
                        "not generated (generator-free; research cost estimated)" if generated == {False} else "mixed")
    taught = [r for r in good if r["teacher"]]
    stats["teacher"] = None if not taught else {
        "n": len(taught),
        "unparseable": sum(1 for r in taught if not json.loads(r["teacher"])["parsed_ok"]),
        "agreement_with_label": _share(r["teacher_agrees"] for r in taught if r["label"]),
    }
    stats["coverage"] = {"by_conversation": coverage(good, "conv_id", rule), "by_category": coverage(good, "category",
                                                                                                 rule)}
    stats["points"] = point_stats(good)
    stats["sft_targets"] = dict(Counter(r["sft_source"] for r in good if r["sft_source"]))
    stats["judgments"] = judged.judged_stats(good)
    return stats


def coverage(records: list[dict[str, Any]], key: str, rule: str) -> dict[str, Any]:
    """Per value of `key`: questions, labeled, the ANSWER share of the labeled, and why the rest were dropped."""
    out = {}
    for value in sorted({str(r[key]) for r in records}):
        rows = [r for r in records if str(r[key]) == value]
        labels = Counter(r[f"label_{rule}"] for r in rows if r[f"label_{rule}"])
        labeled = sum(labels.values())
        out[value] = {"questions": len(rows), "labeled": labeled, "labeled_share": round(labeled / len(rows), 4),
                      "answer_share": round(labels["ANSWER"] / labeled, 4) if labeled else None,
                      "dropped": dict(Counter(r[f"drop_reason_{rule}"] for r in rows if not r[f"label_{rule}"]))}
    return out


def point_stats(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Questions that name the memory facts they need: how many facts, and the share each path held."""
    rows = [r for r in records if r.get("n_points") and r.get("points_in_summaries") is not None]
    if not rows:
        return None
    total = sum(r["n_points"] for r in rows)
    return {"questions": len(rows), "mean_points": round(total / len(rows), 3),
            "several_points": sum(1 for r in rows if r["n_points"] > 1),
            "held_by_summaries": round(sum(r["points_in_summaries"] for r in rows) / total, 4),
            "held_by_research": round(sum(r["points_in_research"] for r in rows) / total, 4)}


def coverage_lines(stats: dict[str, Any]) -> list[str]:
    lines = []
    for what, table in (stats.get("coverage") or {}).items():
        lines += ["", f"Labeled {what.replace('_', ' ')} (rule {stats['label_rule']}):", "",
                  "| | questions | labeled | share | ANSWER share | dropped (why) |", "|---|---|---|---|---|---|"]
        lines += [f"| {k} | {c['questions']} | {c['labeled']} | {fmt(c['labeled_share'])} | "
                  f"{fmt(c['answer_share'])} | {', '.join(f'{r}: {n}' for r, n in c['dropped'].items()) or '-'} |"
                  for k, c in table.items()]
    points = stats.get("points")
    if points:
        lines += ["", f"Memory facts a question needs (its data names them): {points['questions']} questions, "
                  f"{points['mean_points']} facts each on average ({points['several_points']} need several); "
                  f"held by the summaries {fmt(points['held_by_summaries'])}, by the research pages "
                  f"{fmt(points['held_by_research'])} of the facts (evidence.points_share decides how many are "
                  "enough)."]
    return lines


def _ratio(rows: list[dict[str, Any]], key: str) -> float | None:
    total = sum(r["n_gold"] for r in rows)
    return round(sum(r[key] or 0 for r in rows) / total, 4) if total else None


def fmt(value: Any, digits: int = 3, none: str = "n/a") -> str:
    if value is None:
        return none
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def ci(iv: dict[str, Any] | None, digits: int = 3, none: str = "n/a") -> str:
    """`0.750 [0.612, 0.861]`; the estimate alone without an interval."""
    if not iv or iv.get("estimate") is None:
        return none
    if iv.get("lo") is None:
        return fmt(iv["estimate"], digits)
    return f"{fmt(iv['estimate'], digits)} [{fmt(iv['lo'], digits)}, {fmt(iv['hi'], digits)}]"


def _pair_lines(pairs: dict[str, Any] | None) -> list[str]:
    if not pairs:
        return ["", "Minimal pairs: off (every row is a question with its natural retrieval)."]
    lines = ["", "## Minimal pairs", "",
             f"{pairs['emitted']} variants of labeled questions' summary sets, one unit apart, labeled by the same "
             f"rule (not counted in the totals above); {pairs['train_rows']} are in the train split, "
             f"{pairs['held_out']} belong to validation/test conversations and stay out of the dataset.", "",
             "| kind | emitted | train ANSWER | train ESCALATE |", "|---|---|---|---|"]
    lines += [f"| {kind} | {c['emitted']} | {c['train']['ANSWER']} | {c['train']['ESCALATE']} |"
              for kind, c in pairs["kinds"].items()]
    return lines


def write_report(stats: dict[str, Any], path: Path, cfg: Any) -> None:
    rule = stats["label_rule"]
    lines = [
        "# Labeling report", "",
        f"- data: `{cfg.data_path or 'shipped sample'}`; {stats['records']} questions, {stats['errors']} errors; "
        f"elapsed {stats.get('elapsed_s', 'n/a')} s ({stats.get('resumed_records', 0)} records resumed)",
        f"- labels used: rule **{rule}**, {stats['kept'][rule]} kept of {stats['records'] - stats['errors']} "
        f"(the other rule keeps {stats['kept']['evidence' if rule == 'outcome' else 'outcome']}); "
        "both rules are recorded on every record",
        f"- answers: {stats.get('answers') or 'n/a'}",
    ]
    empty = stats.get("empty_turns_dropped") or {}
    if empty.get("total"):
        lines.append(f"- empty turns dropped by the loader (no text, no image caption): {empty['total']} "
                     f"({', '.join(f'{k}: {n}' for k, n in empty['by_conversation'].items())})")
    order = stats.get("time_order") or {}
    if order.get("turns_reordered"):
        lines.append(f"- turns out of time order, sorted by the loader (sessions by first turn, turns by timestamp): "
                     f"{order['turns_reordered']} "
                     f"({', '.join(f'{k}: {n}' for k, n in order['by_conversation'].items())})")
    if not stats["judges"]["llm"]:
        lines.append("- judges: lexical judge alone (LoCoMo F1 >= threshold); no LLM judge is configured, as in "
                     "the embedded default, because small local models judge at chance")
    else:
        lines.append("- judges: lexical AND LLM judge (an answer is correct only if both say so)")
    lines += ["", "## Label balance", "", "| rule | split | ANSWER | ESCALATE | dropped |", "|---|---|---|---|---|"]
    for name in RULES:
        lab = stats["labels"][name]
        rows = [("all", lab["all"])] + list(lab["by_split"].items())
        lines += [f"| {name} | {s} | {c['ANSWER']} | {c['ESCALATE']} | {c['dropped']} |" for s, c in rows]
    lines += ["", "Per category (LoCoMo category numbers):", "", "| rule | category | ANSWER | ESCALATE | dropped |",
              "|---|---|---|---|---|"]
    for name in RULES:
        for cat, c in stats["labels"][name]["by_category"].items():
            lines.append(f"| {name} | {cat} | {c['ANSWER']} | {c['ESCALATE']} | {c['dropped']} |")
    lines += coverage_lines(stats)
    lines += ["", "## Unlabeled questions by drop reason", "",
              "Share of all questions (errors left out) that each reason leaves without a label.", "",
              "| rule | drop reason | questions | share |", "|---|---|---|---|"]
    for name in RULES:
        lines += unlabeled_lines(stats["labels"][name]["unlabeled"], name)
    research = stats.get("research_signals") or {}
    if research.get("r_ok_by"):
        lines += ["", f"Research path right by (evidence rule): {research['r_ok_by']}; mean answer recall over the "
                  f"text research read: {fmt(research['mean_research_recall'])}. Person guard: "
                  f"{research['guard_unmatched']} questions name someone no speaker or mentioned name matches "
                  "(their units are not narrowed)."]
    lines += _pair_lines(stats.get("minimal_pairs"))
    lines += report_lines(stats.get("unit_targets"))
    lines += judged.report_lines(stats.get("judgments"))
    lines += agreement_lines(stats.get("verdicts"))
    acc = stats["accuracy"]
    lines += ["", "## Path accuracy", "", "| rule | summary-only | research | research unknown |", "|---|---|---|---|"]
    lines += [f"| {n} | {fmt(acc[n]['summary'])} | {fmt(acc[n]['research'])} | {acc[n]['research_unknown']} |"
              for n in RULES]
    lines += ["", f"Mean LoCoMo F1: summary {fmt(stats['mean_f1']['summary'])}, "
              f"research {fmt(stats['mean_f1']['research'])}."]
    lines += ["", "## Cost per question (means)", "", "| path | " + " | ".join(PATH_COST_FIELDS) + " |",
              "|---|" + "---|" * len(PATH_COST_FIELDS)]
    for p, c in stats["cost_per_question"].items():
        lines.append(f"| {p} | " + " | ".join(fmt(c[k]) for k in PATH_COST_FIELDS) + " |")
    ev = stats["evidence"]
    lines += ["", "## Evidence signals", "",
              f"- unverifiable-omission rate: {fmt(ev['unverifiable_omission_rate'])} (share of the "
              f"{ev['questions_with_gold']} questions with gold evidence whose retrieved summaries do not state the "
              f"gold answer by the evidence rule, while tier 2 holds every gold turn); research recovers "
              f"{fmt(ev['omissions_recovered_by_research'])} of those",
              "- gold turns in pages linked to the retrieved summaries: "
              f"{fmt(ev['gold_turn_share_in_summary_pages'])}; in pages the research policy read: "
              f"{fmt(ev['gold_turn_share_in_research_pages'])}",
              f"- mean answer recall in the summaries: {fmt(ev['mean_answer_recall'])}",
              "", "## Agreement", "",
              "- summary path correct, outcome vs evidence: "
              f"{fmt(stats['rule_agreement']['s_ok_outcome_vs_evidence'])}; labels where both rules label: "
              f"{fmt(stats['rule_agreement']['label_agreement_both_labeled'])}"]
    agree = stats["judges"]["agreement"]
    lines.append("- lexical vs LLM judge: " + ("n/a (no LLM judge)" if not agree else "; ".join(
        f"{p}: {fmt(a['agreement'])} over {a['n']} ({a['llm_unparseable']} unparseable)" for p, a in agree.items())))
    suff = stats["sufficiency"]
    lines.append("- sufficiency judge: " + ("not configured" if not suff else
                 f"{suff['n']} judged, {fmt(suff['sufficient'])} sufficient, {suff['unparseable']} unparseable "
                 f"(counted as insufficient), {suff.get('vetoed_answer_labels', 0)} ANSWER labels vetoed; "
                 f"agrees with summary-path correctness: outcome "
                 f"{fmt(suff['agrees_with_s_ok_outcome'])}, evidence {fmt(suff['agrees_with_s_ok_evidence'])}"))
    teacher = stats["teacher"]
    lines.append("- teacher: " + ("not configured (SFT targets are the label with a templated rationale)"
                                  if not teacher else f"{teacher['n']} outputs, {teacher['unparseable']} "
                                  f"unparseable, agreement with the label {fmt(teacher['agreement_with_label'])}"))
    lines.append(f"- SFT targets by source: {stats['sft_targets']}")
    lines += ["", "## Errors and research loop", "",
              f"- error records: {stats['errors']} (never turned into verdicts; a rerun retries them)"]
    lines += [f"  - `{e['qid']}`: {e['error'][:200]}" for e in stats["error_examples"]]
    lines.append(f"- research: {stats['research']['parse_failures']} unparseable plan/extraction replies; "
                 f"stop reasons {stats['research']['stop_reasons']}")
    if stats.get("llm"):
        lines += ["", "## LLM calls", "", "| model | roles | new calls | cache hits | errors | input tokens | "
                  "output tokens |", "|---|---|---|---|---|---|---|"]
        for name, s in stats["llm"].items():
            lines.append(f"| {name} | {', '.join(s['roles'])} | {s['new_calls']} | {s['cache_hits']} | "
                         f"{s['errors']} | {s['input_tokens']} | {s['output_tokens']} |")
    if stats.get("dataset"):
        pairs = stats.get("minimal_pairs")
        lines += ["", f"Dataset splits (by conversation, error records excluded): {stats['dataset']}"
                  + (f", of which {pairs['train_rows']} train rows are minimal pairs" if pairs else "")
                  + f"; conversations {stats['conversations_by_split']}"]
    write_atomic(path, "\n".join(lines) + "\n")
