"""A router kind made the documented way (docs/DESIGN.md, "Adding a router kind"): one module, one registry line."""

from __future__ import annotations

from serving.routers.base import ScoreRouter, calibrated_threshold_logit, check_lengths
from serving.routers.score_run import open_score_run, score_run_meta, write_router_run
from tiermem.runs.rundir import claimed_output_dir


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
        # A router directory is made by a router stage (tiermem/runs/rundir.py ROUTER_STAGES); fit-features makes the
        # kinds without a language model, so calibrate may store a threshold in it.
        with claimed_output_dir(run_dir, "fit-features") as out:
            return write_router_run(out, score_run_meta(self.kind, {}, {}, {}))
