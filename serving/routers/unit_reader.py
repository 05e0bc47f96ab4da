"""The unit reader router: cross-encoder unit scores, pooled, joined with the serve-time signals by a logistic head
(docs/DESIGN.md). One scorer: the stage's metrics, calibrate, eval and serve all call `scored`."""

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
from serving.routers.score_run import open_score_run, score_run_meta, write_router_run
from serving.signals import FEATURE_GROUPS, FEATURES, feature_matrix
from tiermem import contract
from tiermem.models.cross_encoder import CrossEncoder
from tiermem.models.logistic import LogisticModel, read_logistic, save_logistic
from tiermem.models.model_dir import load_reader
from tiermem.runs.run_meta import SIGNAL_HEAD_FILE
from tiermem.runs.rundir import claim_output_dir
from tiermem.settings import ranges
from tiermem.settings.errors import RouterLoadError

# pooling name -> the text features it gives the head, computed from a question's unit logits in rank order
POOLINGS: dict[str, tuple[str, ...]] = {
    "max": ("reader_max",),
    "max2": ("reader_max", "reader_second"),
    "softor": ("reader_softor",),
    "all": ("reader_max", "reader_second", "reader_softor", "reader_mean"),
}
# which of the reader's scores the head reads: the classifier's logit, the span margin, or both side by side
TEXT_SCORES: dict[str, tuple[int, ...]] = {"classifier": (0,), "span": (1,), "both": (0, 1)}
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


def text_features(pooling: str, text_scores: str = "classifier") -> tuple[str, ...]:
    """The head's text feature names: the pooling's names per score read (span ones prefixed `span_`)."""
    names = {0: POOLINGS[pooling], 1: tuple(n.replace("reader_", "span_") for n in POOLINGS[pooling])}
    return tuple(n for col in TEXT_SCORES[text_scores] for n in names[col])


def unit_logits(reader: CrossEncoder, questions: Sequence[str], summaries: Sequence[Summaries]
                ) -> list[list[tuple[float, ...]]]:
    """Every question's unit scores, (classifier logit[, span margin]) per unit, all pairs in shared batches."""
    return unit_reading(reader, questions, summaries)[0]


def unit_reading(reader: CrossEncoder, questions: Sequence[str], summaries: Sequence[Summaries]
                 ) -> tuple[list[list[tuple[float, ...]]], list[int]]:
    """unit_logits, and the tokens the reader read for each question (all its units' pairs)."""
    pairs = [(q, unit_text(u)) for q, units in zip(questions, summaries, strict=True) for u in units]
    got = reader.read([p[0] for p in pairs], [p[1] for p in pairs]) if pairs else None
    flat = [] if got is None else (list(zip(got.logits, got.span_margins, strict=True)) if got.span_margins
                                   is not None else [(v,) for v in got.logits])
    read = [] if got is None else got.tokens or [0] * len(flat)
    out, tokens, start = [], [], 0
    for units in summaries:
        out.append(flat[start: start + len(units)])
        tokens.append(sum(read[start: start + len(units)]))
        start += len(units)
    return out, tokens


def head_matrix(questions: Sequence[str], summaries: Sequence[Summaries], logits: Sequence[Sequence[Any]],
                pooling: str, text_scores: str = "classifier") -> np.ndarray:
    """The head's rows: the serve-time signals (FEATURES), then the pooling's text features of each score read
    (`logits`: per question, per unit a number or a tuple of the reader's scores, as unit_logits gives them)."""
    signals = feature_matrix(questions, summaries)
    cols = TEXT_SCORES[text_scores]

    def column(row: Sequence[Any], col: int) -> list[float]:
        return [u if isinstance(u, int | float) and col == 0 else u[col] for u in row]

    try:
        text = [[v for col in cols for v in pooled(column(row, col), pooling)] for row in logits]
    except (IndexError, TypeError):
        raise RouterLoadError(f"text_scores {text_scores!r} reads the span margin, and this reader has no span "
                              "head (a classifier-only checkpoint)") from None
    return np.hstack([signals, np.array(text, dtype=np.float64).reshape(len(questions), -1)])


def head_parts(head: LogisticModel, x: np.ndarray, text_weight: float) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(score, parts): parts are "text" (weighted) and each signal group's share; score = bias + their sum."""
    z = head.standardized(x) * np.asarray(head.weights, dtype=np.float64)
    index = {name: i for i, name in enumerate(head.feature_names)}
    parts = {"text": text_weight * z[:, [i for n, i in index.items() if n not in FEATURES]].sum(axis=1)}
    for group, names in FEATURE_GROUPS.items():
        parts[f"signals: {group}"] = z[:, [index[n] for n in names]].sum(axis=1)
    return head.bias + sum(parts.values()), parts


def check_head(head: LogisticModel, pooling: str, where: str, text_scores: str = "classifier") -> LogisticModel:
    if pooling not in POOLINGS:
        raise RouterLoadError(f"{where}: pooling {pooling!r} is not one of {sorted(POOLINGS)}")
    if text_scores not in TEXT_SCORES:
        raise RouterLoadError(f"{where}: text_scores {text_scores!r} is not one of {sorted(TEXT_SCORES)}")
    expected = [*FEATURES, *text_features(pooling, text_scores)]
    if list(head.feature_names) != expected:
        raise RouterLoadError(f"{where}: head reads {head.feature_names}, this version computes {expected}: retrain")
    return head


