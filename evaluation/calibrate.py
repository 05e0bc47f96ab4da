"""`calibrate`: pick the router's threshold on a split and store it in tiermem_router.json.

Every record eval replays is scored (labeled ones, and dropped ones whose path correctness is known: what the
router will meet), with the router's log-odds `score()`; the decision rule is `score >= threshold_logit`.
Records whose path correctness is unknown under the rule (e.g. the evidence rule's research verdict for a question
without gold evidence turns) cannot be replayed: every criterion below is computed without them, and the result
counts them (`n_unreplayable`).
Criteria:

- `max_reward` (default): the threshold with the largest total reward under the GRPO reward table
  (router_train.rewards: RewardConfig + score_decision). Every record knows both paths' outcomes, so both
  actions' rewards are exact; ties go to the higher threshold (fewer escalations).
- `token_budget`: the best replayed accuracy with mean path input tokens <= `value` (ties: fewer tokens).
- `hard_recall`: the largest threshold escalating at least `value` of the ESCALATE-labeled records.
- `escalation_rate`: the largest threshold escalating at least `value` of the records.
- `risk_control`: a false-cache-hit rate (ANSWER where only research was right, over all replayable records)
  <= `alpha` on new data with probability >= 1 - `delta`, by Learn-then-Test (Angelopoulos et al., 2021) with
  fixed-sequence testing. Why LTT and not conformal risk control: CRC bounds the *expected* risk only, while the
  issue asks for a high-probability bound (alpha, delta); LTT gives exactly that, and for a 0/1 loss the exact
  binomial tail is its tightest valid p-value. The hypotheses H_t: risk(t) > alpha are tested on a grid of
  log-odds thresholds fixed before seeing data (`risk_grid`), in order from the safest (lowest, most
  escalation) upwards; the first non-rejection stops the walk, and the largest rejected threshold is used. Fixed
  sequence testing controls the family-wise error at delta without a multiplicity correction because the
  order is set in advance. Units: `question` treats questions as exchangeable (exact binomial p-value);
  `conversation` treats conversations as the exchangeable units (each one's false-cache-hit share is a loss in
  [0, 1]; Hoeffding-Bentkus p-value), which is what "new conversations" strictly needs but needs many of them.
  With the question unit, questions of one conversation are correlated and the guarantee is approximate for
  new conversations; the stored guarantee says which unit was used. When no threshold is certified the router
  escalates everything (zero false cache hits by construction).

The chosen threshold is stored as `calibration.threshold_logit`, with `guarantee` (or null).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from router_train.rewards import RewardConfig, resolve_cost_scale, score_decision
from serving.routers import RouterSpec, as_router_spec, build
from serving.routers.base import ESCALATE_ALL
from tiermem.artifacts import update_run_meta
from tiermem.errors import ConfigError, MissingFileError, UsageError, stage_main
from tiermem.rundir import ROUTER_STAGES, updating_run

CRITERIA = ("max_reward", "token_budget", "hard_recall", "escalation_rate", "risk_control")
ANSWER_ALL = 1.0e9  # a log-odds threshold above any margin: nothing escalates (JSON-safe +inf)
RISK_UNITS = ("question", "conversation")


def _check_criterion(criterion: str, value: float | None, budget_share: float | None) -> None:
    if criterion not in CRITERIA:
        raise ConfigError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    if criterion in ("hard_recall", "escalation_rate"):
        if value is None or not 0.0 < value <= 1.0:
            raise ConfigError(f"criterion {criterion}: value must be a share in (0, 1], got {value}")
    if criterion == "token_budget":
        if (value is None) == (budget_share is None):
            raise ConfigError("criterion token_budget: give exactly one of value (mean input tokens) and budget_share "
                              f"(share of raw-only's mean input tokens), got {value}, {budget_share}")
        if value is not None and value <= 0:
            raise ConfigError(f"criterion token_budget: value must be a mean input-token budget > 0, got {value}")
        if budget_share is not None and not 0.0 < budget_share <= 1.0:
            raise ConfigError(f"criterion token_budget: budget_share must be in (0, 1], got {budget_share}")
    elif budget_share is not None:
        raise ConfigError(f"budget_share applies to criterion token_budget only, not {criterion}")


@dataclass
class OperatingPoint:
    """One extra threshold calibrate stores by name (criteria and values as CalibrateConfig's)."""

    name: str
    criterion: str = "token_budget"
    value: float | None = None
    budget_share: float | None = None

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ConfigError(f"operating point name must be a word (letters, digits, _), got {self.name!r}")
        if self.criterion == "risk_control":
            raise ConfigError("operating points take max_reward, token_budget, hard_recall or escalation_rate")
        _check_criterion(self.criterion, self.value, self.budget_share)


@dataclass
class CalibrateConfig:
    router: RouterSpec = field(default_factory=RouterSpec)  # the router to calibrate (a run directory as shorthand)
    data: str = "runs/label/dataset"  # DatasetDict saved by `make label`, or a .jsonl of label records
    split: str = "validation"
    criterion: str = "max_reward"  # max_reward | token_budget | hard_recall | escalation_rate | risk_control
    value: float | None = None  # hard_recall / escalation_rate: target share in (0, 1]; token_budget: mean tokens
    budget_share: float | None = None  # token_budget: the budget as a share of raw-only's mean input tokens here
    reward: RewardConfig = field(default_factory=RewardConfig)  # max_reward: the GRPO reward table
    alpha: float = 0.1  # risk_control: allowed false-cache-hit rate
    delta: float = 0.1  # risk_control: allowed probability that the bound fails
    risk_unit: str = "question"  # risk_control: question | conversation (exchangeable units)
    risk_grid: list[float] = field(default_factory=lambda: [-20.0, 20.0, 4001])  # [lo, hi, points] log-odds
    correctness: str = "label_rule"  # label_rule | outcome | evidence: which s_ok / r_ok columns
    include_unlabeled: bool = True  # score dropped records too (eval replays them)
    batch_size: int = 8
    limit: int | None = None  # score only the first N replayable records (quick runs)
    write: bool = True  # store the threshold in the run directory's tiermem_router.json
    # More thresholds stored beside the main one (calibration.operating_points), each picked on the same split by
    # its own criterion, e.g. {name: tokens_80, criterion: token_budget, budget_share: 0.8}; eval reports each.
    operating_points: list[OperatingPoint] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.router = as_router_spec(self.router)
        points = [p if isinstance(p, OperatingPoint) else OperatingPoint(**p) for p in self.operating_points]
        names = [p.name for p in points]
        if len(set(names)) != len(names):
            raise ConfigError(f"operating_points: names must be unique, got {names}")
        self.operating_points = points
        _check_criterion(self.criterion, self.value, self.budget_share)
        if not (0 < self.alpha < 1 and 0 < self.delta < 1):
            raise ConfigError(f"alpha and delta must be in (0, 1), got {self.alpha}, {self.delta}")
        if self.risk_unit not in RISK_UNITS:
            raise ConfigError(f"risk_unit must be one of {RISK_UNITS}, got {self.risk_unit!r}")
        if len(self.risk_grid) != 3 or self.risk_grid[0] >= self.risk_grid[1] or self.risk_grid[2] < 2:
            raise ConfigError(f"risk_grid must be [lo, hi, points] with lo < hi and points >= 2, got {self.risk_grid}")


@dataclass
class CalibrationSet:
    """What calibration needs per replayable record."""

    scores: list[float]  # router log-odds
    labels: list[str | None]  # ANSWER | ESCALATE | None (dropped)
    s_ok: list[bool] | None = None
    r_ok: list[bool] | None = None
    s_tokens: list[float] | None = None
    r_tokens: list[float] | None = None
    clusters: list[str] | None = None  # conv_id per record

    def __post_init__(self) -> None:
        n = len(self.scores)
        for name in ("labels", "s_ok", "r_ok", "s_tokens", "r_tokens", "clusters"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"calibration set: {len(value)} {name} for {n} scores")
        if not n:
            raise ValueError("no scores to calibrate on")

    def need(self, *names: str) -> None:
        missing = [n for n in names if getattr(self, n) is None]
        if missing:
            raise ValueError(f"this criterion needs per-record {missing}")


# ---- thresholds ------------------------------------------------------------------------------------------


def threshold_for_rate(scores: Sequence[float], rate: float) -> float:
    """Largest threshold with at least `rate` of the scores >= it: the k-th largest score, k = ceil(rate * n)."""
    if not scores:
        raise ValueError("no scores to calibrate on")
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"rate must be in (0, 1], got {rate}")
    k = max(1, math.ceil(rate * len(scores) - 1e-9))
    return sorted(scores, reverse=True)[k - 1]


