"""`calibrate`: pick the router's threshold (log-odds; escalate when `score >= threshold_logit`) by a criterion on
the records eval replays, and store it in tiermem_router.json as `calibration.threshold_logit` with `guarantee` (or
null). The criteria, the out-of-fold scores and the risk-control test: docs/DESIGN.md, "Notes by module"."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from evaluation.criteria import (
    CalibrationSet,
    summarize,
    threshold_for_rate,
    threshold_max_reward,
    threshold_risk_control,
    threshold_token_budget,
)
from evaluation.evaluate import in_batches
from labeling.dataset import data_paths, same_data
from serving.routers import RouterSpec, as_router_spec, build
from tiermem.rewards import RewardConfig
from tiermem.runs.run_meta import RUN_META_FILE, RunMeta, RunMetaFile
from tiermem.runs.rundir import ROUTER_STAGES, updating_run
from tiermem.settings.config import check_declared
from tiermem.settings.errors import ConfigError, MissingFileError, stage_main


def _check_criterion(criterion: str, value: float | None, budget_share: float | None) -> None:
    if value is not None and not math.isfinite(value):  # nan fails every comparison below, so it would pass
        raise ConfigError(f"criterion {criterion}: value must be a finite number, got {value}")
    if criterion == "escalation_rate":
        if value is None or not 0.0 < value <= 1.0:
            raise ConfigError(f"criterion {criterion}: value must be a share in (0, 1], got {value}")
    if criterion == "token_budget":
        if (value is None) == (budget_share is None):
            raise ConfigError("criterion token_budget: give exactly one of value (mean input tokens) and budget_share "
                              f"(share of raw-only's mean input tokens), got {value}, {budget_share}")
        if value is not None and value <= 0:
            raise ConfigError(f"criterion token_budget: value must be a mean input-token budget > 0, got {value}")
    elif budget_share is not None:
        raise ConfigError(f"budget_share applies to criterion token_budget only, not {criterion}")


SHARE = {"gt": 0, "lt": 1}  # alpha, delta: in (0, 1)


@dataclass
class OperatingPoint:
    """One extra threshold calibrate stores by name (criteria and values as CalibrateConfig's)."""

    name: str
    criterion: Literal["max_reward", "token_budget", "escalation_rate"] = "token_budget"
    value: float | None = None
    budget_share: float | None = field(default=None, metadata={"gt": 0, "le": 1})

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ConfigError(f"operating point name must be a word (letters, digits, _), got {self.name!r}")
        check_declared(self, "operating point ")
        _check_criterion(self.criterion, self.value, self.budget_share)


@dataclass
class CalibrateConfig:
    router: RouterSpec = field(default_factory=RouterSpec)  # the router to calibrate (a run directory as shorthand)
    # DatasetDict saved by `make label`, or a .jsonl of label records; several: [a, b], pooled, domains kept
    data: str | list[str] = "runs/label/dataset"
    split: str = "validation"
    # auto: the router's out-of-fold CV scores over every train + validation conversation when its stage wrote them
    # for this `data` (unit reader: oof_scores.json), else the router scores `split`; split: always score `split`
    scores_from: Literal["auto", "split"] = "auto"
    criterion: Literal["max_reward", "token_budget", "escalation_rate", "risk_control"] = "max_reward"
    value: float | None = None  # escalation_rate: target share in (0, 1]; token_budget: mean tokens
    # token_budget: the budget as a share of raw-only's mean input tokens here
    budget_share: float | None = field(default=None, metadata={"gt": 0, "le": 1})
    reward: RewardConfig = field(default_factory=RewardConfig)  # max_reward: the GRPO reward table
    alpha: float = field(default=0.1, metadata=SHARE)  # risk_control: allowed false-cache-hit rate
    delta: float = field(default=0.1, metadata=SHARE)  # risk_control: allowed probability that the bound fails
    risk_grid: list[float] = field(default_factory=lambda: [-20.0, 20.0, 4001])  # [lo, hi, points] log-odds
    correctness: Literal["label_rule", "outcome", "evidence"] = "label_rule"  # which s_ok / r_ok columns
    include_unlabeled: bool = True  # score dropped records too (eval replays them)
    batch_size: int = 8
    write: bool = True  # store the threshold in the run directory's tiermem_router.json
    # More thresholds stored beside the main one (calibration.operating_points), each picked on the same split by
    # its own criterion, e.g. {name: tokens_80, criterion: token_budget, budget_share: 0.8}; eval reports each.
    operating_points: list[OperatingPoint] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.router = as_router_spec(self.router)
        data_paths(self.data)
        check_declared(self)
        points = [p if isinstance(p, OperatingPoint) else OperatingPoint(**p) for p in self.operating_points]
        names = [p.name for p in points]
        if len(set(names)) != len(names):
            raise ConfigError(f"operating_points: names must be unique, got {names}")
        self.operating_points = points
        _check_criterion(self.criterion, self.value, self.budget_share)
        if (len(self.risk_grid) != 3 or not all(math.isfinite(x) for x in self.risk_grid)
                or self.risk_grid[0] >= self.risk_grid[1] or self.risk_grid[2] < 2):
            raise ConfigError("risk_grid must be finite [lo, hi, points] with lo < hi and points >= 2, got "
                              f"{self.risk_grid}")


# ---- the whole criterion ---------------------------------------------------------------------------------


def _budget(cs: CalibrationSet, value: float | None, budget_share: float | None) -> float:
    if budget_share is None:
        return float(value)  # type: ignore[arg-type]
    cs.need("r_tokens")
    return budget_share * sum(cs.r_tokens) / len(cs.r_tokens)  # type: ignore[arg-type]


def pick_threshold(cs: CalibrationSet, cfg: CalibrateConfig, criterion: str, value: float | None,
                   budget_share: float | None = None) -> tuple[float, dict[str, Any], dict[str, Any] | None]:
    """(threshold_logit, the criterion's parameters, guarantee or None) for one criterion on cs."""
    if criterion == "max_reward":
        return threshold_max_reward(cs, cfg.reward)[0], {"reward": asdict(cfg.reward)}, None
    if criterion == "token_budget":
        budget = _budget(cs, value, budget_share)
        return threshold_token_budget(cs, budget), {"budget_mean_input_tokens": budget,
                                                    "budget_share": budget_share}, None
    if criterion == "escalation_rate":
        return threshold_for_rate(cs.scores, float(value)), {}, None  # type: ignore[arg-type]
    if criterion == "risk_control":
        threshold, guarantee = threshold_risk_control(cs, cfg.alpha, cfg.delta, cfg.risk_grid)
        return threshold, {"alpha": cfg.alpha, "delta": cfg.delta, "unit": guarantee["unit"]}, guarantee
    raise ValueError(f"unknown criterion {criterion!r}")


def calibrate(cs: CalibrationSet, cfg: CalibrateConfig) -> dict[str, Any]:
    threshold, params, guarantee = pick_threshold(cs, cfg, cfg.criterion, cfg.value, cfg.budget_share)
    points = {}
    for point in cfg.operating_points:
        t, p_params, _ = pick_threshold(cs, cfg, point.criterion, point.value, point.budget_share)
        points[point.name] = {"criterion": point.criterion, "value": point.value, **p_params,
                              "threshold_logit": float(t),
                              "achieved": summarize(cs.scores, cs.labels, t, cs, cfg.reward)}
    achieved = summarize(cs.scores, cs.labels, threshold, cs, cfg.reward)
    return {
        "criterion": cfg.criterion, "value": cfg.value, **params,
        "threshold_logit": float(threshold),
        "n_calibration": len(cs.scores),
        "achieved": achieved,
        "guarantee": guarantee,
        "operating_points": points,
        "warnings": degenerate_warnings(float(threshold), achieved),
    }


def degenerate_warnings(threshold: float, achieved: dict[str, Any]) -> list[str]:
    """A threshold that escalates none or all of the calibration records makes the router a constant: it may be
    what the criterion asks (risk control with too little data escalates everything), but it is never stored
    silently: calibrate prints it, the run's metadata and its card carry it."""
    rate, n = achieved["escalation_rate"], achieved["n"]
    if 0.0 < rate < 1.0:
        return []
    what = "none" if rate == 0.0 else "all"
    always = "ANSWER (never reads the raw pages)" if rate == 0.0 else "ESCALATE (always pays for research)"
    return [f"threshold_logit {threshold:g} escalates {what} of the {n} calibration records: the router always "
            f"says {always} on data like these; check the router's scores and the calibration data"]


def load_calibration_records(data: str | list[str], split: str, correctness: str = "label_rule",
                             include_unlabeled: bool = True) -> tuple[list[dict[str, Any]], dict[str, int]]:
    from labeling.dataset import data_label, load_split

    return replayable(load_split(data, split), correctness, include_unlabeled, f"{data_label(data)} [{split}]")


def replayable(rows: Sequence[dict[str, Any]], correctness: str, include_unlabeled: bool, where: str
               ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The records eval replays (labeled, plus dropped ones whose path correctness is known) and the counts of what
    replay left out (n_error, n_unreplayable); `where` names the records in errors."""
    from evaluation.metrics import replayable_records
    from labeling.dataset import RecordError

    try:
        kept, case_set = replayable_records(rows, correctness, include_unlabeled)
    except RecordError as exc:  # the record reader names record and field; the file is known here
        raise RecordError(f"{where} {exc}") from None
    if not kept:
        why = (f" ({case_set.n_unreplayable} have an unknown path verdict under rule {correctness!r})"
               if case_set.n_unreplayable else "")
        raise ConfigError(f"{where}: no replayable records to calibrate on{why}")
    return list(kept), {"n_records": len(rows), "n_error": case_set.n_error, "n_unreplayable": case_set.n_unreplayable}


def calibration_set(records: Sequence[dict[str, Any]], scores: Sequence[float],
                    correctness: str = "label_rule") -> CalibrationSet:
    from evaluation.metrics import to_case

    cases = [to_case(r, correctness, i) for i, r in enumerate(records)]
    return CalibrationSet(
        scores=[float(s) for s in scores], labels=[c.label for c in cases], s_ok=[c.s_ok for c in cases],
        r_ok=[c.r_ok for c in cases], s_tokens=[c.s_tokens for c in cases], r_tokens=[c.r_tokens for c in cases])


def out_of_fold(cfg: CalibrateConfig, notes: list[str], meta: RunMeta | None
                ) -> tuple[list[dict[str, Any]], list[float], dict[str, int], dict[str, Any]] | None:
    """(records, scores, counts, source) from the router's out-of-fold CV scores (tiermem.runs.oof_scores) when
    cfg.scores_from allows and the router's stage wrote them for cfg.data (`meta`: the router's metadata, None for
    a router without a local run); None: score cfg.split instead."""
    from tiermem.runs.oof_scores import read_oof_scores

    if cfg.scores_from == "split":
        return None
    path = cfg.router.path
    recorded = (meta.extra or {}).get("oof_scores") if meta is not None else None
    if not recorded:
        return None
    data = read_oof_scores(path, recorded)
    if not same_data(data.get("dataset"), cfg.data):
        notes.append(f"the router's out-of-fold scores are of {data.get('dataset')}, not {cfg.data}: calibrated on "
                     f"split {cfg.split} instead")
        return None
    kept, counts = replayable(data["records"], cfg.correctness, cfg.include_unlabeled, f"{path} (out-of-fold scores)")
    splits = ", ".join(data.get("splits") or [])
    n_conv = len({str(r["conv_id"]) for r in kept})
    source = {"scores_from": "out_of_fold", "split": f"{splits} (out-of-fold)",
              "scored_on": f"out-of-fold CV scores over {n_conv} conversation(s) of {splits}",
              "scored_by": f"out-of-fold router scores ({data.get('method')}; settings {data.get('settings')})"}
    return kept, [float(r["score"]) for r in kept], counts, source


def run(cfg: CalibrateConfig) -> dict[str, Any]:
    path = cfg.router.path
    if not cfg.write or not path or not Path(path).is_dir():
        return _run(cfg)
    # The threshold goes into the router's own run: only a trained router run, checked and locked before loading.
    with updating_run(path, "calibrate", ROUTER_STAGES):
        return _run(cfg)


def _run_record(cfg: CalibrateConfig) -> RunMetaFile | None:
    """The router's tiermem_router.json, read once: the out-of-fold scores come from it, the threshold goes into it.
    None: a router without a local run directory (a hub id, a built-in kind)."""
    path = cfg.router.path
    return RunMetaFile.open(path) if path and (Path(path) / RUN_META_FILE).is_file() else None


def _run(cfg: CalibrateConfig) -> dict[str, Any]:
    notes: list[str] = []
    spec = dataclasses.replace(cfg.router, mode="fast", batch_size=cfg.batch_size)  # calibration needs a score
    record = _run_record(cfg)
    oof = out_of_fold(cfg, notes, record.meta if record else None)
    if oof is not None:
        records, scores, counts, source = oof
    else:
        records, counts = load_calibration_records(cfg.data, cfg.split, cfg.correctness, cfg.include_unlabeled)
        router = build(spec, trunk_cache={})
        scores = in_batches(router.score, records, cfg.batch_size, "calibrate: scoring")
        source = {"scores_from": "split", "split": cfg.split, "scored_on": f"split {cfg.split}",
                  "scored_by": f"{router.kind} score (log-odds of ESCALATE)"}
    result = calibrate(calibration_set(records, scores, cfg.correctness), cfg)
    result.update({"data": cfg.data, "correctness": cfg.correctness, **source, **counts})
    if counts["n_unreplayable"]:
        notes.append(f"{counts['n_unreplayable']} record(s) not replayable (a path's correctness is unknown "
                     f"under rule {cfg.correctness!r}): left out of the calibration set")
    if notes:
        result["notes"] = notes
    print(f"tiermem-router calibrate: threshold picked on {source['scored_on']} ({len(scores)} records)",
          file=sys.stderr)
    for warning in result["warnings"]:
        print(f"tiermem-router calibrate: warning: {warning}", file=sys.stderr)
    if cfg.write:
        from serving.model_card import save_with_card

        if record is None:
            raise MissingFileError(f"{spec.path}: calibration is stored in a local run directory")

        result["scores_file"] = write_scores(record.run_dir, records, scores, source)
        record.meta.calibration = result
        save_with_card(record)  # the run's README.md shows the stored threshold
    return result


SCORES_FILE = "calibration_scores.json"  # each calibration record's key, split, domain, label and score


def write_scores(run_dir: str | Path, records: Sequence[dict[str, Any]], scores: Sequence[float],
                 source: dict[str, Any]) -> dict[str, Any]:
    """The scores the threshold was picked on, beside the run (what the demo compares routers by, per domain,
    on the questions they all scored); returns what calibration keeps of the file."""
    from labeling.dataset import domain_of
    from tiermem.runs.run_meta import sha256_file
    from tiermem.runs.safe_io import write_atomic

    rows = [{"conv_id": str(r["conv_id"]), "qid": str(r["qid"]), "split": r.get("split"), "domain": domain_of(r),
             "label": r.get("label"), "score": float(s)} for r, s in zip(records, scores, strict=True)]
    path = Path(run_dir) / SCORES_FILE
    write_atomic(path, json.dumps({"format": "tiermem-calibration-scores/1", "scored_on": source["scored_on"],
                                   "scores_from": source["scores_from"], "n": len(rows), "records": rows}) + "\n")
    return {"file": SCORES_FILE, "sha256": sha256_file(path), "n": len(rows)}


@stage_main("calibrate")
def main(argv: list[str]) -> int:
    from tiermem.settings.config import parse_cli

    cfg = parse_cli(CalibrateConfig, argv, default_config=None)
    result = run(cfg)
    print(json.dumps({"config": asdict(cfg), **result}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
