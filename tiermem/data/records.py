"""The conversation records every loader returns (LoCoMo, LongMemEval, the tiermem format) and the memory reads."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Turn:
    turn_id: str  # source id, e.g. LoCoMo "D3:7"; LongMemEval "<session_id>:<index>"
    speaker: str
    text: str
    timestamp: str  # the session's date/time as written in the source (absolute; loaders check it is a date)
    session_id: str


@dataclass
class Question:
    qid: str
    question: str
    answer: str
    category: str
    evidence: list[str]  # gold evidence turn ids
    date: str | None = None  # when the question is asked, if the benchmark says (LongMemEval)


@dataclass
class Conversation:
    conv_id: str
    turns: list[Turn]
    questions: list[Question]
    source: str  # the file it came from
    speakers: list[str] = field(default_factory=list)
    # ids of the turns the loader dropped because their text was empty (counted in the label stats and report)
    dropped_turns: list[str] = field(default_factory=list)
    # ids of the turns the loader moved to put the conversation in time order (tiermem.data.time_order; own format)
    reordered_turns: list[str] = field(default_factory=list)
