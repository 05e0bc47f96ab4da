"""Escalate when the top-1 retrieval score of the summaries is below a cutoff. The score is `-top1` (higher =
escalate), so the shared rule `score >= threshold_logit` holds with threshold_logit = -cutoff."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from serving.routers.base import ScoreRouter, Summaries, check_lengths
from serving.routers.score_run import load_score_router, score_run_meta, write_router_run
from serving.signals import top1
from tiermem.runs.rundir import claim_output_dir


class Top1ScoreRouter(ScoreRouter):
    kind = "top1-score"
    summary_fields = ("score",)

    @classmethod
    def from_spec(cls, spec, trunk_cache=None):
        if not spec.path:
            return cls(threshold_logit=spec.threshold_logit)
        return cls.load(spec.path, threshold_logit=spec.threshold_logit)

    def score(self, questions: Sequence[str], summaries: Sequence[Summaries]) -> list[float]:
        check_lengths(questions, summaries)
        return [-top1(s, f"question {i}: summaries") for i, s in enumerate(summaries)]

    def save(self, run_dir: str | Path, data: dict[str, Any] | None = None,
             metrics: dict[str, Any] | None = None) -> Path:
        claim_output_dir(run_dir, "fit-features", lock=False)  # the stage's own claim, or a marker made for it now
        self.meta = score_run_meta(self.kind, data or {}, metrics or {}, {})
        self.run_dir = write_router_run(run_dir, self.meta)
        return self.run_dir

    @classmethod
    def load(cls, path: str | Path, threshold_logit: float | None = None) -> Top1ScoreRouter:
        return load_score_router(cls, path, threshold_logit)
