"""Fixed policies: the two ends every routing result is compared against (summary-only and raw-only)."""

from __future__ import annotations

from typing import ClassVar

from serving.routers.base import Decision, Router, check_lengths


class _FixedRouter(Router):
    action: ClassVar[str]

    @classmethod
    def from_spec(cls, spec, trunk_cache=None):
        router = cls()
        router.name = cls.kind
        return router

    def route_batch(self, questions, summaries, threshold_logit=None):
        check_lengths(questions, summaries)
        p = 1.0 if self.action == "ESCALATE" else 0.0
        return [Decision(self.action, p, f"fixed policy: always {self.action}", True, 0.0, 0) for _ in questions]


class AlwaysAnswer(_FixedRouter):
    kind = "always-answer"
    action = "ANSWER"


class AlwaysEscalate(_FixedRouter):
    kind = "always-escalate"
    action = "ESCALATE"
