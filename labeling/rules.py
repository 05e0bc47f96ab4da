"""Hindsight label rules, from per-path correctness to ANSWER / ESCALATE / dropped: `outcome` (the judged answers)
and `evidence` (the generator-free signals) apply the same decision."""

from __future__ import annotations

from dataclasses import dataclass

from tiermem.settings.errors import ConfigError

RULES = ("outcome", "evidence")
ANSWER, ESCALATE = "ANSWER", "ESCALATE"
# How each rule decides that a path was right, worded for the model and dataset cards.
LABEL_RULE_TEXT = {
    "outcome": "the judged answers: a path is right when every enabled judge (LoCoMo token F1 >= threshold, plus "
               "an LLM judge when configured) says CORRECT",
    "evidence": "generator-free evidence signals: the summary path is right when the retrieved summaries recall the "
                "gold answer (or link every gold evidence turn), the research path when the pages it read hold "
                "every gold evidence turn",
}


@dataclass(frozen=True)
class LabelDecision:
    label: str | None
    drop_reason: str | None
    vetoed: bool = False  # the path signals said ANSWER, the strict sufficiency judge disagreed


def decide(s_ok: bool | None, r_ok: bool | None, sufficient: bool | None = None) -> LabelDecision:
    """`sufficient` is the strict sufficiency judge's verdict (None: not run). ANSWER needs it not to be False:
    a false ANSWER label teaches the router the costly error (a false cache hit), so the judge can only veto."""
    if s_ok is True and sufficient is not False:
        return LabelDecision(ANSWER, None)
    vetoed = s_ok is True
    if s_ok is None:
        return LabelDecision(None, "summary path not judged")
    if r_ok is True:
        return LabelDecision(ESCALATE, None, vetoed)
    if r_ok is None:
        return LabelDecision(None, "sufficiency judge vetoed ANSWER, research path not judged" if vetoed
                             else "summary path wrong, research path not judged", vetoed)
    return LabelDecision(None, "sufficiency judge vetoed ANSWER, research path wrong" if vetoed
                         else "both paths wrong", vetoed)


def check_rule(rule: str) -> str:
    if rule not in RULES:
        raise ConfigError(f"label_rule must be one of {RULES}, got {rule!r}")
    return rule
