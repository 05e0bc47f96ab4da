"""Serve-time signals of one (question, summaries) pair, and the logistic model that reads them.

One feature function (`features`) for every router that uses signals: the `features` baseline router and the
signal head the LM router adds to its decision margin (serving.router.LocalRouter, trained jointly in SFT).
Features: retrieval scores (top-1, mean, top-1 minus top-2), lexical overlap of the question's content words
with the summaries, the question's form (when / how many / list-like / yes-no / why), summary count, question
length, whether any summary is dated.

`LogisticModel` is a linear model on standardized features (log-odds of ESCALATE); `fit_logistic` fits one by
Newton's method (numpy, L2). The signal head is stored in the same format (`signal_head.json`). A linear model
extrapolates without bound, so every feature is clipped to the range seen in the training rows before it is read,
and the routers report which features were clipped (Decision.clipped).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tiermem.models.logistic import sigmoid
from tiermem.runs.run_meta import FEATURE_MODEL_FILE, SIGNAL_HEAD_FILE  # noqa: F401  (the signal head's file name)
from tiermem.runs.safe_io import write_atomic
from tiermem.settings.errors import ConfigError, DataError, RouterLoadError
from tiermem.text.words import SIGNAL_STOPWORDS, strip_plural, tokens

log = logging.getLogger(__name__)

NO_SUMMARY_SCORE = -1.0  # top-1 score when nothing was retrieved: the floor of a cosine similarity

YES_NO_STARTS = ("is", "are", "was", "were", "do", "does", "did", "has", "have", "had", "can", "could", "will",
                 "would", "should", "shall", "may", "might")
FEATURES = ("top1", "mean_score", "gap12", "overlap", "overlap_best", "n_summaries", "q_words", "when",
            "how_many", "list_like", "yes_no", "why", "has_date")
# What each feature measures, for reports of which inputs carry a decision (LogisticModel.contributions).
FEATURE_GROUPS = {"retrieval scores": ("top1", "mean_score", "gap12"), "lexical overlap": ("overlap", "overlap_best"),
                  "question form": ("q_words", "when", "how_many", "list_like", "yes_no", "why"),
                  "summary set": ("n_summaries", "has_date")}


def _text(unit: Any) -> str:
    return str(unit.get("text", "") if isinstance(unit, dict) else getattr(unit, "text", "") or "")


def _score_of(unit: Any) -> float | None:
    value = unit.get("score") if isinstance(unit, dict) else getattr(unit, "score", None)
    return None if value is None else float(value)


def _date(unit: Any) -> Any:
    return unit.get("date") if isinstance(unit, dict) else getattr(unit, "date", None)


def content_words(text: str) -> set[str]:
    """Lower-cased content words with a crude plural strip, so 'dogs' matches 'dog'."""
    return {strip_plural(w) for w in tokens(text) if w not in SIGNAL_STOPWORDS}


def retrieval_scores(summaries: Sequence[Any], where: str = "summaries") -> list[float]:
    scores = []
    for i, unit in enumerate(summaries):
        s = _score_of(unit)
        if s is None or not math.isfinite(s):
            raise DataError(f"{where}[{i}]: retrieval 'score' missing or not a number (needed by score routers)")
        scores.append(s)
    return scores


def top1(summaries: Sequence[Any], where: str = "summaries") -> float:
    """The top-1 retrieval score (the first unit is the best: retrieval returns them in rank order)."""
    scores = retrieval_scores(summaries, where)
    return max(scores) if scores else NO_SUMMARY_SCORE


def question_form(question: str) -> dict[str, float]:
    q = question.lower().strip()
    words = tokens(q)
    first = words[0] if words else ""
    return {
        "when": float("when" in words or "what year" in q or "what date" in q or "what month" in q
                      or "how long ago" in q),
        "how_many": float("how many" in q or "how much" in q or "how often" in q),
        "list_like": float(bool(re.search(r"\b(what|which) (are|were|kinds?|types?|things|activities|books|places"
                                          r"|hobbies|ways|events)\b", q)) or " list" in q or "what all" in q
                           or "what else" in q),
        "yes_no": float(first in YES_NO_STARTS),
        "why": float(first == "why" or "reason" in words),
    }


def features(question: str, summaries: Sequence[Any], where: str = "record") -> dict[str, float]:
    """The serve-time features of one (question, summaries) pair, by name (see FEATURES)."""
    scores = retrieval_scores(summaries, f"{where}: summaries")
    ranked = sorted(scores, reverse=True)
    q_words = content_words(question)
    unit_words = [content_words(_text(u)) for u in summaries]
    union = set().union(*unit_words) if unit_words else set()
    denom = max(len(q_words), 1)
    out = {
        "top1": ranked[0] if ranked else NO_SUMMARY_SCORE,
        "mean_score": sum(scores) / len(scores) if scores else NO_SUMMARY_SCORE,
        "gap12": ranked[0] - ranked[1] if len(ranked) > 1 else 0.0,
        "overlap": len(q_words & union) / denom,  # content-word recall of the question in all summaries
        "overlap_best": max((len(q_words & w) / denom for w in unit_words), default=0.0),
        "n_summaries": float(len(summaries)),
        "q_words": math.log1p(len(tokens(question))),
        "has_date": float(any(_date(u) for u in summaries)),
    }
    out.update(question_form(question))
    return {name: float(out[name]) for name in FEATURES}


def feature_matrix(questions: Sequence[str], summaries: Sequence[Sequence[Any]]) -> np.ndarray:
    if len(questions) != len(summaries):
        raise ValueError(f"{len(questions)} questions but {len(summaries)} summary lists")
    return np.array([[features(q, s, f"record {i}")[n] for n in FEATURES]
                     for i, (q, s) in enumerate(zip(questions, summaries, strict=True))], dtype=np.float64)


# ---- logistic regression -------------------------------------------------------------------------


@dataclass
class LogisticModel:
    feature_names: list[str]
    mean: list[float]
    scale: list[float]
    weights: list[float]
    bias: float
    l2: float
    class_weight: str
    n_train: int
    train_escalate_share: float
    # Each feature's smallest and largest value in the training rows; serve-time values are clipped to them.
    # None (both): no range recorded, nothing is clipped (read_logistic warns).
    train_min: list[float] | None = None
    train_max: list[float] | None = None

    def validate(self, where: str | Path = FEATURE_MODEL_FILE) -> None:
        """Every field typed and range-checked, so a loaded model scores finite log-odds for any finite features;
        RouterLoadError names the file and the field."""

        def bad(name: str, problem: str) -> RouterLoadError:
            return RouterLoadError(f"{where}: field {name!r} {problem}")

        def finite(value: Any) -> bool:
            return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)

        if not isinstance(self.feature_names, list) or not all(isinstance(n, str) for n in self.feature_names):
            raise bad("feature_names", "must be a list of feature names")
        n = len(self.feature_names)
        for name in ("mean", "scale", "weights"):
            values = getattr(self, name)
            if not isinstance(values, list) or len(values) != n:
                got = len(values) if isinstance(values, list) else type(values).__name__
                raise bad(name, f"must be a list of {n} numbers (one per feature), got {got}")
            wrong = [i for i, v in enumerate(values) if not finite(v)]
            if wrong:
                raise bad(name, f"must hold finite numbers; entries {wrong} are {[values[i] for i in wrong]}")
        if any(v <= 0 for v in self.scale):
            raise bad("scale", "must be positive (a standardization divides by it)")
        if not finite(self.bias):
            raise bad("bias", f"must be a finite number, got {self.bias!r}")
        if not finite(self.l2) or self.l2 < 0:
            raise bad("l2", f"must be a finite number >= 0, got {self.l2!r}")
        if self.class_weight not in ("balanced", "none"):
            raise bad("class_weight", f"must be balanced or none, got {self.class_weight!r}")
        if isinstance(self.n_train, bool) or not isinstance(self.n_train, int) or self.n_train < 1:
            raise bad("n_train", f"must be a positive integer, got {self.n_train!r}")
        if not finite(self.train_escalate_share) or not 0.0 <= self.train_escalate_share <= 1.0:
            raise bad("train_escalate_share", f"must be in [0, 1], got {self.train_escalate_share!r}")
        if (self.train_min is None) != (self.train_max is None):
            raise bad("train_min" if self.train_min is None else "train_max",
                      "must be given with its partner (train_min and train_max: the training range, or neither)")
        if self.train_min is not None:
            for name in ("train_min", "train_max"):
                values = getattr(self, name)
                if not isinstance(values, list) or len(values) != n or not all(finite(v) for v in values):
                    raise bad(name, f"must be a list of {n} finite numbers (one per feature)")
            inverted = [i for i in range(n) if self.train_min[i] > self.train_max[i]]
            if inverted:
                raise bad("train_min", f"exceeds train_max for features {[self.feature_names[i] for i in inverted]}")

    def clip(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`x` clipped to the training range, and a mask (same shape) of the entries that were clipped."""
        x = np.asarray(x, dtype=np.float64)
        if self.train_min is None or self.train_max is None:
            return x, np.zeros(x.shape, dtype=bool)
        inside = np.clip(x, np.asarray(self.train_min), np.asarray(self.train_max))
        return inside, inside != x

    def clipped_features(self, x: np.ndarray, skip: Sequence[str] = ()) -> list[list[str]]:
        """Per row, the features that were outside the training range and carry weight (a weight-0 feature's
        clipping changes nothing); `skip`: features a router does not read in this mode."""
        _, mask = self.clip(x)
        names = [(i, n) for i, n in enumerate(self.feature_names) if self.weights[i] != 0.0 and n not in skip]
        return [[n for i, n in names if row[i]] for row in mask]

    def standardized(self, x: np.ndarray) -> np.ndarray:
        return (self.clip(x)[0] - np.asarray(self.mean)) / np.asarray(self.scale)

    def log_odds(self, x: np.ndarray) -> np.ndarray:
        return self.standardized(x) @ np.asarray(self.weights, dtype=np.float64) + self.bias

    def contributions(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Each FEATURE_GROUPS group's share of the log-odds per row (bias left out): they sum to log_odds - bias."""
        z = self.standardized(x) * np.asarray(self.weights, dtype=np.float64)
        index = {name: i for i, name in enumerate(self.feature_names)}
        return {group: z[:, [index[n] for n in names if n in index]].sum(axis=1)
                for group, names in FEATURE_GROUPS.items()}


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1.0, class_weight: str = "balanced",
                 feature_names: Sequence[str] = FEATURES, max_iter: int = 100) -> LogisticModel:
    """L2-regularized logistic regression by Newton's method on standardized features (bias unpenalized).

    `class_weight="balanced"` weighs each class by n / (2 n_class), so the fitted log-odds are not pulled to the
    train split's class share (calibration picks the operating point afterwards)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or len(x) != len(y) or len(y) == 0:
        raise ValueError(f"fit_logistic: need a 2-d feature matrix with one label per row, got {x.shape}, {y.shape}")
    if y.min() == y.max():
        raise DataError("fit_logistic: the training rows hold one class only; cannot fit a router")
    if class_weight not in ("balanced", "none"):
        raise ConfigError(f"class_weight must be balanced or none, got {class_weight!r}")
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-12] = 1.0  # a constant feature stays 0 after centring
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    n_pos = y.sum()
    sw = np.ones(len(y)) if class_weight == "none" else np.where(y > 0.5, len(y) / (2 * n_pos),
                                                                 len(y) / (2 * (len(y) - n_pos)))
    penalty = np.full(z.shape[1], l2)
    penalty[-1] = 0.0
    beta = np.zeros(z.shape[1])
    for _ in range(max_iter):
        p = sigmoid(z @ beta)
        grad = z.T @ (sw * (p - y)) + penalty * beta
        hess = (z * (sw * p * (1 - p))[:, None]).T @ z + np.diag(penalty) + 1e-9 * np.eye(z.shape[1])
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return LogisticModel(list(feature_names), mean.tolist(), scale.tolist(), beta[:-1].tolist(), float(beta[-1]),
                         l2, class_weight, len(y), float(n_pos / len(y)), x.min(axis=0).tolist(),
                         x.max(axis=0).tolist())


def save_logistic(path: str | Path, model: LogisticModel) -> Path:
    path = Path(path)
    write_atomic(path, json.dumps(asdict(model), indent=2) + "\n")
    return path


def read_logistic(path: str | Path) -> LogisticModel:
    """A saved LogisticModel, every field checked; RouterLoadError naming the file (and field) when it is not one."""
    path = Path(path)
    try:
        model = LogisticModel(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError, TypeError, UnicodeDecodeError) as exc:
        raise RouterLoadError(f"{path}: not a fitted feature model: {exc}") from None
    model.validate(path)
    if model.train_min is None:
        log.warning("%s: no training range recorded (train_min/train_max): signals are not clipped, so a value "
                    "beyond what the model was fitted on is extrapolated; refit to record it", path)
    return model
