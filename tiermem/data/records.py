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
class GoldPoint:
    """One memory fact a question needs (RealMem's `memory_used`): its text and the turns it was taken from."""

    text: str
    turn_ids: list[str]  # empty: the fact names no source turn the loader could find (counted by the loader)


@dataclass
class ImportedUnit:
    """A unit a memory system already wrote (RealMem's points, the format's `summaries`), linked to its turns."""

    unit_id: str
    text: str
    turn_ids: list[str]  # its source turns; the memory reads it only once they have all been said
    date: str | None = None


@dataclass
class Question:
    qid: str
    question: str
    answer: str
    category: str
    evidence: list[str]  # gold evidence turn ids
    date: str | None = None  # when the question is asked, if the benchmark says (LongMemEval)
    # memory as of the question: the first turn it may not see (RealMem: the request itself); None = every turn
    asked_before: str | None = None
    points: list[GoldPoint] = field(default_factory=list)  # the memory facts it needs, when the data says
    tags: dict[str, str] = field(default_factory=dict)  # what else the data says of it (RealMem: session_type)
    reply: str | None = None  # the reply the history gives it, when the data has one (RealMem): what its label reads


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
    # the conversation's own Tier 1 (memory.summaries=imported), in the order the memory system wrote it
    summaries: list[ImportedUnit] = field(default_factory=list)
    # what the loader could not map exactly (RealMem: points matched by turn index, or with no source), by kind
    load_notes: dict[str, int] = field(default_factory=dict)
