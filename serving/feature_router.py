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
    open_run_dir,
    register,
    sigmoid,
)
from serving.signals import (  # noqa: F401  (the feature function's names, used through this module too)
    FEATURES,
    NO_SUMMARY_SCORE,
    LogisticModel,
    content_words,
    feature_matrix,
    features,
    fit_logistic,
    question_form,
    read_logistic,
    save_logistic,
    top1,
)
from tiermem import contract
from tiermem.artifacts import FEATURE_MODEL_FILE, RunMeta, file_digests, read_run_meta, write_run_meta
from tiermem.errors import stage_main

# ---- routers -------------------------------------------------------------------------------------


class _ScoreRouter(Router):
    """Shared parts: score -> decision, save/load of the run directory."""

    probabilistic: ClassVar[bool] = False  # True when sigmoid(score) is a fitted probability
    summary_fields: ClassVar[tuple[str, ...]] = ("score",)  # both read the retrieval scores
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

    def _write_meta(self, run_dir: Path, meta: RunMeta) -> None:
        """The metadata last, with the digest of every file just written (calibration keeps them)."""
        meta.files = file_digests(run_dir)
        write_run_meta(run_dir, meta)
        self.run_dir, self.meta = run_dir, meta

    @classmethod
    def _read(cls, path: str | Path) -> tuple[Path, RunMeta]:
        run_dir = Path(path).expanduser()
        meta = read_run_meta(run_dir)
        if meta.extra.get("router_kind") != cls.kind:
            raise RouterLoadError(f"{run_dir}: tiermem_router.json says router_kind "
                                  f"{meta.extra.get('router_kind')!r}, not {cls.kind!r}")
        return run_dir, open_run_dir(run_dir)


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
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        self._write_meta(Path(run_dir), self._meta(data or {}, {}, {}))
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
        save_logistic(run_dir / FEATURE_MODEL_FILE, self.model)
        self._write_meta(run_dir, self._meta(data or {}, metrics or {}, {"feature_model": FEATURE_MODEL_FILE}))
        return run_dir

    @classmethod
    def load(cls, path: str | Path, threshold: float | None = None) -> FeatureRouter:
        run_dir, meta = cls._read(path)
        model_path = run_dir / FEATURE_MODEL_FILE
        if not model_path.is_file():
            raise RouterLoadError(f"{model_path} not found: a features router directory needs its fitted model")
        try:
            model = read_logistic(model_path)
        except ValueError as exc:
            raise RouterLoadError(str(exc)) from None
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
