"""What a number means decides what values it may take: the one place that says so, for every boundary (label
records, /route requests, configs). A retrieval `score` is a cosine similarity in [-1, 1] (docs/formats.md)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

Error = Callable[[str], Exception]  # an error class, or a factory such as the server's 422

SCORE_MIN, SCORE_MAX = -1.0, 1.0
SCORE_SLACK = 1e-3
SCORE_MEANING = "a cosine similarity in [-1, 1] (docs/formats.md, 'Retrieval scores')"


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def finite(value: Any, where: str, error: Error, what: str = "a finite number") -> float:
    """A finite float; a JSON integer too big for one (400 digits) is refused here, not deep in a router."""
    if not is_number(value):
        raise error(f"{where} must be {what}, got {_show(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise error(f"{where} must be {what}, got an integer of {len(str(abs(value)))} digits") from None
    if not math.isfinite(number):
        raise error(f"{where} must be {what}, got {number}")
    return number


def probability(value: Any, where: str, error: Error) -> float:
    number = finite(value, where, error, "a probability in [0, 1]")
    if not 0.0 <= number <= 1.0:
        raise error(f"{where} must be a probability in [0, 1], got {number}")
    return number


def non_negative(value: Any, where: str, error: Error) -> float:
    """A finite number >= 0: a weight, a penalty, an L2 strength, a count of steps."""
    number = finite(value, where, error, "a finite number >= 0")
    if number < 0:
        raise error(f"{where} must be a finite number >= 0, got {number:g}")
    return number


def retrieval_score(value: Any, where: str, error: Error) -> float:
    number = finite(value, where, error, SCORE_MEANING)
    if not SCORE_MIN - SCORE_SLACK <= number <= SCORE_MAX + SCORE_SLACK:
        raise error(f"{where} must be {SCORE_MEANING}, got {number:g}; a BM25 or dot-product score is on "
                    "another scale: send cosine similarities")
    return number


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
