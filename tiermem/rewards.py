"""The reward table: what a routing decision earns given both paths' correctness and the research path's tokens,
read by GRPO, SFT's expected-reward loss, calibrate and eval. Defaults are the paper authors' table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from tiermem import contract
from tiermem.settings.config import check_declared

CASES = (
    "answer_correct",
    "answer_wrong",
    "escalate_needed",
    "escalate_wasted",
    "escalate_research_wrong",
    "unparseable",
)


@dataclass
class RewardConfig:
    answer_correct: float = 1.0  # ANSWER and the summary path was right
    answer_wrong: float = -1.5  # ANSWER but the summary path was wrong
    escalate_needed: float = 1.0  # ESCALATE and only the research path was right
    escalate_both_right: float = 1.0  # ESCALATE when both were right, before waste and cost
    waste: float = field(default=0.4, metadata={"ge": 0})  # a penalty, for an escalation not needed
    escalate_research_wrong: float = -1.5  # ESCALATE but the research path was wrong
    unparseable: float = -1.0  # no action could be read (contract.parse -> ESCALATE, flagged)
    cost_weight: float = field(default=0.0, metadata={"ge": 0})  # cost = cost_weight * min(tokens / cost_scale, 1)
    # research input tokens that count as cost 1; None: the train split's max
    cost_scale: float | None = field(default=None, metadata={"gt": 0})
    cost_on: Literal["wasted", "every_escalation"] = "wasted"  # charge cost on wasted escalations, or every one
    # The format reward reads the action prefix only (`{"action": "ANSWER"` or ESCALATE), so it is the same for both
    # actions whatever the length limit (a whole-JSON reward would cut the longer ESCALATE targets: GRPO learns ANSWER).
    format_valid: float = 1.0
    format_invalid: float = 0.0

    def __post_init__(self) -> None:
        check_declared(self)


@dataclass(frozen=True)
class DecisionScore:
    total: float
    base: float  # the table's value before waste and cost
    waste: float  # amount subtracted (>= 0)
    cost: float  # amount subtracted (>= 0)
    case: str


def normalized_cost(tokens: float, scale: float | None) -> float:
    if not scale:
        return 0.0
    return min(max(float(tokens), 0.0) / scale, 1.0)


def score_decision(
    action: str | None, s_ok: bool, r_ok: bool, research_tokens: float, cfg: RewardConfig, scale: float | None
) -> DecisionScore:
    """The reward table. `action=None` means unparseable."""
    if action is None:
        return DecisionScore(cfg.unparseable, cfg.unparseable, 0.0, 0.0, "unparseable")
    if action == "ANSWER":
        if s_ok:
            return DecisionScore(cfg.answer_correct, cfg.answer_correct, 0.0, 0.0, "answer_correct")
        return DecisionScore(cfg.answer_wrong, cfg.answer_wrong, 0.0, 0.0, "answer_wrong")
    if action != "ESCALATE":
        raise ValueError(f"action must be one of {contract.ACTIONS} or None, got {action!r}")
    cost = cfg.cost_weight * normalized_cost(research_tokens, scale)
    if not r_ok:
        base, waste, case = cfg.escalate_research_wrong, 0.0, "escalate_research_wrong"
    elif s_ok:
        base, waste, case = cfg.escalate_both_right, cfg.waste, "escalate_wasted"
    else:
        base, waste, case = cfg.escalate_needed, 0.0, "escalate_needed"
    if case != "escalate_wasted" and cfg.cost_on == "wasted":
        cost = 0.0
    return DecisionScore(base - waste - cost, base, waste, cost, case)


def resolve_cost_scale(cfg: RewardConfig, train_tokens: Sequence[float]) -> float | None:
    """The configured scale, or the train split's largest research input-token count."""
    if cfg.cost_scale is not None:
        return cfg.cost_scale
    top = max((float(t) for t in train_tokens), default=0.0)
    return top if top > 0 else None