def threshold_for_hard_recall(scores: Sequence[float], labels: Sequence[str | None], recall: float) -> float:
    """Largest threshold that escalates at least `recall` of the ESCALATE-labeled records."""
    hard = [s for s, label in zip(scores, labels, strict=True) if label == "ESCALATE"]
    if not hard:
        raise UsageError("no ESCALATE-labeled records: hard-recall is undefined on this split")
    return threshold_for_rate(hard, recall)


def _candidates(scores: Sequence[float]) -> list[float]:
    """Every distinct decision: nothing escalates, then each distinct score from the top (escalate >= it)."""
    return [ANSWER_ALL] + sorted(set(float(s) for s in scores), reverse=True)


def threshold_max_reward(cs: CalibrationSet, reward: RewardConfig) -> tuple[float, float]:
    """(threshold, mean reward) maximizing the total reward table value; ties go to the higher threshold."""
    cs.need("s_ok", "r_ok", "r_tokens")
    scale = resolve_cost_scale(reward, cs.r_tokens)  # type: ignore[arg-type]
    gain = {}  # reward(ESCALATE) - reward(ANSWER) per record
    base = 0.0
    for i, (s, r, tok) in enumerate(zip(cs.s_ok, cs.r_ok, cs.r_tokens, strict=True)):  # type: ignore[arg-type]
        answer = score_decision("ANSWER", s, r, tok, reward, scale).total
        escalate = score_decision("ESCALATE", s, r, tok, reward, scale).total
        base += answer
        gain[i] = escalate - answer
    return _best_prefix(cs.scores, [gain[i] for i in range(len(cs.scores))], base)