class UnitReaderRouter(ScoreRouter):
    kind = "unit-reader"
    probabilistic = True
    summary_fields = ("score",)  # the signals read the retrieval scores

    def __init__(self, reader: CrossEncoder, head: LogisticModel, pooling: str, text_weight: float,
                 threshold_logit: float | None = None, text_scores: str = "classifier") -> None:
        self.reader, self.pooling = reader, pooling
        self.text_weight = ranges.non_negative(text_weight, "unit reader: text_weight", RouterLoadError)
        self.head = check_head(head, pooling, "unit reader", text_scores)
        if 1 in TEXT_SCORES[text_scores] and not reader.has_spans:
            raise RouterLoadError(f"unit reader: text_scores {text_scores!r} needs a reader with a span head")
        self.text_scores = text_scores
        super().__init__(threshold_logit)

    def scored(self, questions: Sequence[str], summaries: Sequence[Summaries]
               ) -> tuple[list[float], list[dict[str, float]], list[list[str]]]:
        """The one scorer: log-odds of ESCALATE per question, what it is made of, and the head's inputs clipped to
        the training range. With text weight 0 the reader is not run (the decision is the signals')."""
        return self.scored_reading(questions, summaries)[:3]

    def scored_reading(self, questions: Sequence[str], summaries: Sequence[Summaries]) -> tuple[Any, Any, Any, Any]:
        """`scored`, and the tokens read per question (none at text weight 0); `score`/`route_batch` check lengths."""
        if not len(questions):
            return [], [], [], []
        logits, tokens = (unit_reading(self.reader, questions, summaries) if self.text_weight
                          else ([[(NO_UNIT_LOGIT, NO_UNIT_LOGIT)] * len(s) for s in summaries], [0] * len(summaries)))
        x = head_matrix(questions, summaries, logits, self.pooling, self.text_scores)
        score, parts = head_parts(self.head, x, self.text_weight)
        clipped = self.head.clipped_features(
            x, skip=() if self.text_weight else text_features(self.pooling, self.text_scores))
        return (score.tolist(), [{k: float(v[i]) for k, v in parts.items()} for i in range(len(questions))], clipped,
                tokens)

    def score(self, questions: Sequence[str], summaries: Sequence[Summaries]) -> list[float]:
        check_lengths(questions, summaries)
        return self.scored(questions, summaries)[0]

    def reading_parts(self, questions: Sequence[str], summaries: Sequence[Summaries]) -> dict[str, np.ndarray]:
        """Eval's "what reading adds": `full` score, `text_alone` (the text part at weight 1: the reader runs even at
        text weight 0) and `without_text`."""
        check_lengths(questions, summaries)
        x = head_matrix(questions, summaries, unit_logits(self.reader, questions, summaries), self.pooling,
                        self.text_scores)
        full, text = head_parts(self.head, x, self.text_weight)[0], head_parts(self.head, x, 1.0)[1]["text"]
        return {"full": full, "text_alone": text, "without_text": full - self.text_weight * text}

    def zero_shot(self) -> UnitReaderRouter | None:
        """The run's zero-shot variant (base reader, signal_head_zero_shot.json) when kept and the base still found."""
        from tiermem.models.specs import ModelSpecError, resolve_model

        extra = getattr(getattr(self, "meta", None), "extra", None) or {}
        info, run_dir = extra.get("zero_shot"), getattr(self, "run_dir", None)
        if not info or run_dir is None or not (Path(run_dir) / info["head"]).is_file():
            return None
        try:
            base = resolve_model(str(extra.get("reader_base")))
        except ModelSpecError:  # the base moved or is not resolvable here: no variant (eval says so)
            return None
        reader = load_reader(base, "reader_base=", batch_size=self.reader.batch_size, head_optional=True)
        return UnitReaderRouter(reader, read_logistic(Path(run_dir) / info["head"]), info["pooling"],
                                info["text_weight"], text_scores=info.get("text_scores", "classifier"))

    def save(self, run_dir: str | Path, data: dict[str, Any], metrics: dict[str, Any],
             extra: dict[str, Any]) -> Path:
        """Reader weights, the head (signal_head.json), then the metadata with every weight file's digest."""
        run_dir = claim_output_dir(run_dir, "unit-reader", lock=False)  # the stage's claim, or a marker made now
        self.reader.save(run_dir)
        save_logistic(run_dir / SIGNAL_HEAD_FILE, self.head)
        extra = dict(extra)
        if "zero_shot_head" in extra:
            save_logistic(run_dir / ZERO_SHOT_HEAD_FILE, extra.pop("zero_shot_head"))
        self.meta = score_run_meta(self.kind, data, metrics, {
            **extra, "head": SIGNAL_HEAD_FILE, "pooling": self.pooling, "text_weight": self.text_weight,
            "text_scores": self.text_scores})
        self.run_dir = write_router_run(run_dir, self.meta)
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
                     extra.get("text_weight"), threshold_logit if threshold_logit is not None else calibrated,
                     str(extra.get("text_scores", "classifier")))
        router.run_dir, router.meta, router.name = run_dir, meta, f"{cls.kind}:{path}"
        return router
