"""The unit reader's head as the router scores it: the stage reaches serving/routers/unit_reader.py through here, so
CV, the final head and the out-of-fold scores are computed as the router serves."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from serving.routers.unit_reader import CrossEncoder, head_matrix, head_parts, text_features, unit_logits
from serving.signals import FEATURES
from tiermem.models.logistic import LogisticModel

Record = dict[str, Any]


def read_units(reader: CrossEncoder, records: Sequence[Record]) -> list[list[tuple[float, ...]]]:
    """Each record's unit scores: per router unit, (classifier logit,) or (classifier logit, span margin)."""
    return unit_logits(reader, [r["question"] for r in records], [r["router_summaries"] for r in records])


def head_inputs(records: Sequence[Record], logits: Sequence[Sequence[Any]], pooling: str,
                text_scores: str) -> np.ndarray:
    """The head's rows: the serve-time signals, then the pooling's text features of each reader score read."""
    return head_matrix([r["question"] for r in records], [r["router_summaries"] for r in records], logits, pooling,
                       text_scores)


def head_names(pooling: str, text_scores: str) -> list[str]:
    """The feature names of a head the router can load: the signals, then the pooling's text features."""
    return [*FEATURES, *text_features(pooling, text_scores)]


def column_names(x: np.ndarray) -> list[str]:
    """The signals' names, then text0, text1, ... for the text columns of `x` (a head fitted only to be scored)."""
    return [*FEATURES, *[f"text{i}" for i in range(x.shape[1] - len(FEATURES))]]


def head_score(head: LogisticModel, x: np.ndarray, text_weight: float) -> np.ndarray:
    """The router's score of head inputs `x`: bias + signals + text_weight x the text part."""
    return head_parts(head, x, text_weight)[0]