def _best_prefix(scores: Sequence[float], gain: Sequence[float], base: float) -> tuple[float, float]:
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    best_t, best_v, total, k = ANSWER_ALL, base, base, 0
    for t in _candidates(scores)[1:]:
        while k < len(order) and scores[order[k]] >= t:
            total += gain[order[k]]
            k += 1
        if total > best_v + 1e-12:
            best_t, best_v = t, total
    return best_t, best_v / len(scores)


def threshold_token_budget(cs: CalibrationSet, budget: float) -> float:
    """Best accuracy with mean path input tokens <= budget; among equal accuracies the fewest tokens."""
    cs.need("s_ok", "r_ok", "s_tokens", "r_tokens")
    best: tuple[float, float, float] | None = None  # (accuracy, -tokens, threshold)
    for t in _candidates(cs.scores):
        esc = [s >= t for s in cs.scores]
        n = len(esc)
        tokens = sum(r if e else s for e, s, r in zip(esc, cs.s_tokens, cs.r_tokens, strict=True)) / n  # type: ignore[arg-type]
        if tokens > budget:
            continue
        acc = sum(r if e else s for e, s, r in zip(esc, cs.s_ok, cs.r_ok, strict=True)) / n  # type: ignore[arg-type]
        if best is None or (acc, -tokens) > best[:2]:
            best = (acc, -tokens, t)
    if best is None:
        floor = sum(cs.s_tokens) / len(cs.s_tokens)  # type: ignore[arg-type]
        raise UsageError(f"token budget {budget} is below the summary-only mean input tokens {floor:.1f}: "
                         "no threshold meets it")
    return best[2]


