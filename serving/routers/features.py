"""A logistic regression on serve-time signals (serving.signals): what a CPU user may prefer to an LM. Fitted by
router_train/fit_features.py."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from serving.routers.base import ScoreRouter, Summaries, check_lengths
from serving.routers.score_run import load_score_router, score_run_meta, write_router_run
from serving.signals import FEATURES, feature_matrix
from tiermem.models.logistic import LogisticModel, read_logistic, save_logistic
from tiermem.runs.run_meta import FEATURE_MODEL_FILE
from tiermem.runs.rundir import claim_output_dir
from tiermem.settings.errors import RouterLoadError


class FeatureRouter(ScoreRouter):
    kind = "features"
    probabilistic = True
    summary_fields = ("score",)  # the signals read the retrieval scores

    def __init__(self, model: LogisticModel, threshold_logit: float | None = None) -> None:
        if list(model.feature_names) != list(FEATURES):
            raise RouterLoadError(f"features router: saved features {model.feature_names} differ from this "
                                  f"version's {list(FEATURES)}; refit with `tiermem-router fit-features`")
        self.model = model
        super().__init__(threshold_logit)

    def score(self, questions: Sequence[str], summaries: Sequence[Summaries]) -> list[float]:
        check_lengths(questions, summaries)
        return self.scored(questions, summaries)[0]

    def scored(self, questions, summaries):  # lengths checked by `score` and `route_batch`
        if not len(questions):
            return [], None, []
        x = feature_matrix(questions, summaries)
        return self.model.log_odds(x).tolist(), None, self.model.clipped_features(x)

    def save(self, run_dir: str | Path, data: dict[str, Any] | None = None,
             metrics: dict[str, Any] | None = None, extra: dict[str, Any] | None = None) -> Path:
        run_dir = claim_output_dir(run_dir, "fit-features", lock=False)  # the stage's claim, or a marker made now
        save_logistic(run_dir / FEATURE_MODEL_FILE, self.model)
        self.meta = score_run_meta(self.kind, data or {}, metrics or {},
                                   {**(extra or {}), "feature_model": FEATURE_MODEL_FILE})
        self.run_dir = write_router_run(run_dir, self.meta)
        return self.run_dir

    @classmethod
    def load(cls, path: str | Path, threshold_logit: float | None = None) -> FeatureRouter:
        return load_score_router(cls, path, threshold_logit, _read_model)


def _read_model(run_dir: Path) -> tuple[LogisticModel]:
    model_path = run_dir / FEATURE_MODEL_FILE
    if not model_path.is_file():
        raise RouterLoadError(f"{model_path} not found: a features router directory needs its fitted model")
    return (read_logistic(model_path),)
