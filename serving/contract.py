"""The router contract: the one place that defines the router's prompt, output schema and parser.

Labeling (teacher), SFT, GRPO, evaluation and serving all render and parse through this module, so a
prompt seen at training time is byte-identical to the one seen at serving time. Any change to the
rendered text must bump CONTRACT_VERSION (the golden tests in tests/test_contract.py pin it); the
version is saved with every checkpoint and checked when a router is loaded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CONTRACT_VERSION = "tiermem-router-contract/1"
ACTIONS = ("ANSWER", "ESCALATE")
# The completion always starts with this, so the action can be read right after a fixed prefix.
OUTPUT_PREFIX = '{"action": "'
MAX_SUMMARIES = 10
MAX_SUMMARY_CHARS = 400

SYSTEM_PROMPT = (
    "You route questions for a two-tier memory. Tier 1 holds short summaries; tier 2 holds the raw "
    "conversation. Decide if the summaries below are enough to answer the question exactly.\n"
    "ANSWER only if a summary states the answer explicitly and completely: exact dates, numbers and "
    "names, every item of a list, no guessing, no inferring causes from effects.\n"
    "ESCALATE if anything is missing, vague, only implied, or in doubt.\n"
    'Reply with JSON only: {"action": "ANSWER" or "ESCALATE", "reason": "<one short sentence>"}'
)


class ContractVersionError(RuntimeError):
    """A router trained under another contract version; its prompts would not match ours."""


@dataclass(frozen=True)
class SummaryView:
    text: str
    date: str | None = None


@dataclass(frozen=True)
class ParsedDecision:
    action: str  # always one of ACTIONS; ESCALATE when unparseable (faithfulness first)
    reason: str
    parsed_ok: bool  # the action could be read from the output
    valid_json: bool  # the whole output is the contract JSON


def as_view(summary: Any) -> SummaryView:
    """Accept a SummaryView, a mapping with text/date, or an object with .text/.date."""
    if isinstance(summary, SummaryView):
        return summary
    if isinstance(summary, Mapping):
        text, date = summary.get("text"), summary.get("date")
    else:
        text, date = getattr(summary, "text", None), getattr(summary, "date", None)
    if not isinstance(text, str):
        raise TypeError(f"summary has no string 'text': {summary!r}")
    return SummaryView(text=text, date=date if isinstance(date, str) and date else None)


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_SUMMARY_CHARS else text[: MAX_SUMMARY_CHARS - 3] + "..."


def render_user(question: str, summaries: Sequence[Any]) -> str:
    views = [as_view(s) for s in summaries][:MAX_SUMMARIES]
    lines = [f"Question: {' '.join(question.split())}", "", "Summaries (best match first):"]
    if not views:
        lines.append("(none retrieved)")
    for i, v in enumerate(views, 1):
        lines.append(f"[{i}] ({v.date or 'undated'}) {_clip(v.text)}")
    return "\n".join(lines)


def render_messages(question: str, summaries: Sequence[Any]) -> list[dict[str, str]]:
    """Chat messages for the router (what a teacher LLM or a remote router receives)."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": render_user(question, summaries)},
    ]


def render_prompt(tokenizer: Any, question: str, summaries: Sequence[Any]) -> str:
    """The exact prompt string a local router model sees, chat template applied.

    SFT and GRPO train on this string and serving scores it, so all three share one rendering.
    """
    return tokenizer.apply_chat_template(
        render_messages(question, summaries), tokenize=False, add_generation_prompt=True
    )


def render_target(action: str, reason: str) -> str:
    """The completion a router should emit; action first so the decision follows OUTPUT_PREFIX."""
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {ACTIONS}, got {action!r}")
    reason = " ".join(str(reason).split()) or "no reason given"
    return json.dumps({"action": action, "reason": reason}, ensure_ascii=False)


_PREFIX_RE = re.compile(r'^\s*\{\s*"action"\s*:\s*"(ANSWER|ESCALATE)"')
_THINK_RE = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)


def parse(text: str) -> ParsedDecision:
    """Parse a router completion. Anything whose action cannot be read becomes ESCALATE, flagged."""
    body = _THINK_RE.sub("", text or "", count=1).strip()
    match = _PREFIX_RE.match(body)
    if not match:
        return ParsedDecision("ESCALATE", "", parsed_ok=False, valid_json=False)
    action = match.group(1)
    try:
        obj, end = json.JSONDecoder().raw_decode(body)
    except json.JSONDecodeError:
        return ParsedDecision(action, "", parsed_ok=True, valid_json=False)
    reason = obj.get("reason") if isinstance(obj, dict) else None
    valid = (
        isinstance(obj, dict)
        and set(obj) <= {"action", "reason"}
        and obj.get("action") == action  # a duplicate "action" key must not disagree with the prefix
        and isinstance(reason, str)
        and not body[end:].strip()  # nothing but the JSON object
    )
    return ParsedDecision(action, reason if isinstance(reason, str) else "", True, valid)


def check_version(saved: str | None, where: str = "router") -> None:
    if saved != CONTRACT_VERSION:
        raise ContractVersionError(
            f"{where} was trained with router contract {saved!r}, but this package speaks "
            f"{CONTRACT_VERSION!r}; retrain it (make sft grpo) or install the matching tiermem-router version"
        )
