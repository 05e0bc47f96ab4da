"""`make eval`: score a router on a labeled split by counterfactual replay against the baselines, with two-stage
cluster-bootstrap intervals (`tiermem-router eval [--config configs/eval/default.yaml] [router.path=runs/grpo]`)."""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from evaluation import analysis as eval_analysis
from evaluation import metrics
from evaluation import report as eval_report
from evaluation.ceiling import calibrated_by, ceiling_report, router_ceiling
from evaluation.domains import per_domain, split_by_domain
from evaluation.provenance import data_name, dataset_provenance, machine_info
from evaluation.reading import reading_steps
from evaluation.sweep import sweep as sweep_of
from labeling.dataset import RecordError, data_label, data_paths, load_split
from labeling.judgments.format import load_judgments
from labeling.judgments.report import ReplayedRouter, judged_records, judged_summary
from labeling.judgments.verdicts import agreement, load_verdicts
from serving.routers import Decision, RouterSpec, as_router_spec, build, decide
from tiermem import contract
from tiermem.runs.run_meta import RunMeta, meta_digest
from tiermem.runs.rundir import check_output_dir, claimed_output_dir
from tiermem.runs.safe_io import write_atomic
from tiermem.settings import ranges
from tiermem.settings.config import AT_LEAST_ONE, ConfigError, check_declared, from_dict, parse_cli
from tiermem.settings.errors import stage_main

log = logging.getLogger(__name__)
DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "eval" / "default.yaml"
RESERVED_NAMES = ("routed", "summary_only", "raw_only", "random", "oracle")


@dataclass
class BootstrapConfig:
    # replicates of the two-stage (conversation, question) bootstrap; 0 turns intervals off
    n_boot: int = field(default=1000, metadata={"ge": 0})
    seed: int = 0
    level: float = field(default=0.95, metadata={"gt": 0.5, "lt": 1})

    def __post_init__(self) -> None:
        check_declared(self, "bootstrap.")


@dataclass
class EvalConfig:
    # DatasetDict dir (save_to_disk) or a labeling records .jsonl (any file); several: [a, b], pooled, each
    # record's domain kept, and eval reports each domain beside the pool
    data: str | list[str] = "runs/label/dataset"
    split: str = "test"
    correctness: Literal["label_rule", "outcome", "evidence"] = "label_rule"  # see metrics.correctness_fields
    include_unlabeled: bool = True  # keep records the label rule dropped (both paths wrong) in accuracy
    router: RouterSpec = field(default_factory=RouterSpec)
    compare: list[Any] = field(default_factory=list)  # more routers on the same records: RouterSpec mappings
    # paired differences a - b between two rows (routed or compare names): accuracy, AUROC, APGR and mean input
    # tokens, each at its row's calibrated threshold; e.g. [[grpo, sft]]
    pairs: list[list[str]] = field(default_factory=list)
    recover_shares: list[float] = field(default_factory=lambda: [0.8, 0.95])
    bootstrap: BootstrapConfig = field(default_factory=BootstrapConfig)
    reliability_bins: int = field(default=10, metadata=AT_LEAST_ONE)  # p_escalate bins of ECE
    output_dir: str = "runs/eval"
    # a careful-reading judgments file (labeling/judgments/format.py): every router is also scored against the judged
    # verdicts of the records whose units it read (AUROC, ceiling, false cache hits; eval.json `judged`)
    judgments: str | None = None
    # careful-reading verdicts (labeling/judgments/verdicts.py: tiermem-judgments or realmem-careful-reading files,
    # one per domain): the labels' agreement with them, and every router scored against them beside the labels, on
    # the records whose units a verdict read (eval.json `verdicts`). Checks only: the labels stay the dataset's
    verdicts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.router = as_router_spec(self.router)
        data_paths(self.data)
        # APGR's recovery targets are shares of the raw-only - summary-only gap; a calibration curve needs a bin
        bad = [s for s in self.recover_shares if not (ranges.is_number(s) and 0.0 < s <= 1.0)]
        if bad:
            raise ConfigError(f"recover_shares: each must be a share of the accuracy gap in (0, 1], got {bad}")
        check_declared(self)
        specs: list[RouterSpec] = []
        for i, item in enumerate(self.compare):
            spec = item if isinstance(item, RouterSpec) else from_dict(RouterSpec, item, f"compare[{i}]")
            if not spec.name:
                raise ConfigError(f"compare[{i}]: every compared router needs a name (its row in the table)")
            if spec.kind == "none":
                raise ConfigError(f"compare[{i}]: kind none builds no router")
            specs.append(spec)
        names = [s.name for s in specs]
        clash = sorted({n for n in names if names.count(n) > 1 or n in RESERVED_NAMES})
        if clash:
            raise ConfigError(f"compare: router names {clash} are repeated or reserved {RESERVED_NAMES}")
        self.compare = specs
        rows = {"routed", *names}
        for i, pair in enumerate(self.pairs):
            if not (isinstance(pair, list | tuple) and len(pair) == 2 and pair[0] != pair[1]
                    and all(isinstance(k, str) and k in rows for k in pair)):
                raise ConfigError(f"pairs[{i}]: a pair is two different rows among {sorted(rows)}, got {pair!r}")


