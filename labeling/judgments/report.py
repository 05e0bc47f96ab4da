"""`eval judgments=PATH`: every router's decisions, replayed, scored a second time against careful-reading judgments
(records whose units a judgment read; the others counted)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import partial
from typing import Any

from labeling.judgments.format import MATCH_OUTCOMES, Judgments
from labeling.judgments.verdicts import agreement_lines
from labeling.report import ci, fmt
from labeling.rules import decide

_f, _auroc = partial(fmt, none="-"), partial(ci, none="-")  # eval.md's cells: a dash where undefined


def judged_records(records: Sequence[dict[str, Any]], judgments: Judgments) -> tuple[list[dict[str, Any]], dict]:
    """(the records a judgment covers, relabeled by it; match counts, why the rest did not, labels changed)."""
    out, outcomes, changed = [], Counter(), 0
    for r in records:
        texts = [str(u.get("text", "")) for u in r.get("router_summaries") or []]
        judged, why = judgments.match(str(r.get("conv_id")), str(r.get("qid")), str(r.get("question")), texts)
        outcomes[why] += 1
        if judged is None:
            continue
        decision = decide(judged.sufficient, r.get("r_ok"))
        changed += decision.label != r.get("label")
        out.append({**r, "s_ok": judged.sufficient, "label": decision.label, "drop_reason": decision.drop_reason})
    return out, {"judgments": judgments.path, "records": len(records), "matched": len(out),
                 "by_match": {k: outcomes.get(k, 0) for k in MATCH_OUTCOMES}, "labels_changed": changed}


class ReplayedRouter:
    """A router whose decisions are remembered by input: the second scoring replays them (no endpoint called twice,
    no LM seconds spent twice)."""

    def __init__(self, router: Any) -> None:
        self._router, self._seen, self._again = router, {}, False

    def __getattr__(self, name: str) -> Any:  # threshold_logit, meta, name: the router's own
        if name == "kind" and self._again:  # eval's per-kind extras (what reading adds) ran on the first scoring
            return "replayed"
        return getattr(self._router, name)

    def again(self) -> ReplayedRouter:
        other = ReplayedRouter(self._router)
        other._seen, other._again = self._seen, True
        return other

    @staticmethod
    def _key(question: str, units: Sequence[Any]) -> tuple:
        return (question, tuple(str(u.get("text", "")) if isinstance(u, dict) else str(u) for u in units))

    def route_batch(self, questions: Sequence[str], summaries: Sequence[Sequence[Any]],
                    threshold_logit: float | None = None) -> list[Any]:
        keys = [(self._key(q, s), threshold_logit) for q, s in zip(questions, summaries, strict=True)]
        todo = [i for i, k in enumerate(keys) if k not in self._seen]
        if todo:
            got = self._router.route_batch([questions[i] for i in todo], [summaries[i] for i in todo],
                                           threshold_logit=threshold_logit)
            self._seen.update({keys[i]: d for i, d in zip(todo, got, strict=True)})
        return [self._seen[k] for k in keys]


def judged_summary(report: dict[str, Any], coverage: dict[str, Any]) -> dict[str, Any]:
    return {**coverage, **subset_summary(report)}


def subset_summary(report: dict[str, Any]) -> dict[str, Any]:
    """What eval keeps of a second scoring of the same decisions (against the judgments, or one domain's records)."""
    ceiling = (report.get("ceiling") or {}).get("routers") or {}
    rows = {}
    for key, entry in (report.get("ranking") or {}).items():
        c = ceiling.get(key) or {}
        rows[key] = {"n_labeled": entry.get("n_labeled"), "escalate_share": entry.get("escalate_share"),
                     "auroc": entry.get("auroc"),
                     **{k: c.get(k) for k in ("tokens_fewer_share_within_1pt", "tokens_fewer_share_within_2pt",
                                              "false_cache_hit_share_top10", "false_cache_hit_share_top20",
                                              "calibrated_accuracy", "calibrated_tokens_fewer_share")}}
    oracle = (report.get("ceiling") or {}).get("oracle") or {}
    return {"n": report["meta"]["n"], "n_conversations": report["meta"].get("n_conversations"), "routers": rows,
            "oracle_tokens_fewer_share": oracle.get("tokens_fewer_share"),
            "raw_only_accuracy": ((report.get("ceiling") or {}).get("raw_only") or {}).get("accuracy"),
            "comparisons": report.get("comparisons") or []}


def judged_section(judged: dict[str, Any] | None, label_ranking: dict[str, Any]) -> list[str]:
    """eval.md's section: each router against the judgments beside the labels (the same records' AUROC)."""
    if not judged:
        return []
    m = judged["by_match"]
    out = ["### Against careful-reading judgments (`judgments`)", "",
           f"{judged['matched']} of {judged['records']} records judged over exactly these units ({m['units_differ']} "
           f"over other units, {m['no_judgment']} not judged, left out); {judged['labels_changed']} labels differ "
           f"from the dataset's. Raw-only accuracy by the judgments {_f(judged['raw_only_accuracy'])}; the oracle "
           f"saves {_f(judged['oracle_tokens_fewer_share'])} of its tokens. The ceiling columns are CEILINGS "
           "(threshold chosen on these data).", "",
           "| router | AUROC vs labels | AUROC vs judgments | fewest tokens within 1 pt (share fewer) | within 2 pt "
           "| false cache hits, 10% most confident | calibrated: accuracy | calibrated: tokens fewer |",
           "|---|---|---|---|---|---|---|---|"]
    for key, row in judged["routers"].items():
        out.append(f"| {key} | {_auroc((label_ranking.get(key) or {}).get('auroc'))} | {_auroc(row['auroc'])} | "
                   f"{_f(row['tokens_fewer_share_within_1pt'])} | {_f(row['tokens_fewer_share_within_2pt'])} | "
                   f"{_f(row['false_cache_hit_share_top10'])} | {_f(row['calibrated_accuracy'])} | "
                   f"{_f(row['calibrated_tokens_fewer_share'])} |")
    return [*out, ""]


def verdicts_section(checked: dict[str, Any] | None, label_ranking: dict[str, Any]) -> list[str]:
    """eval.md's section: the labels' agreement with careful-reading verdicts, then each router against them."""
    if not checked:
        return []
    lines = agreement_lines(checked["label_agreement"])
    lines[1] = "### Against careful-reading verdicts (`verdicts`)"
    if "routers" not in checked:
        return [*lines, "No labeled record was read over its units by a verdict: no router scored against them.", ""]
    table = judged_section({**checked, "labels_changed": checked.get("labels_changed", 0)}, label_ranking)
    return [*lines, *table[2:]]