# ---- risk control ----------------------------------------------------------------------------------------


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) <= k), summed in log space (no scipy)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    logs = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * math.log(p)
            + (n - i) * math.log1p(-p) for i in range(k + 1)]
    top = max(logs)
    return min(1.0, math.exp(top) * sum(math.exp(v - top) for v in logs))


def binomial_p_value(risk_hat: float, n: int, alpha: float) -> float:
    """Exact p-value of H0: risk > alpha for a mean of n Bernoulli losses (risk_hat = k / n)."""
    return binom_cdf(int(round(risk_hat * n)), n, alpha)


def hb_p_value(risk_hat: float, n: int, alpha: float) -> float:
    """Hoeffding-Bentkus p-value of H0: risk > alpha for a mean of n losses in [0, 1] (Bates et al., 2021)."""
    a = min(risk_hat, alpha)

    def h(x: float, y: float) -> float:
        t1 = x * math.log(x / y) if x > 0 else 0.0
        t2 = (1 - x) * math.log((1 - x) / (1 - y)) if x < 1 else 0.0
        return t1 + t2

    hoeffding = math.exp(-n * h(a, alpha))
    bentkus = math.e * binom_cdf(math.ceil(n * risk_hat), n, alpha)
    return min(1.0, hoeffding, bentkus)


def false_cache_hit_losses(cs: CalibrationSet) -> list[bool]:
    """Whether ANSWER on the record would be a false cache hit (only research was right)."""
    cs.need("s_ok", "r_ok")
    return [bool(r and not s) for s, r in zip(cs.s_ok, cs.r_ok, strict=True)]  # type: ignore[arg-type]


def threshold_risk_control(cs: CalibrationSet, alpha: float, delta: float, unit: str = "question",
                           grid: Sequence[float] = (-20.0, 20.0, 4001)) -> tuple[float, dict[str, Any]]:
    """Learn-then-Test with fixed-sequence testing (see the module docstring). Returns (threshold, guarantee)."""
    loss = np.asarray(false_cache_hit_losses(cs), dtype=np.float64)
    scores = np.asarray(cs.scores, dtype=np.float64)
    if unit == "question":
        groups = np.arange(len(scores))
        p_value, method = binomial_p_value, "learn-then-test, fixed sequence, exact binomial p-value"
    elif unit == "conversation":
        cs.need("clusters")
        ids = {c: i for i, c in enumerate(dict.fromkeys(cs.clusters))}  # type: ignore[arg-type]
        groups = np.asarray([ids[c] for c in cs.clusters])  # type: ignore[union-attr]
        p_value, method = hb_p_value, "learn-then-test, fixed sequence, Hoeffding-Bentkus p-value"
    else:
        raise ValueError(f"risk unit must be one of {RISK_UNITS}, got {unit!r}")
    n_units = int(groups.max()) + 1
    sizes = np.bincount(groups, minlength=n_units)
    chosen, chosen_p, chosen_risk = ESCALATE_ALL, None, 0.0
    for t in np.round(np.linspace(grid[0], grid[1], int(grid[2])), 9):  # rounded: readable stored thresholds
        per_unit = np.bincount(groups, weights=loss * (scores < t), minlength=n_units) / sizes
        risk_hat = float(per_unit.mean())
        p = p_value(risk_hat, n_units, alpha)
        if p > delta:
            break
        chosen, chosen_p, chosen_risk = float(t), p, risk_hat
    guarantee = {
        "method": method, "alpha": alpha, "delta": delta, "unit": unit, "n_calibration": n_units,
        "n_questions": len(scores), "achieved": chosen_risk, "p_value": chosen_p,
        "statement": (f"false-cache-hit rate <= {alpha} on new exchangeable {unit}s with probability >= "
                      f"{1 - delta:.3g}" if chosen_p is not None else
                      f"no threshold certified with {n_units} {unit}s: the router escalates everything"),
    }
    return chosen, guarantee


# ---- the whole criterion ---------------------------------------------------------------------------------


