"""The router contract: the one place that defines the router's prompt, output schema and parser (labeling,
SFT, GRPO, eval and serving render and parse through it). A change to the rendered text bumps CONTRACT_VERSION."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tiermem.settings.errors import EXIT_USAGE
from tiermem.text.words import FORM_WORDS, stem, tokens

CONTRACT_VERSION = "tiermem-router-contract/2"
ACTIONS = ("ANSWER", "ESCALATE")
# The completion always starts with this, so the action can be read right after a fixed prefix.
OUTPUT_PREFIX = '{"action": "'
MAX_SUMMARIES = 10
# Version 2 (docs/DESIGN.md): a terse system prompt and clipped summaries make prompts ~40% shorter than version 1
# (most of a CPU router's cost); the added signals (scores, as the authors' router saw; missing words) are what cheap
# baselines rank with, so the LM router sees them too.
MAX_SUMMARY_CHARS = 200

SYSTEM_PROMPT = (
    "ANSWER if the summaries state the answer exactly and completely (dates, numbers, names, every list item); "
    "else ESCALATE to read the raw conversation.\n"
    'Reply with JSON only: {"action": "ANSWER" or "ESCALATE", "reason": "<one short sentence>"}'
)


class ContractVersionError(RuntimeError):
    """A router trained under another contract version; its prompts would not match ours."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class SummaryView:
    text: str
    date: str | None = None
    score: float | None = None  # retrieval similarity; None when the caller has none


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
        text, date, score = summary.get("text"), summary.get("date"), summary.get("score")
    else:
        text, date, score = (getattr(summary, name, None) for name in ("text", "date", "score"))
    if not isinstance(text, str):
        raise TypeError(f"summary has no string 'text': {summary!r}")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        score = None
    return SummaryView(text=text, date=date if isinstance(date, str) and date else None,
                       score=None if score is None else float(score))


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_SUMMARY_CHARS else text[: MAX_SUMMARY_CHARS - 3] + "..."


def missing_words(question: str, texts: Sequence[str]) -> list[str]:
    """The question's content words (in order, once) in none of `texts`; FORM_WORDS skipped, words matched by `stem`."""
    seen = {stem(w) for t in texts for w in tokens(t)}
    out: list[str] = []
    for word in tokens(question):
        if word not in FORM_WORDS and stem(word) not in seen and word not in out:
            out.append(word)
    return out


def render_user(question: str, summaries: Sequence[Any]) -> str:
    views = [as_view(s) for s in summaries][:MAX_SUMMARIES]
    clipped = [_clip(v.text) for v in views]
    missing = missing_words(question, clipped)
    lines = [f"Question: {' '.join(question.split())}",
             f"Question words in no summary: {', '.join(missing) if missing else '(none)'}",
             "Summaries (best match first; retrieval score, date):"]
    if not views:
        lines.append("(none retrieved)")
    for i, (v, text) in enumerate(zip(views, clipped, strict=True), 1):
        score = "-" if v.score is None else f"{v.score:.2f}"
        lines.append(f"[{i}] {score} ({v.date or 'undated'}) {text}")
    return "\n".join(lines)


def render_messages(question: str, summaries: Sequence[Any]) -> list[dict[str, str]]:
    """Chat messages for the router (what a teacher LLM or a remote router receives)."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": render_user(question, summaries)},
    ]


def render_prompt(tokenizer: Any, question: str, summaries: Sequence[Any]) -> str:
    """The exact prompt string a local router model sees: SFT and GRPO train on it and serving scores it."""
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
    except (json.JSONDecodeError, RecursionError):  # a remote router's reply nested past the parser's depth
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


def limits() -> dict[str, int]:
    """What a prompt can hold: saved with every router (and its top_k), checked at load so prompts match training's."""
    return {"max_summaries": MAX_SUMMARIES, "max_summary_chars": MAX_SUMMARY_CHARS}


def check_limits(saved: Mapping[str, Any] | None, where: str = "router") -> None:
    """Raise ContractVersionError if a router was trained under other prompt limits than this code renders."""
    if not saved:
        return  # routers saved before limits were recorded: the version check covers them
    differ = {k: (saved[k], v) for k, v in limits().items() if k in saved and saved[k] != v}
    if differ:
        raise ContractVersionError(f"{where}: trained with prompt limits {differ} (saved, this code); retrain it "
                                   "or use the package version it was trained with")


def check_version(saved: str | None, where: str = "router") -> None:
    if saved != CONTRACT_VERSION:
        raise ContractVersionError(
            f"{where} was trained with router contract {saved!r}, but this package speaks "
            f"{CONTRACT_VERSION!r}; retrain it (make sft grpo) or install the matching tiermem-router version"
        )
