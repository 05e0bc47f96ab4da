"""A chat LLM prompted with the contract's messages (OpenAI, vLLM, local): the labeler's teacher as a router."""

from __future__ import annotations

from typing import Any

from serving.routers.base import Router, check_lengths, decision_from_text, error_decision
from tiermem import contract


class TeacherRouter(Router):
    kind = "teacher"
    spec_fields = ("llm", "max_tokens")

    def __init__(self, llm: Any, max_tokens: int = 128) -> None:
        self.llm = llm
        self.max_tokens = max_tokens
        self.name = f"llm-prompt:{getattr(llm, 'name', type(llm).__name__)}"

    @classmethod
    def from_spec(cls, spec, trunk_cache=None):
        from tiermem.llm import build_llm

        return cls(build_llm(spec.llm), max_tokens=spec.max_tokens)

    def route_batch(self, questions, summaries, threshold_logit=None):
        check_lengths(questions, summaries)
        batch = [contract.render_messages(q, s) for q, s in zip(questions, summaries, strict=True)]
        results = self.llm.chat_many(batch, max_tokens=self.max_tokens, temperature=0.0)
        return [error_decision(res, 0.0) if isinstance(res, BaseException)
                else decision_from_text(res.text, res.latency_s, res.input_tokens) for res in results]
