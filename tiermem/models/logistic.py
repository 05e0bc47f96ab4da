"""Probabilities and log-odds: the one place a probability of ESCALATE is made of a score (`sigmoid`), and where a
probability a person gives becomes a log-odds threshold (`logit`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tiermem.settings.errors import UsageError


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