# ---- routers ---------------------------------------------------------------------------------


def in_batches(ask: Callable[[list[str], list[Any]], Sequence[Any]], records: Sequence[dict[str, Any]],
               batch_size: int, desc: str) -> list[Any]:
    """`ask(questions, router_summaries)` on the records' stored router input, batch by batch: one answer per record
    (eval's decisions from route_batch, calibrate's scores from score)."""
    from tqdm import tqdm

    out: list[Any] = []
    for start in tqdm(range(0, len(records), batch_size), desc=desc, unit="batch"):
        chunk = records[start:start + batch_size]
        got = ask([r["question"] for r in chunk], [r["router_summaries"] for r in chunk])
        if len(got) != len(chunk):
            raise RuntimeError(f"router returned {len(got)} answers for {len(chunk)} questions")
        out.extend(got)
    return out


# ---- the stage -------------------------------------------------------------------------------


def _route_one(router: Any, key: str, kept: Sequence[dict[str, Any]], threshold_logit: float | None, batch_size: int,
               cases: Sequence[metrics.Case], cfg: EvalConfig, notes: list[str],
               ranked_only: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Decisions of one router on the replayed records (then on the `ranked_only` ones: labeled, outcome unknown,
    scored for the ranking metrics only), its replay metrics, sweep and per-case predictions."""
    t0 = time.perf_counter()
    routed = [*kept, *ranked_only]
    decisions = in_batches(lambda q, s: router.route_batch(q, s, threshold_logit=threshold_logit), routed,
                           batch_size, "routing")
    wall = round(time.perf_counter() - t0, 3)
    n = len(kept)
    escalate = [1.0 if d.action == "ESCALATE" else 0.0 for d in decisions]
    # the router's own cost, its own columns: never part of the answering model's tokens or time
    rtok = [float(d.prompt_tokens) for d in decisions]
    rlat = [float(d.latency_s) for d in decisions]
    policy = metrics.replay(cases, escalate[:n], key, rtok[:n], rlat[:n], [d.parsed_ok for d in decisions[:n]])
    errors = sum(getattr(d, "error", None) is not None for d in decisions)
    if errors:
        notes.append(f"{key}: {errors} router call(s) failed after retries; routed as ESCALATE and counted")
    clipped = clipped_signals(decisions)
    if clipped and clipped["n_clipped"]:
        notes.append(f"{key}: {clipped['n_clipped']} of {clipped['n_decisions']} decision(s) read signals outside the "
                     f"router's training range, clipped to it (by feature: {clipped['by_feature']})")
    probs = [float(d.p_escalate) for d in decisions] if all(d.p_escalate is not None for d in decisions) else None
    raw_scores = [getattr(d, "score", None) for d in decisions]  # log-odds, else the probabilities
    scores = [float(x) for x in raw_scores] if all(x is not None for x in raw_scores) else probs  # type: ignore[arg-type]
    if scores is None:
        notes.append(f"{key}: the router gives no score (log-odds or p_escalate); the sweep uses its hard "
                     "decisions (operating point only)")
    sweep = sweep_of(cases, (scores if scores is not None else escalate)[:n], cfg.recover_shares)
    preds = [{"router": key, "conv_id": rec.get("conv_id"), "qid": rec["qid"], "label": rec.get("label"),
              "replayed": i < n, "action": d.action, "score": getattr(d, "score", None), "p_escalate": d.p_escalate,
              "reason": d.reason, "parsed_ok": d.parsed_ok, "latency_s": d.latency_s,
              "prompt_tokens": d.prompt_tokens, "error": getattr(d, "error", None),
              "clipped": getattr(d, "clipped", None)}
             for i, (rec, d) in enumerate(zip(routed, decisions, strict=True))]
    threshold_used = threshold_logit if threshold_logit is not None else getattr(router, "threshold_logit", None)
    ceiling = None if scores is None else router_ceiling(  # the ranking's ceiling: a threshold chosen on these data
        cases, scores[:n], policy, threshold_used, calibrated_by(router, threshold_logit),
        sweep.points)
    output = eval_analysis.RouterOutput(key, escalate, scores, probs)
    points = {}
    # The router's other calibrated operating points (calibrate's operating_points), each a row of its own; an
    # explicit threshold override means the caller asked for one operating point only.
    stored = ((getattr(getattr(router, "meta", None), "calibration", None) or {}).get("operating_points") or {})
    if scores is not None and threshold_logit is None:
        for name, point in stored.items():
            t = float(point["threshold_logit"])
            esc = [1.0 if decide(sc, t) == "ESCALATE" else 0.0 for sc in scores]
            sub = f"{key}@{name}"
            points[sub] = {"policy": metrics.replay(cases, esc[:n], sub, rtok[:n], rlat[:n],
                                                    [d.parsed_ok for d in decisions[:n]]),
                           "output": eval_analysis.RouterOutput(sub, esc, None, None), "threshold_logit": t,
                           "criterion": point.get("criterion")}
    return {"policy": policy, "sweep": sweep, "predictions": preds, "output": output, "wall_s": wall,
            "errors": errors, "threshold_logit": threshold_used, "operating_points": points, "ceiling": ceiling,
            "score_parts": score_part_auroc(routed, decisions), "clipped": clipped,
            "reading": reading_steps(router, routed, n_boot=cfg.bootstrap.n_boot, seed=cfg.bootstrap.seed)}


def clipped_signals(decisions: Sequence[Decision]) -> dict[str, Any] | None:
    """How many decisions read a signal outside the router's training range (clipped to it), by feature; None for
    a router that reads no signals."""
    lists = [getattr(d, "clipped", None) for d in decisions]
    if all(c is None for c in lists):
        return None
    by_feature = Counter(name for c in lists if c for name in c)
    return {"n_decisions": len(lists), "n_clipped": sum(bool(c) for c in lists),
            "by_feature": dict(sorted(by_feature.items()))}


def score_part_auroc(records: Sequence[dict[str, Any]], decisions: Sequence[Decision]) -> dict[str, Any] | None:
    """For a router whose score has parts (Decision.score_parts): the AUROC of each part alone and of the score
    without it, on the labeled records: which inputs carry the decision."""
    from tiermem.stats import auroc

    if not decisions or any(getattr(d, "score_parts", None) is None for d in decisions):
        return None
    idx = [i for i, r in enumerate(records) if r.get("label") in contract.ACTIONS]
    y = [records[i]["label"] == "ESCALATE" for i in idx]
    if not 0 < sum(y) < len(y):
        return None
    out: dict[str, Any] = {"n_labeled": len(idx), "full": auroc([decisions[i].score for i in idx], y)}
    for part in decisions[idx[0]].score_parts:
        alone = [decisions[i].score_parts[part] for i in idx]
        without = [decisions[i].score - v for i, v in zip(idx, alone, strict=True)]
        out[part] = {"alone": auroc(alone, y), "without": auroc(without, y)}
    return out


def evaluate_records(records: Sequence[dict[str, Any]], cfg: EvalConfig, router: Any | None = None,
                     router_name: str = "none",
                     compare: Sequence[tuple[str, Any, str]] = ()) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Replay `router` (or only the baselines) and the `compare` routers ((row name, router, display name)) on
    `records`; returns the report dict and per-case predictions."""
    try:
        kept, case_set = metrics.replayable_records(records, cfg.correctness, cfg.include_unlabeled)
    except RecordError as exc:  # the record reader names record and field; the file is known here
        raise RecordError(f"{data_label(cfg.data)} [{cfg.split}] {exc}") from None
    cases = case_set.cases
    held = list(case_set.unreplayable_records)  # labeled, outcome unknown: routed for the ranking metrics only
    if not cases:
        why = (f"; {case_set.n_unreplayable} record(s) have an unknown path verdict under rule "
               f"{cfg.correctness!r}" if case_set.n_unreplayable else "")
        raise ConfigError(f"no evaluable records in split {cfg.split!r} of {data_label(cfg.data)}{why}")
    label_rules = sorted({str(r.get("label_rule")) for r in kept})
    notes: list[str] = []
    if case_set.n_unreplayable:
        notes.append(f"{case_set.n_unreplayable} record(s) not replayable: a path's correctness is unknown (null) "
                     f"under rule {cfg.correctness!r}, e.g. no gold evidence turns to check the research path "
                     f"against. They are left out of the policy table, intervals, sweep and APGR; the "
                     f"{len(held)} labeled one(s) among them still count in AUROC, AUPRC and ECE")
    if case_set.n_error:
        notes.append(f"{case_set.n_error} labeling error record(s) skipped (no verdicts)")

    def cluster_ids(rows: Sequence[dict[str, Any]], start: int) -> list[str]:
        return [str(r.get("conv_id")) if r.get("conv_id") is not None else f"record-{start + i}"
                for i, r in enumerate(rows)]

    clusters, held_clusters = cluster_ids(kept, 0), cluster_ids(held, len(kept))
    if any(r.get("conv_id") is None for r in [*kept, *held]):
        notes.append("some records have no conv_id: each is its own cluster in the bootstrap")
    meta: dict[str, Any] = {
        "dataset": data_label(cfg.data), "split": cfg.split, "router": router_name, "mode": "replay",
        "correctness_rule": cfg.correctness, "label_rule": ", ".join(label_rules), "n": len(cases),
        "n_conversations": len(set(clusters)),
        "n_error": case_set.n_error, "n_unlabeled": case_set.n_unlabeled,
        "n_unreplayable": case_set.n_unreplayable, "n_unreplayable_labeled": len(held),
        "provenance": dataset_provenance(cfg.data, kept), "machine": machine_info(), "notes": notes,
    }
    meta["data_name"] = data_name(cfg.data, records, meta["provenance"])
    predictions: list[dict[str, Any]] = []
    runs: dict[str, dict[str, Any]] = {}
    if router is not None:
        runs["routed"] = _route_one(router, "routed", kept, cfg.router.threshold_logit, cfg.router.batch_size, cases,
                                    cfg, notes, held)
        meta["routing_wall_s"] = runs["routed"]["wall_s"]
        meta["threshold_logit"] = runs["routed"]["threshold_logit"]
        meta["router_errors"] = runs["routed"]["errors"]
        if isinstance(getattr(router, "meta", None), RunMeta):  # the metadata it was, for the card push renders
            meta["router_meta_sha256"] = meta_digest(router.meta)
    specs = {s.name: s for s in cfg.compare}
    meta["compared"] = {}
    for key, other, display in compare:
        spec = specs.get(key)
        runs[key] = _route_one(other, key, kept, spec.threshold_logit if spec else None,
                               spec.batch_size if spec else cfg.router.batch_size, cases, cfg, notes, held)
        meta["compared"][key] = {"router": display, "threshold_logit": runs[key]["threshold_logit"],
                                 "routing_wall_s": runs[key]["wall_s"], "router_errors": runs[key]["errors"]}
    for run_ in runs.values():
        predictions += run_["predictions"]
    points = {k: p for r in runs.values() for k, p in r["operating_points"].items()}
    meta["operating_points"] = {k: {"threshold_logit": p["threshold_logit"], "criterion": p["criterion"]}
                                for k, p in points.items()}
    random_rate = runs["routed"]["policy"].escalation_rate if "routed" in runs else None
    base = metrics.baselines(cases, random_rate)
    report = eval_report.build_report(routed=runs["routed"]["policy"] if "routed" in runs else None,
                                      baselines=base, sweep=runs["routed"]["sweep"] if "routed" in runs else None,
                                      meta=meta, others={**{k: r["policy"] for k, r in runs.items() if k != "routed"},
                                                         **{k: p["policy"] for k, p in points.items()}})
    report["sweeps"] = {k: r["sweep"].to_dict() for k, r in runs.items()}
    weights = {"summary_only": [0.0] * len(cases), "raw_only": [1.0] * len(cases),
               "oracle": metrics.oracle_escalations(cases)}
    if random_rate is not None:
        weights["random"] = [random_rate] * len(cases)
    report.update(eval_analysis.analyze(
        cases, clusters, [r["output"] for r in runs.values()] + [p["output"] for p in points.values()], weights,
        main="routed" if "routed" in runs else None,
        n_boot=cfg.bootstrap.n_boot, seed=cfg.bootstrap.seed, level=cfg.bootstrap.level,
        bins=cfg.reliability_bins, ranked_only=case_set.unreplayable, ranked_only_clusters=held_clusters,
        pairs=[tuple(p) for p in cfg.pairs]))
    for key in points:  # the same scores as their router's row: one ranking entry is enough
        report["ranking"].pop(key, None)
    ceilings = {k: r["ceiling"] for k, r in runs.items() if r["ceiling"]}
    if ceilings:
        report["ceiling"] = ceiling_report(cases, base["oracle"], ceilings)
    report["score_parts"] = {k: r["score_parts"] for k, r in runs.items() if r["score_parts"]}
    report["reading"] = {k: r["reading"] for k, r in runs.items() if r.get("reading")}
    report["clipped_signals"] = {k: r["clipped"] for k, r in runs.items() if r["clipped"]}
    report["per_conversation"] = eval_analysis.per_conversation_auroc(
        [*cases, *case_set.unreplayable], [*clusters, *held_clusters], [r["output"] for r in runs.values()])
    return report, predictions


def write_outputs(report: dict[str, Any], predictions: list[dict[str, Any]], out_dir: str | Path) -> dict[str, Path]:
    with claimed_output_dir(out_dir, "eval") as out:
        paths = {"plot": out / "eval.png"}
        report["meta"]["plot"] = str(paths["plot"])
        eval_report.write_plot(report, paths["plot"])
        if any(r.get("reliability") for r in report.get("ranking", {}).values()):
            paths["reliability_plot"] = out / "eval_reliability.png"
            report["meta"]["reliability_plot"] = str(paths["reliability_plot"])
            eval_report.write_reliability_plot(report, paths["reliability_plot"])
        paths["json"] = eval_report.write_json(report, out / "eval.json")
        paths["markdown"] = eval_report.write_markdown(report, out / "eval.md")
        if predictions:
            paths["predictions"] = out / "predictions.jsonl"
            write_atomic(paths["predictions"], "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in predictions))
        return paths


def run(cfg: EvalConfig) -> dict[str, Path]:
    # A foreign or busy output directory is refused before any data or model loads; it is created (claimed) only once
    # the records have been read, so an eval that fails on its data leaves nothing behind.
    check_output_dir(cfg.output_dir, "eval")
    records = load_split(cfg.data, cfg.split)
    with claimed_output_dir(cfg.output_dir, "eval"):  # held until the eval ends
        return _run(cfg, records)


def _run(cfg: EvalConfig, records: list[dict[str, Any]]) -> dict[str, Path]:
    trunk_cache: dict[str, Any] = {}  # LM routers of one base share their frozen trunk's states in this run
    router = None if cfg.router.kind == "none" else build(cfg.router, trunk_cache=trunk_cache)
    name = "baselines only" if router is None else router.name
    compare = []
    for spec in cfg.compare:
        other = build(spec, trunk_cache=trunk_cache)
        compare.append((spec.name, other, other.name))
    judgments = None
    if cfg.judgments:
        judgments = load_judgments(cfg.judgments)  # a bad file stops the run before any router is asked
    verdicts = None
    if cfg.verdicts:
        verdicts = load_verdicts(cfg.verdicts)
    domains = split_by_domain(records)
    if judgments is not None or verdicts is not None or len(domains) > 1:  # scored again: replayed, not asked
        router = None if router is None else ReplayedRouter(router)
        compare = [(key, ReplayedRouter(other), display) for key, other, display in compare]
    report, predictions = evaluate_records(records, cfg, router, name, compare)

    def again(rows: list[dict[str, Any]]) -> dict[str, Any]:  # the same decisions, scored on other records
        return evaluate_records(rows, cfg, None if router is None else router.again(), name,
                                [(key, other.again(), display) for key, other, display in compare])[0]

    report["by_domain"] = per_domain(records, again, report["meta"]["notes"])
    if judgments is not None:
        rows, coverage = judged_records(records, judgments)
        if not rows:
            raise ConfigError(f"judgments {cfg.judgments}: none of the {len(records)} records of split "
                              f"{cfg.split!r} was judged over its units ({coverage['by_match']})")
        report["judged"] = judged_summary(again(rows), coverage)
    if verdicts is not None:
        rows, coverage = judged_records(records, verdicts)
        report["verdicts"] = {"label_agreement": agreement(records, verdicts, cfg.bootstrap.n_boot)}
        if rows:  # the routers against the verdicts, beside the labels
            report["verdicts"].update(judged_summary(again(rows), coverage))
    paths = write_outputs(report, predictions, cfg.output_dir)
    print(eval_report.render_markdown(report))
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return paths


@stage_main("eval")
def main(argv: list[str]) -> int:
    run(parse_cli(EvalConfig, argv, default_config=DEFAULT_CONFIG))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
