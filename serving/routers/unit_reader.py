"""The unit reader router: a cross-encoder scores each retrieved unit against the question, the unit scores are
pooled, and a logistic head joins them with the serve-time signals into one log-odds of ESCALATE.

    reader(question, unit_i) -> s_i           logit that unit i alone states the answer (MiniLM cross-encoder)
    pool(s_1..s_k)           -> text features  max, second max, soft-OR (POOLINGS)
    score = bias + signals . w_s + text_weight x (text features . w_t)

The reader is trained on per-unit targets (labeling/unit_targets.py), the head and `text_weight` by
router_train/unit_reader.py. `score_parts` carries the text part and each signal group's share, so eval reports
what carries the decision. The k units of a question are one batch of short pairs (~60 tokens each), so there is
no long prompt to cache. One scorer: training metrics, calibrate, eval, serve and the card all call `scored`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from serving.routers.base import (
    ScoreRouter,
    Summaries,
    calibrated_threshold_logit,
    check_lengths,
    sigmoid,
)
from serving.routers.score_run import open_score_run, score_run_meta, write_score_run
from serving.signals import FEATURE_GROUPS, FEATURES, LogisticModel, feature_matrix, read_logistic, save_logistic
from tiermem import contract, safe_io
from tiermem.artifacts import SIGNAL_HEAD_FILE
from tiermem.cross_encoder import CrossEncoder
from tiermem.errors import RouterLoadError
from tiermem.model_dir import load_reader

# pooling name -> the text features it gives the head, computed from a question's unit logits in rank order
POOLINGS: dict[str, tuple[str, ...]] = {
    "max": ("reader_max",),
    "max2": ("reader_max", "reader_second"),
    "softor": ("reader_softor",),
    "all": ("reader_max", "reader_second", "reader_softor", "reader_mean"),
}
NO_UNIT_LOGIT = -10.0  # a missing unit (fewer than 2 retrieved): "states nothing", well below any trained logit
ZERO_SHOT_HEAD_FILE = "signal_head_zero_shot.json"  # the base reader's own head, for eval's "what fine-tuning adds"


def unit_text(unit: Any) -> str:
    """What the reader sees of a unit: its date and text as the router contract shows them (clipped)."""
    view = contract.as_view(unit)
    text = contract._clip(view.text)
    return f"{view.date}: {text}" if view.date else text


def _log_odds(p: float) -> float:
    p = min(max(p, 1e-12), 1 - 1e-12)
    return math.log(p) - math.log1p(-p)


def pooled(logits: Sequence[float], pooling: str) -> list[float]:
    """The pooling's text features of one question's unit logits."""
    ranked = sorted((float(x) for x in logits), reverse=True) or [NO_UNIT_LOGIT]
    second = ranked[1] if len(ranked) > 1 else NO_UNIT_LOGIT
    # soft-OR: P(some unit states the answer) if units were independent readers, as log-odds
    none = math.prod(1.0 - sigmoid(x) for x in ranked)
    values = {"reader_max": ranked[0], "reader_second": second, "reader_softor": _log_odds(1.0 - none),
              "reader_mean": sum(ranked) / len(ranked)}
    return [values[name] for name in POOLINGS[pooling]]


def unit_logits(reader: CrossEncoder, questions: Sequence[str], summaries: Sequence[Summaries]) -> list[list[float]]:
    """Every question's unit logits, all pairs of a call scored in shared batches."""
    pairs = [(q, unit_text(u)) for q, units in zip(questions, summaries, strict=True) for u in units]
    flat = reader.logits([p[0] for p in pairs], [p[1] for p in pairs]) if pairs else []
    out, start = [], 0
    for units in summaries:
        out.append(flat[start: start + len(units)])
        start += len(units)
    return out


def head_matrix(questions: Sequence[str], summaries: Sequence[Summaries], logits: Sequence[Sequence[float]],
                pooling: str) -> np.ndarray:
    """The head's rows: the serve-time signals (FEATURES), then the pooling's text features."""
    signals = feature_matrix(questions, summaries)
    text = np.array([pooled(row, pooling) for row in logits], dtype=np.float64).reshape(len(questions), -1)
    return np.hstack([signals, text])


def head_parts(head: LogisticModel, x: np.ndarray, text_weight: float) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(score, parts): parts are "text" (weighted) and each signal group's share; score = bias + their sum."""
    z = head.standardized(x) * np.asarray(head.weights, dtype=np.float64)
    index = {name: i for i, name in enumerate(head.feature_names)}
    parts = {"text": text_weight * z[:, [i for n, i in index.items() if n not in FEATURES]].sum(axis=1)}
    for group, names in FEATURE_GROUPS.items():
        parts[f"signals: {group}"] = z[:, [index[n] for n in names]].sum(axis=1)
    return head.bias + sum(parts.values()), parts


