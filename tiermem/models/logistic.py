"""Log-odds (`sigmoid`, `logit`) and the logistic model of the features router and signal heads (docs/DESIGN.md)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tiermem.runs.run_meta import FEATURE_MODEL_FILE
from tiermem.runs.safe_io import write_atomic
from tiermem.settings.errors import ConfigError, DataError, RouterLoadError, UsageError

log = logging.getLogger(__name__)


def sigmoid(x: Any) -> Any:
    """The logistic function of log-odds. A float: without overflow for any |x|. An array: elementwise, a log-odds
    so negative that exp overflows gives its limit 0."""
    if isinstance(x, np.ndarray):
        with np.errstate(over="ignore"):
            return 1.0 / (1.0 + np.exp(-x))
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def logit(p: float) -> float:
    """Inverse of sigmoid, for a probability a person or the HTTP API gave; 0 and 1 map to -inf / +inf."""
    if not 0.0 <= p <= 1.0:
        raise UsageError(f"probability must be in [0, 1], got {p}")
    if p == 0.0:
        return -math.inf
    if p == 1.0:
        return math.inf
    return math.log(p) - math.log1p(-p)


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
        """Every field checked (RouterLoadError names file and field): finite log-odds for any finite features."""

        def bad(name: str, problem: str) -> RouterLoadError:
            return RouterLoadError(f"{where}: field {name!r} {problem}")

        def finite(value: Any) -> bool:
            return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)

        if not isinstance(self.feature_names, list) or not all(isinstance(n, str) for n in self.feature_names):
            raise bad("feature_names", "must be a list of feature names")
        n = len(self.feature_names)
        if (self.train_min is None) != (self.train_max is None):
            raise bad("train_min" if self.train_min is None else "train_max",
                      "must be given with its partner (train_min and train_max: the training range, or neither)")
        for name in ("mean", "scale", "weights", *(("train_min", "train_max") if self.train_min is not None else ())):
            values = getattr(self, name)
            if not isinstance(values, list) or len(values) != n or not all(finite(v) for v in values):
                raise bad(name, f"must be a list of {n} finite numbers (one per feature), got {values!r}")
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
        inverted = [i for i in range(n) if self.train_min is not None and self.train_min[i] > self.train_max[i]]
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

    def contributions(self, x: np.ndarray, groups: dict[str, Sequence[str]]) -> dict[str, np.ndarray]:
        """Each group's share of the log-odds per row (bias left out; `groups`: name -> feature names, e.g.
        serving.signals.FEATURE_GROUPS): over groups that cover every feature they sum to log_odds - bias."""
        z = self.standardized(x) * np.asarray(self.weights, dtype=np.float64)
        index = {name: i for i, name in enumerate(self.feature_names)}
        return {group: z[:, [index[n] for n in names if n in index]].sum(axis=1) for group, names in groups.items()}


def fit_logistic(x: np.ndarray, y: np.ndarray, feature_names: Sequence[str], l2: float = 1.0,
                 class_weight: str = "balanced", max_iter: int = 100) -> LogisticModel:
    """Newton's method on standardized features, bias unpenalized. `class_weight="balanced"` weighs a class by
    n / (2 n_class): the log-odds are not pulled to the train share (calibration picks the operating point)."""
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
