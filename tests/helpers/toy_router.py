"""A router kind made the documented way (docs/DESIGN.md, "Adding a router kind"): one module, one registry line."""

from __future__ import annotations

from serving.routers.base import ScoreRouter, calibrated_threshold_logit, check_lengths
from serving.routers.score_run import open_score_run, score_run_meta, write_score_run


class WordCountRouter(ScoreRouter):
    """Escalate long questions: score = words in the question - 6 (log-odds in spirit, a toy in truth)."""

    kind = "word-count"

    @classmethod
    def from_spec(cls, spec, trunk_cache=None):
        if not spec.path:
            return cls(spec.threshold_logit)
        run_dir, meta = open_score_run(spec.path, cls.kind)  # a saved one: calibrate stores its threshold there
        router = cls(spec.threshold_logit if spec.threshold_logit is not None else calibrated_threshold_logit(meta))
        router.meta, router.name = meta, f"{cls.kind}:{spec.path}"
        return router

    def score(self, questions, summaries):
        check_lengths(questions, summaries)
        return [len(q.split()) - 6.0 for q in questions]

    def save(self, run_dir):
        return write_score_run(run_dir, score_run_meta(self.kind, {}, {}, {}))
