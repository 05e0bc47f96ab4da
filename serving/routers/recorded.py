"""The teacher's recorded decisions as a router, read from a judgments file: the score is the log-odds of its
confidence (0.5 + 0.09 c); units no decision was recorded for escalate and are counted as errors."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from serving.routers.base import Decision, ScoreRouter, Summaries, check_lengths, decide
from tiermem import contract
from tiermem.settings.errors import UsageError

UNRECORDED_SCORE = 1.0e9  # above any recorded decision's log-odds: an unrecorded question escalates


class RecordedTeacherRouter(ScoreRouter):
    kind = "recorded-teacher"

    def __init__(self, judgments: Any, threshold_logit: float | None = None) -> None:
        super().__init__(threshold_logit)
        self.judgments = judgments
        self.unrecorded = 0  # questions routed without a recorded decision (ESCALATE, flagged)

    @classmethod
    def check_spec(cls, spec: Any) -> None:
        if not spec.path or not Path(spec.path).is_file():
            raise UsageError(f"router.path must name a judgments file (tiermem-judgments .jsonl) for the "
                             f"{cls.kind} router, got {spec.path!r}")

    @classmethod
    def from_spec(cls, spec: Any, trunk_cache: dict[str, Any] | None = None) -> RecordedTeacherRouter:
        from labeling.judgments.format import load_judgments

        router = cls(load_judgments(spec.path), spec.threshold_logit)
        router.name = f"{cls.kind}:{Path(spec.path).name}"
        return router

    def _decision(self, question: str, units: Summaries) -> Any:
        judged = self.judgments.lookup(question, [contract.as_view(u).text for u in units])
        return None if judged is None else judged.teacher

    def _score(self, decision: Any) -> float:
        return UNRECORDED_SCORE if decision is None else math.log(decision.p_escalate() / (1 - decision.p_escalate()))

    def score(self, questions: Sequence[str], summaries: Sequence[Summaries]) -> list[float]:
        check_lengths(questions, summaries)
        return [self._score(self._decision(q, units)) for q, units in zip(questions, summaries, strict=True)]

    def route_batch(self, questions, summaries, threshold_logit=None):
        check_lengths(questions, summaries)
        t = self._threshold_logit(threshold_logit)
        return [self._route_one(q, units, t) for q, units in zip(questions, summaries, strict=True)]

    def _route_one(self, question: str, units: Summaries, t: float) -> Decision:
        started = time.perf_counter()
        d = self._decision(question, units)  # looked up once per question: its score and its decision
        s = self._score(d)
        dt = time.perf_counter() - started  # a lookup: measured as every router's time is, reads no tokens
        if d is None:
            self.unrecorded += 1
            return Decision(contract.ACTIONS[1], 1.0, "no recorded decision for these units", False, dt, 0,
                            error="no recorded teacher decision for this question over these units", score=s)
        return Decision(decide(s, t), d.p_escalate(), d.thinking, True, dt, 0, score=s)