def summarize(scores: Sequence[float], labels: Sequence[str | None], threshold: float,
              cs: CalibrationSet | None = None, reward: RewardConfig | None = None) -> dict[str, Any]:
    """What the threshold does on the calibration records."""
    escalate = [s >= threshold for s in scores]
    n = len(scores)
    hard = [e for e, label in zip(escalate, labels, strict=True) if label == "ESCALATE"]
    labeled = [(e, label) for e, label in zip(escalate, labels, strict=True) if label in ("ANSWER", "ESCALATE")]
    out: dict[str, Any] = {
        "n": n,
        "escalation_rate": sum(escalate) / n,
        "hard_recall": sum(hard) / len(hard) if hard else None,
        "label_accuracy": sum(e == (label == "ESCALATE") for e, label in labeled) / len(labeled) if labeled else None,
        "label_escalate_share": sum(label == "ESCALATE" for _, label in labeled) / len(labeled) if labeled else None,
    }
    if cs is not None and cs.s_ok is not None and cs.r_ok is not None:
        out["accuracy"] = sum(r if e else s for e, s, r in zip(escalate, cs.s_ok, cs.r_ok, strict=True)) / n
        out["false_cache_hit_rate"] = sum((not e) and r and not s
                                          for e, s, r in zip(escalate, cs.s_ok, cs.r_ok, strict=True)) / n
        if cs.s_tokens is not None and cs.r_tokens is not None:
            out["mean_input_tokens"] = sum(r if e else s for e, s, r in
                                           zip(escalate, cs.s_tokens, cs.r_tokens, strict=True)) / n
            if reward is not None:
                scale = resolve_cost_scale(reward, cs.r_tokens)
                out["mean_reward"] = sum(
                    score_decision("ESCALATE" if e else "ANSWER", s, r, tok, reward, scale).total
                    for e, s, r, tok in zip(escalate, cs.s_ok, cs.r_ok, cs.r_tokens, strict=True)) / n
    return out


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
    if criterion == "hard_recall":
        return threshold_for_hard_recall(cs.scores, cs.labels, float(value)), {}, None  # type: ignore[arg-type]
    if criterion == "escalation_rate":
        return threshold_for_rate(cs.scores, float(value)), {}, None  # type: ignore[arg-type]
    if criterion == "risk_control":
        threshold, guarantee = threshold_risk_control(cs, cfg.alpha, cfg.delta, cfg.risk_unit, cfg.risk_grid)
        return threshold, {"alpha": cfg.alpha, "delta": cfg.delta, "unit": cfg.risk_unit}, guarantee
    raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")


def calibrate(cs: CalibrationSet, cfg: CalibrateConfig) -> dict[str, Any]:
    """Pick the threshold for cfg.criterion on cs; returns the calibration dict stored with the router."""
    threshold, params, guarantee = pick_threshold(cs, cfg, cfg.criterion, cfg.value, cfg.budget_share)
    points = {}
    for point in cfg.operating_points:
        t, p_params, _ = pick_threshold(cs, cfg, point.criterion, point.value, point.budget_share)
        points[point.name] = {"criterion": point.criterion, "value": point.value, **p_params,
                              "threshold_logit": float(t),
                              "achieved": summarize(cs.scores, cs.labels, t, cs, cfg.reward)}
    return {
        "criterion": cfg.criterion, "value": cfg.value, **params,
        "threshold_logit": float(threshold),
        "n_calibration": len(cs.scores),
        "achieved": summarize(cs.scores, cs.labels, threshold, cs, cfg.reward),
        "guarantee": guarantee,
        "operating_points": points,
    }


def load_replayable(data: str, split: str, correctness: str = "label_rule", include_unlabeled: bool = True,
                    limit: int | None = None) -> list[dict[str, Any]]:
    """The records eval replays: labeled, plus dropped ones whose path correctness is known."""
    return load_calibration_records(data, split, correctness, include_unlabeled, limit)[0]


