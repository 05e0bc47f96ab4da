"""Teacher (optional LLM role) and SFT targets: the teacher's output is the target only when its action agrees with
the label; else a templated rationale from the router's point of view, never naming the gold answer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tiermem import contract


@dataclass
class TeacherOutput:
    text: str
    action: str
    reason: str
    parsed_ok: bool
    valid_json: bool
    confidence: int | None = None  # 1..5 where the teacher said how sure it was (a recorded decision)
    source: str = "llm"  # "llm" (asked in this run) | "tiermem-judgments" (a recorded decision, labeling/judgments/)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ask_teacher(llm: Any, question: str, summaries: Sequence[Any], max_tokens: int = 128) -> TeacherOutput:
    """One teacher call; LLMError propagates (the caller records it, it is never a decision)."""
    result = llm.chat(contract.render_messages(question, summaries), max_tokens=max_tokens, temperature=0.0)
    parsed = contract.parse(result.text)
    return TeacherOutput(result.text, parsed.action, parsed.reason, parsed.parsed_ok, parsed.valid_json)


def recorded_teacher(decision: Any) -> TeacherOutput:
    """A teacher decision recorded in a judgments file, shaped as a live teacher's output (thinking: the reason)."""
    from labeling.judgments.format import FORMAT

    text = contract.render_target(decision.action, decision.thinking)
    return TeacherOutput(text, decision.action, decision.thinking, parsed_ok=True, valid_json=True,
                         confidence=decision.confidence, source=FORMAT)


def templated_rationale(label: str, answer_recall: float | None, sufficiency: dict[str, Any] | None) -> str:
    """A label-consistent reason: the sufficiency judge's reason when it agrees, else a template."""
    if sufficiency and sufficiency.get("parsed_ok") and sufficiency.get("reason"):
        if bool(sufficiency.get("sufficient")) == (label == contract.ACTIONS[0]):
            return str(sufficiency["reason"])
    if label == "ANSWER":
        return "A retrieved summary states the answer directly and completely."
    if answer_recall:
        return "The summaries mention related facts but not the exact details the question asks for."
    return "No retrieved summary states the answer; the raw conversation is needed."


@dataclass
class SFTTarget:
    target: str | None
    source: str | None  # "teacher" | "template" | None (no label)
    teacher_agrees: bool | None  # None when there was no usable teacher output or no label


def sft_target(
    label: str | None,
    teacher: TeacherOutput | None,
    answer_recall: float | None,
    sufficiency: dict[str, Any] | None,
) -> SFTTarget:
    if label is None:
        return SFTTarget(None, None, None)
    agrees = None if teacher is None else (teacher.parsed_ok and teacher.action == label)
    if teacher is not None and agrees and teacher.reason.strip():
        return SFTTarget(contract.render_target(label, teacher.reason), "teacher", True)
    return SFTTarget(contract.render_target(label, templated_rationale(label, answer_recall, sufficiency)),
                     "template", agrees)
