"""The threshold rules calibrate chooses between (docs/DESIGN.md, `evaluation/calibrate.py`): pure
functions of a CalibrationSet, the scores and what each replayable record's two paths earned and cost."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from serving.routers.base import ESCALATE_ALL, decide
from tiermem.rewards import RewardConfig, resolve_cost_scale, score_decision
from tiermem.settings.errors import UsageError

ANSWER_ALL = 1.0e9  # a log-odds threshold above any margin: nothing escalates (JSON-safe +inf)


@dataclass
class CalibrationSet:
    """What calibration needs per replayable record."""

    scores: list[float]  # router log-odds
    labels: list[str | None]  # ANSWER | ESCALATE | None (dropped)
    s_ok: list[bool] | None = None
    r_ok: list[bool] | None = None
    s_tokens: list[float] | None = None
    r_tokens: list[float] | None = None

    def __post_init__(self) -> None:
        n = len(self.scores)
        for name in ("labels", "s_ok", "r_ok", "s_tokens", "r_tokens"):
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
        esc = [decide(s, t) == "ESCALATE" for s in cs.scores]
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


def false_cache_hit_losses(cs: CalibrationSet) -> list[bool]:
    """Whether ANSWER on the record would be a false cache hit (only research was right)."""
    cs.need("s_ok", "r_ok")
    return [bool(r and not s) for s, r in zip(cs.s_ok, cs.r_ok, strict=True)]  # type: ignore[arg-type]


def threshold_risk_control(cs: CalibrationSet, alpha: float, delta: float,
                           grid: Sequence[float] = (-20.0, 20.0, 4001)) -> tuple[float, dict[str, Any]]:
    """Learn-then-Test with fixed-sequence testing, questions as the exchangeable units (docs/DESIGN.md). Returns
    (threshold, guarantee)."""
    loss = np.asarray(false_cache_hit_losses(cs), dtype=np.float64)
    scores = np.asarray(cs.scores, dtype=np.float64)
    n_units, unit, method = len(scores), "question", "learn-then-test, fixed sequence, exact binomial p-value"
    chosen, chosen_p, chosen_risk = ESCALATE_ALL, None, 0.0
    for t in np.round(np.linspace(grid[0], grid[1], int(grid[2])), 9):  # rounded: readable stored thresholds
        risk_hat = float((loss * (scores < t)).mean())
        p = binomial_p_value(risk_hat, n_units, alpha)
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


# ---- what a threshold does --------------------------------------------------------------------------


def summarize(scores: Sequence[float], labels: Sequence[str | None], threshold: float,
              cs: CalibrationSet | None = None, reward: RewardConfig | None = None) -> dict[str, Any]:
    """What the threshold does on the calibration records."""
    escalate = [decide(s, threshold) == "ESCALATE" for s in scores]
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