def load_calibration_records(data: str, split: str, correctness: str = "label_rule", include_unlabeled: bool = True,
                             limit: int | None = None) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """load_replayable's records and the counts of what replay left out (n_error, n_unreplayable)."""
    from evaluation.metrics import replayable_records
    from labeling.dataset import RecordError, load_split

    path = Path(data)
    rows = load_split(path, split)
    for i, row in enumerate(rows):
        for key in ("question", "router_summaries", "label"):
            if key not in row:
                raise RecordError(f"{path} [{split}] record {i}: missing field {key!r}")
    try:
        kept, case_set = replayable_records(rows, correctness, include_unlabeled)
    except RecordError as exc:  # the record reader names record and field; the file is known here
        raise RecordError(f"{path} [{split}] {exc}") from None
    if not kept:
        why = (f" ({case_set.n_unreplayable} have an unknown path verdict under rule {correctness!r})"
               if case_set.n_unreplayable else "")
        raise ConfigError(f"{path} [{split}]: no replayable records to calibrate on{why}")
    counts = {"n_records": len(rows), "n_error": case_set.n_error, "n_unreplayable": case_set.n_unreplayable}
    return list(kept[:limit] if limit else kept), counts


def calibration_set(records: Sequence[dict[str, Any]], scores: Sequence[float],
                    correctness: str = "label_rule") -> CalibrationSet:
    from evaluation.metrics import to_case

    cases = [to_case(r, correctness, i) for i, r in enumerate(records)]
    return CalibrationSet(
        scores=[float(s) for s in scores], labels=[c.label for c in cases], s_ok=[c.s_ok for c in cases],
        r_ok=[c.r_ok for c in cases], s_tokens=[c.s_tokens for c in cases], r_tokens=[c.r_tokens for c in cases],
        clusters=[str(r.get("conv_id", i)) for i, r in enumerate(records)])


def score_records(router: Any, records: Sequence[dict[str, Any]], batch_size: int) -> list[float]:
    from tqdm import tqdm

    scores: list[float] = []
    for i in tqdm(range(0, len(records), batch_size), desc="calibrate: scoring", unit="batch"):
        chunk = records[i: i + batch_size]
        scores += router.score([r["question"] for r in chunk], [r["router_summaries"] for r in chunk])
    return scores


def run(cfg: CalibrateConfig) -> dict[str, Any]:
    path = cfg.router.path
    if not cfg.write or not path or not Path(path).is_dir():
        return _run(cfg)
    # The threshold goes into the router's own run: only a trained router run, checked and locked before loading.
    with updating_run(path, "calibrate", ROUTER_STAGES):
        return _run(cfg)


def _run(cfg: CalibrateConfig) -> dict[str, Any]:
    records, counts = load_calibration_records(cfg.data, cfg.split, cfg.correctness, cfg.include_unlabeled,
                                               cfg.limit)
    spec = dataclasses.replace(cfg.router, mode="fast", batch_size=cfg.batch_size)  # calibration needs a score
    router = build(spec, trunk_cache={})
    scores = score_records(router, records, cfg.batch_size)
    result = calibrate(calibration_set(records, scores, cfg.correctness), cfg)
    result.update({"data": cfg.data, "split": cfg.split, "correctness": cfg.correctness,
                   "scored_by": f"{router.kind} score (log-odds of ESCALATE)", **counts})
    if counts["n_unreplayable"]:
        result["notes"] = [f"{counts['n_unreplayable']} record(s) not replayable (a path's correctness is unknown "
                           f"under rule {cfg.correctness!r}): left out of the calibration set"]
    if cfg.write:
        if not spec.path or not Path(spec.path).is_dir():
            raise MissingFileError(f"{spec.path}: calibration is stored in a local run directory")
        update_run_meta(spec.path, calibration=result)
        from serving.model_card import refresh_card

        refresh_card(spec.path)  # the run's README.md shows the stored threshold
    return result


@stage_main("calibrate")
def main(argv: list[str]) -> int:
    from tiermem.config import parse_cli

    cfg = parse_cli(CalibrateConfig, argv, default_config=None)
    result = run(cfg)
    print(json.dumps({"config": asdict(cfg), **result}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
