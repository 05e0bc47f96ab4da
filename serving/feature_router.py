"""Serve-time baseline routers that need no language model: what a CPU user may prefer.

- `top1-score`: escalate when the top-1 retrieval score of the summaries is below a threshold. Its score is
  `-top1` (higher = escalate), so the shared decision rule `score >= threshold` holds with threshold = -cutoff.
- `features`: a logistic regression (numpy, L2-regularized, Newton's method) on features known at serving time:
  retrieval scores (top-1, mean, top-1 minus top-2), lexical overlap of the question's content words with the
  summaries, the question's form (when / how many / list-like / yes-no / why), summary count, question length.
  Its score is the model's log-odds of ESCALATE.

Both save to a run directory holding tiermem_router.json (RunMeta with adapter=False and `router_kind`) plus,
for `features`, `feature_model.json` (weights, standardization, feature names), so calibration stores their
threshold in the same place as an LM router's, and `serving.router.load_router(dir)` / `Router.from_pretrained`
load them. `tiermem-router fit-features` fits (or, for top1-score, just creates) such a directory.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from serving.router import (
    DEFAULT_THRESHOLD,
    Decision,
    Router,
    RouterLoadError,
    Summaries,
    _check_lengths,
    calibrated_threshold,
    register,
    sigmoid,
)
from tiermem import contract
from tiermem.artifacts import RunMeta, read_run_meta, write_run_meta
from tiermem.errors import stage_main

FEATURE_MODEL_FILE = "feature_model.json"
NO_SUMMARY_SCORE = -1.0  # top-1 score when nothing was retrieved: the floor of a cosine similarity

# Small built-in list (no corpus download): function words that carry no content to look up.
STOPWORDS = frozenset("""
a an the and or but if of to in on at by for with from about as into over after before between during than then
is are was were be been being am do does did done doing have has had having will would shall should can could may
might must i me my mine we us our you your he him his she her it its they them their this that these those there
here what when where which who whom whose why how all any some no not only own same so too very just also ever
s t don doesn didn isn wasn weren aren hasn haven hadn won wouldn ll re ve d m o y many much one ones thing things
""".split())
_WORD = re.compile(r"[a-z0-9]+")
YES_NO_STARTS = ("is", "are", "was", "were", "do", "does", "did", "has", "have", "had", "can", "could", "will",
                 "would", "should", "shall", "may", "might")
FEATURES = ("top1", "mean_score", "gap12", "overlap", "overlap_best", "n_summaries", "q_words", "when",
            "how_many", "list_like", "yes_no", "why", "has_date")


def _text(unit: Any) -> str:
    return str(unit.get("text", "") if isinstance(unit, dict) else getattr(unit, "text", "") or "")


def _score_of(unit: Any) -> float | None:
    value = unit.get("score") if isinstance(unit, dict) else getattr(unit, "score", None)
    return None if value is None else float(value)


def _date(unit: Any) -> Any:
    return unit.get("date") if isinstance(unit, dict) else getattr(unit, "date", None)


def content_words(text: str) -> set[str]:
    """Lower-cased content words with a crude plural strip, so 'dogs' matches 'dog'."""
    out = set()
    for w in _WORD.findall(text.lower()):
        if w in STOPWORDS:
            continue
        out.add(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w)
    return out


def retrieval_scores(summaries: Summaries, where: str = "summaries") -> list[float]:
    scores = []
    for i, unit in enumerate(summaries):
        s = _score_of(unit)
        if s is None or not math.isfinite(s):
            raise ValueError(f"{where}[{i}]: retrieval 'score' missing or not a number (needed by score routers)")
        scores.append(s)
    return scores


def top1(summaries: Summaries, where: str = "summaries") -> float:
    """The top-1 retrieval score (the first unit is the best: retrieval returns them in rank order)."""
    scores = retrieval_scores(summaries, where)
    return max(scores) if scores else NO_SUMMARY_SCORE


def question_form(question: str) -> dict[str, float]:
    q = question.lower().strip()
    words = _WORD.findall(q)
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


def features(question: str, summaries: Summaries, where: str = "record") -> dict[str, float]:
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
        "q_words": math.log1p(len(_WORD.findall(question.lower()))),
        "has_date": float(any(_date(u) for u in summaries)),
    }
    out.update(question_form(question))
    return {name: float(out[name]) for name in FEATURES}


def feature_matrix(questions: Sequence[str], summaries: Sequence[Summaries]) -> np.ndarray:
    _check_lengths(questions, summaries)
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

    def log_odds(self, x: np.ndarray) -> np.ndarray:
        z = (x - np.asarray(self.mean)) / np.asarray(self.scale)
        return z @ np.asarray(self.weights, dtype=np.float64) + self.bias


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
        raise ValueError("fit_logistic: the training rows hold one class only; cannot fit a router")
    if class_weight not in ("balanced", "none"):
        raise ValueError(f"class_weight must be balanced or none, got {class_weight!r}")
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
        p = 1.0 / (1.0 + np.exp(-(z @ beta)))
        grad = z.T @ (sw * (p - y)) + penalty * beta
        hess = (z * (sw * p * (1 - p))[:, None]).T @ z + np.diag(penalty) + 1e-9 * np.eye(z.shape[1])
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return LogisticModel(list(feature_names), mean.tolist(), scale.tolist(), beta[:-1].tolist(), float(beta[-1]),
                         l2, class_weight, len(y), float(n_pos / len(y)))


# ---- routers -------------------------------------------------------------------------------------


class _ScoreRouter(Router):
    """Shared parts: score -> decision, save/load of the run directory."""

    probabilistic: ClassVar[bool] = False  # True when sigmoid(score) is a fitted probability
    run_dir: Path | None = None
    meta: RunMeta | None = None

    def route_batch(self, questions, summaries, threshold=None):
        _check_lengths(questions, summaries)
        t = self._threshold(threshold)
        started = time.perf_counter()
        scores = self.score(questions, summaries)
        dt = (time.perf_counter() - started) / max(len(scores), 1)
        return [Decision("ESCALATE" if s >= t else "ANSWER", sigmoid(s) if self.probabilistic else None,
                         f"{self.kind} score {s:.3f} vs threshold {t:.3f}", True, dt, 0, score=s) for s in scores]

    def _meta(self, data: dict[str, Any], metrics: dict[str, Any], extra: dict[str, Any]) -> RunMeta:
        return RunMeta(contract_version=contract.CONTRACT_VERSION, base_model=f"none ({self.kind}: no language model)",
                       stage=self.kind, adapter=False, training={}, data=data, metrics=metrics,
                       extra={"router_kind": self.kind, **extra})

    @classmethod
    def _read(cls, path: str | Path) -> tuple[Path, RunMeta]:
        run_dir = Path(path).expanduser()
        meta = read_run_meta(run_dir)
        if meta.extra.get("router_kind") != cls.kind:
            raise RouterLoadError(f"{run_dir}: tiermem_router.json says router_kind "
                                  f"{meta.extra.get('router_kind')!r}, not {cls.kind!r}")
        return run_dir, meta


@register("top1-score")
class Top1ScoreRouter(_ScoreRouter):
    """Escalate when the top-1 retrieval score is below a cutoff; score = -top1 (threshold = -cutoff)."""

    def __init__(self, threshold: float | None = None, path: str | None = None, **_: Any) -> None:
        if path is not None:
            loaded = type(self).load(path, threshold=threshold)
            self.__dict__.update(loaded.__dict__)
            return
        self.threshold = DEFAULT_THRESHOLD if threshold is None else float(threshold)

    def score(self, questions: Sequence[str], summaries: Sequence[Summaries]) -> list[float]:
        _check_lengths(questions, summaries)
        return [-top1(s, f"question {i}: summaries") for i, s in enumerate(summaries)]

    def save(self, run_dir: str | Path, data: dict[str, Any] | None = None) -> Path:
        meta = self._meta(data or {}, {}, {})
        write_run_meta(run_dir, meta)
        self.run_dir, self.meta = Path(run_dir), meta
        return Path(run_dir)

    @classmethod
    def load(cls, path: str | Path, threshold: float | None = None) -> Top1ScoreRouter:
        run_dir, meta = cls._read(path)
        calibrated = calibrated_threshold(meta.calibration)
        router = cls(threshold=threshold if threshold is not None else calibrated)
        router.run_dir, router.meta = run_dir, meta
        return router


@register("features")
class FeatureRouter(_ScoreRouter):
    """Logistic regression on serve-time features; score = its log-odds of ESCALATE."""

    probabilistic = True

    def __init__(self, model: LogisticModel | None = None, threshold: float | None = None, path: str | None = None,
                 **_: Any) -> None:
        if path is not None:
            loaded = type(self).load(path, threshold=threshold)
            self.__dict__.update(loaded.__dict__)
            return
        if model is None:
            raise ValueError("features router: give a fitted model or path= to a fit-features directory")
        if list(model.feature_names) != list(FEATURES):
            raise RouterLoadError(f"features router: saved features {model.feature_names} differ from this "
                                  f"version's {list(FEATURES)}; refit with `tiermem-router fit-features`")
        self.model = model
        self.threshold = DEFAULT_THRESHOLD if threshold is None else float(threshold)

    def score(self, questions: Sequence[str], summaries: Sequence[Summaries]) -> list[float]:
        if not len(questions):
            _check_lengths(questions, summaries)
            return []
        return self.model.log_odds(feature_matrix(questions, summaries)).tolist()

    def save(self, run_dir: str | Path, data: dict[str, Any] | None = None,
             metrics: dict[str, Any] | None = None) -> Path:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / FEATURE_MODEL_FILE).write_text(json.dumps(asdict(self.model), indent=2) + "\n")
        meta = self._meta(data or {}, metrics or {}, {"feature_model": FEATURE_MODEL_FILE})
        write_run_meta(run_dir, meta)
        self.run_dir, self.meta = run_dir, meta
        return run_dir

    @classmethod
    def load(cls, path: str | Path, threshold: float | None = None) -> FeatureRouter:
        run_dir, meta = cls._read(path)
        model_path = run_dir / FEATURE_MODEL_FILE
        if not model_path.is_file():
            raise RouterLoadError(f"{model_path} not found: a features router directory needs its fitted model")
        try:
            model = LogisticModel(**json.loads(model_path.read_text()))
        except (json.JSONDecodeError, TypeError) as exc:
            raise RouterLoadError(f"{model_path}: not a fitted feature model: {exc}") from None
        calibrated = calibrated_threshold(meta.calibration)
        router = cls(model, threshold=threshold if threshold is not None else calibrated)
        router.run_dir, router.meta = run_dir, meta
        return router


# ---- `tiermem-router fit-features` --------------------------------------------------------------------------


@dataclass
class FitFeaturesConfig:
    kind: str = "features"  # features (fit a logistic regression) | top1-score (no fitting; a directory to calibrate)
    data: str = "runs/label/dataset"  # label DatasetDict or JSONL
    split: str = "train"
    output_dir: str = "runs/features"
    l2: float = 1.0
    class_weight: str = "balanced"  # balanced | none
    eval_splits: list[str] = field(default_factory=lambda: ["validation"])  # AUROC reported in the metrics

    def __post_init__(self) -> None:
        if self.kind not in ("features", "top1-score"):
            raise ValueError(f"kind must be features or top1-score, got {self.kind!r}")
        if self.l2 < 0:
            raise ValueError(f"l2 must be >= 0, got {self.l2}")


def labeled_rows(data: str, split: str) -> list[dict[str, Any]]:
    from labeling.dataset import load_split

    rows = [r for r in load_split(data, split) if r.get("label") in contract.ACTIONS and not r.get("error")]
    for i, r in enumerate(rows):
        for key in ("question", "router_summaries"):
            if key not in r:
                raise ValueError(f"{data} [{split}] labeled record {i} (qid={r.get('qid')!r}): missing field {key!r}")
    return rows


def fit(cfg: FitFeaturesConfig) -> dict[str, Any]:
    from tiermem.rundir import claimed_output_dir

    # Both kinds write tiermem_router.json: claimed before the data loads, so no other stage's run is replaced.
    with claimed_output_dir(cfg.output_dir, "fit-features"):
        return _fit(cfg)


def _fit(cfg: FitFeaturesConfig) -> dict[str, Any]:
    from tiermem.stats import auroc

    data = {"dataset": cfg.data, "split": cfg.split}
    if cfg.kind == "top1-score":
        router: _ScoreRouter = Top1ScoreRouter()
        rows = []
    else:
        rows = labeled_rows(cfg.data, cfg.split)
        if not rows:
            raise ValueError(f"{cfg.data} [{cfg.split}]: no labeled records to fit the features router on")
        x = feature_matrix([r["question"] for r in rows], [r["router_summaries"] for r in rows])
        y = np.array([r["label"] == "ESCALATE" for r in rows], dtype=np.float64)
        router = FeatureRouter(fit_logistic(x, y, cfg.l2, cfg.class_weight))
        data["train_records"] = len(rows)
    metrics: dict[str, Any] = {}
    for split in [cfg.split, *cfg.eval_splits] if rows else cfg.eval_splits:
        try:
            eval_rows = rows if split == cfg.split else labeled_rows(cfg.data, split)
        except Exception as exc:  # a missing split is reported, not fatal: fitting needs only train
            metrics[split] = {"error": str(exc)}
            continue
        if not eval_rows:
            continue
        s = router.score([r["question"] for r in eval_rows], [r["router_summaries"] for r in eval_rows])
        labels = [r["label"] == "ESCALATE" for r in eval_rows]
        metrics[split] = {"n": len(eval_rows), "auroc": auroc(s, labels) if 0 < sum(labels) < len(labels) else None}
    if isinstance(router, FeatureRouter):
        router.save(cfg.output_dir, data=data, metrics=metrics)
        weights = dict(zip(FEATURES, router.model.weights, strict=True))
    else:
        router.save(cfg.output_dir, data=data)
        router.meta.metrics = metrics  # type: ignore[union-attr]
        write_run_meta(cfg.output_dir, router.meta)  # type: ignore[arg-type]
        weights = {}
    return {"output_dir": cfg.output_dir, "kind": cfg.kind, "metrics": metrics, "weights": weights}


@stage_main("fit-features")
def main(argv: list[str]) -> int:
    from tiermem.config import parse_cli

    cfg = parse_cli(FitFeaturesConfig, argv, default_config=None)
    result = fit(cfg)
    print(json.dumps({"config": asdict(cfg), **result}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
