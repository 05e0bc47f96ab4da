"""`tiermem-router fit-features`: fit the features router, or make a top1-score directory calibrate can fill."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from serving.routers.features import FeatureRouter
from serving.routers.top1 import Top1ScoreRouter
from serving.signals import FEATURES, feature_matrix
from tiermem import contract
from tiermem.models.logistic import fit_logistic
from tiermem.settings.config import ConfigError, check_declared, json_stage
from tiermem.settings.errors import DataError


@dataclass
class FitFeaturesConfig:
    # features (fit a logistic regression) | top1-score (no fitting; a directory to calibrate)
    kind: Literal["features", "top1-score"] = "features"
    data: str | list[str] = "runs/label/dataset"  # label DatasetDict or JSONL; several: [a, b], pooled
    split: str = "train"
    output_dir: str = "runs/features"
    l2: float = field(default=1.0, metadata={"ge": 0})
    class_weight: Literal["balanced", "none"] = "balanced"  # balanced | none
    eval_splits: list[str] = field(default_factory=lambda: ["validation"])  # AUROC reported in the metrics
    # kind features: every question of these splits scored by a model fitted on the other conversations
    # (oof_scores.json: what calibrate and the demo's main-router choice read); [] = none
    cv_splits: list[str] = field(default_factory=lambda: ["train", "validation"])

    def __post_init__(self) -> None:
        from labeling.dataset import data_paths

        data_paths(self.data)
        check_declared(self)


def labeled_rows(data: str, split: str) -> list[dict[str, Any]]:
    from labeling.dataset import load_split

    rows = [r for r in load_split(data, split) if r.get("label") in contract.ACTIONS and not r.get("error")]
    for i, r in enumerate(rows):
        for key in ("question", "router_summaries"):
            if key not in r:
                raise DataError(f"{data} [{split}] labeled record {i} (qid={r.get('qid')!r}): missing field {key!r}")
    return rows


def out_of_fold(cfg: FitFeaturesConfig) -> dict[str, Any] | None:
    """oof_scores.json: each cv_splits conversation scored by a model fitted on the others. None, said why, when a
    fold has nothing to fit (a split missing, or one label only): calibrate then scores its split."""
    from labeling.dataset import load_split
    from tiermem.runs.oof_scores import loco, write_oof_scores

    try:
        records = [r for s in cfg.cv_splits for r in load_split(cfg.data, s)
                   if not r.get("augmentation") and not r.get("error")]
    except ConfigError as exc:
        print(f"fit-features: no out-of-fold scores ({exc})")
        return None
    labels = [(str(r["conv_id"]), r.get("label")) for r in records if r.get("label") in contract.ACTIONS]
    for conv in sorted({c for c, _ in labels}):
        if len({lab for c, lab in labels if c != conv}) < 2:
            print(f"fit-features: no out-of-fold scores (without conversation {conv!r} the {cfg.cv_splits} records "
                  "hold one label or none)")
            return None
    x = feature_matrix([r["question"] for r in records], [r["router_summaries"] for r in records])
    y = np.array([r.get("label") == "ESCALATE" for r in records], dtype=np.float64)

    def score_held(fit_on: np.ndarray, held: np.ndarray) -> np.ndarray:
        return fit_logistic(x[fit_on], y[fit_on], FEATURES, cfg.l2, cfg.class_weight).log_odds(x[held])

    return write_oof_scores(cfg.output_dir, records, loco(records, score_held), {
        "dataset": cfg.data, "splits": list(cfg.cv_splits), "settings": {"l2": cfg.l2, "class_weight":
                                                                          cfg.class_weight},
        "method": "leave-one-conversation-out: the logistic regression fitted on the other conversations"})


def fit(cfg: FitFeaturesConfig) -> dict[str, Any]:
    from tiermem.runs.rundir import claimed_output_dir

    # Both kinds write tiermem_router.json: claimed before the data loads, so no other stage's run is replaced.
    with claimed_output_dir(cfg.output_dir, "fit-features"):
        return _fit(cfg)


def _fit(cfg: FitFeaturesConfig) -> dict[str, Any]:
    from tiermem.stats import auroc

    data = {"dataset": cfg.data, "split": cfg.split}
    if cfg.kind == "top1-score":
        router: FeatureRouter | Top1ScoreRouter = Top1ScoreRouter()
        rows = []
    else:
        rows = labeled_rows(cfg.data, cfg.split)
        if not rows:
            raise DataError(f"{cfg.data} [{cfg.split}]: no labeled records to fit the features router on")
        x = feature_matrix([r["question"] for r in rows], [r["router_summaries"] for r in rows])
        y = np.array([r["label"] == "ESCALATE" for r in rows], dtype=np.float64)
        router = FeatureRouter(fit_logistic(x, y, FEATURES, cfg.l2, cfg.class_weight))
        data["train_records"] = len(rows)
    metrics: dict[str, Any] = {}
    for split in [cfg.split, *cfg.eval_splits] if rows else cfg.eval_splits:
        try:
            eval_rows = rows if split == cfg.split else labeled_rows(cfg.data, split)
        except ConfigError as exc:  # a missing split is reported, not fatal: fitting needs only train
            metrics[split] = {"error": str(exc)}
            continue
        if not eval_rows:
            continue
        s = router.score([r["question"] for r in eval_rows], [r["router_summaries"] for r in eval_rows])
        labels = [r["label"] == "ESCALATE" for r in eval_rows]
        metrics[split] = {"n": len(eval_rows), "auroc": auroc(s, labels) if 0 < sum(labels) < len(labels) else None}
    if isinstance(router, FeatureRouter):
        oof = out_of_fold(cfg) if cfg.cv_splits else None
        router.save(cfg.output_dir, data=data, metrics=metrics, extra={"oof_scores": oof} if oof else None)
    else:
        router.save(cfg.output_dir, data=data, metrics=metrics)
    weights = dict(zip(FEATURES, router.model.weights, strict=True)) if isinstance(router, FeatureRouter) else {}
    return {"output_dir": cfg.output_dir, "kind": cfg.kind, "metrics": metrics, "weights": weights}


main = json_stage("fit-features", FitFeaturesConfig, fit)


if __name__ == "__main__":
    raise SystemExit(main())
