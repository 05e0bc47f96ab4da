"""Hindsight label rules: from per-path correctness to ANSWER / ESCALATE / dropped.

Both rules apply the same decision; they differ in where "path correct" comes from:
- `outcome` (the paper's): the judged answers (every enabled judge must say CORRECT).
- `evidence`: the generator-free evidence signals (labeling.evidence).
ANSWER if the summary path is correct; ESCALATE if it is not and the research path is; otherwise the question
is dropped (kept in the records with label None and the reason), as are questions with an error or an unknown
path verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

RULES = ("outcome", "evidence")
ANSWER, ESCALATE = "ANSWER", "ESCALATE"


@dataclass(frozen=True)
class LabelDecision:
    label: str | None
    drop_reason: str | None


def decide(s_ok: bool | None, r_ok: bool | None) -> LabelDecision:
    if s_ok is True:
        return LabelDecision(ANSWER, None)
    if s_ok is None:
        return LabelDecision(None, "summary path not judged")
    if r_ok is True:
        return LabelDecision(ESCALATE, None)
    if r_ok is None:
        return LabelDecision(None, "summary path wrong, research path not judged")
    return LabelDecision(None, "both paths wrong")


def check_rule(rule: str) -> str:
    if rule not in RULES:
        raise ValueError(f"label_rule must be one of {RULES}, got {rule!r}")
    return rule