def check_head(head: LogisticModel, pooling: str, where: str) -> LogisticModel:
    if pooling not in POOLINGS:
        raise RouterLoadError(f"{where}: pooling {pooling!r} is not one of {sorted(POOLINGS)}")
    expected = [*FEATURES, *POOLINGS[pooling]]
    if list(head.feature_names) != expected:
        raise RouterLoadError(f"{where}: head reads {head.feature_names}, this version computes {expected}: retrain")
    return head


class UnitReaderRouter(ScoreRouter):
    kind = "unit-reader"
    probabilistic = True
    summary_fields = ("score",)  # the signals read the retrieval scores

    def __init__(self, reader: CrossEncoder, head: LogisticModel, pooling: str, text_weight: float,
                 threshold_logit: float | None = None) -> None:
        if not (isinstance(text_weight, int | float) and math.isfinite(text_weight) and text_weight >= 0):
            raise RouterLoadError(f"unit reader: text_weight must be a finite number >= 0, got {text_weight!r}")
        self.reader, self.pooling, self.text_weight = reader, pooling, float(text_weight)
        self.head = check_head(head, pooling, "unit reader")
        super().__init__(threshold_logit)

    @classmethod
    def from_spec(cls, spec, trunk_cache=None):
        if not spec.path:
            raise RouterLoadError("a unit-reader router needs router.path: a `tiermem-router unit-reader` directory")
        return cls.load(spec.path, threshold_logit=spec.threshold_logit)

    def scored(self, questions: Sequence[str], summaries: Sequence[Summaries]
               ) -> tuple[list[float], list[dict[str, float]], list[list[str]]]:
        """The one scorer: log-odds of ESCALATE per question, what it is made of, and the head's inputs clipped to
        the training range. With text weight 0 the reader is not run (the decision is the signals')."""
        check_lengths(questions, summaries)
        if not len(questions):
            return [], [], []
        logits = (unit_logits(self.reader, questions, summaries) if self.text_weight
                  else [[NO_UNIT_LOGIT] * len(s) for s in summaries])
        x = head_matrix(questions, summaries, logits, self.pooling)
        score, parts = head_parts(self.head, x, self.text_weight)
        clipped = self.head.clipped_features(x, skip=() if self.text_weight else POOLINGS[self.pooling])
        return score.tolist(), [{k: float(v[i]) for k, v in parts.items()} for i in range(len(questions))], clipped

    def score(self, questions: Sequence[str], summaries: Sequence[Summaries]) -> list[float]:
        return self.scored(questions, summaries)[0]

    def save(self, run_dir: str | Path, data: dict[str, Any], metrics: dict[str, Any],
             extra: dict[str, Any]) -> Path:
        """Reader weights (model.safetensors, config, tokenizer), the head (signal_head.json), then the metadata
        with every weight file's digest."""
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        safe_io.save_pretrained(self.reader.model, run_dir, safe_serialization=True)
        safe_io.save_pretrained(self.reader.tokenizer, run_dir)
        save_logistic(run_dir / SIGNAL_HEAD_FILE, self.head)
        extra = dict(extra)
        if "zero_shot_head" in extra:
            save_logistic(run_dir / ZERO_SHOT_HEAD_FILE, extra.pop("zero_shot_head"))
        self.meta = score_run_meta(self.kind, data, metrics, {
            **extra, "head": SIGNAL_HEAD_FILE, "pooling": self.pooling, "text_weight": self.text_weight})
        self.run_dir = write_score_run(run_dir, self.meta)
        return self.run_dir

    @classmethod
    def load(cls, path: str | Path, threshold_logit: float | None = None) -> UnitReaderRouter:
        run_dir, meta = open_score_run(path, cls.kind)
        for name in ("model.safetensors", "config.json", SIGNAL_HEAD_FILE):
            if not (run_dir / name).is_file():
                raise RouterLoadError(f"{run_dir / name} not found: a unit-reader directory needs its reader and head")
        extra = meta.extra or {}
        # pairs per forward pass as the stage scored them, so its metrics and a loaded router batch alike
        pair_batch = (extra.get("config") or {}).get("score_batch_size", 64)
        reader = load_reader(run_dir, "router=", batch_size=int(pair_batch))  # files checked, load errors named
        calibrated = calibrated_threshold_logit(meta)
        router = cls(reader, read_logistic(run_dir / SIGNAL_HEAD_FILE), str(extra.get("pooling")),
                     extra.get("text_weight"), threshold_logit if threshold_logit is not None else calibrated)
        router.run_dir, router.meta, router.name = run_dir, meta, f"{cls.kind}:{path}"
        return router
