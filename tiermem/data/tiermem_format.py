"""The tiermem conversation format (version 1): your own agent's history in the pipeline (docs/formats.md); every
problem is a TiermemFormatError naming file, line, conversation and field."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tiermem.data.dates import timestamp_problem
from tiermem.data.records import Conversation, ImportedUnit, Question, Turn
from tiermem.data.textfile import check_text, jsonl_records, read_utf8
from tiermem.data.time_order import order_turns
from tiermem.runs.safe_io import write_atomic
from tiermem.settings.errors import DataError, MissingFileError

FORMAT_NAME = "tiermem-conversations"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = (1,)
EXAMPLE_PATH = Path(__file__).with_name("example_tiermem.json")

_CONVERSATION_KEYS = {"id", "turns", "questions", "summaries", "metadata"}
_TURN_KEYS = {"id", "session", "timestamp", "speaker", "text", "metadata"}
_QUESTION_KEYS = {"id", "question", "answer", "evidence", "category", "date", "asked_after", "metadata"}
_SUMMARY_KEYS = {"id", "text", "source_turns", "date", "metadata"}


class TiermemFormatError(DataError):
    """A file that does not follow the tiermem conversation format."""


def _fail(where: str, message: str) -> TiermemFormatError:
    return TiermemFormatError(f"{where}: {message}")


def _string(obj: dict[str, Any], key: str, where: str, required: bool = True, empty_ok: bool = False) -> str | None:
    if key not in obj:
        if required:
            raise _fail(where, f"missing field '{key}'")
        return None
    value = obj[key]
    if not isinstance(value, str):
        raise _fail(where, f"field '{key}' must be a string, got {type(value).__name__}")
    if not empty_ok and not value.strip():
        raise _fail(where, f"field '{key}' is empty")
    return value


def _object(value: Any, where: str, keys: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, f"expected an object, got {type(value).__name__}")
    unknown = sorted(set(value) - keys)
    if unknown:
        raise _fail(where, f"unknown field(s) {unknown}; allowed: {sorted(keys)}")
    return value


def _check_header(header: Any, where: str) -> None:
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise _fail(where, f"not a tiermem conversation file: expected \"format\": \"{FORMAT_NAME}\"")
    version = header.get("version")
    if version not in SUPPORTED_VERSIONS:
        raise _fail(where, f"field 'version' is {version!r}; this tiermem reads versions {list(SUPPORTED_VERSIONS)}")


def parse_conversation(raw: Any, where: str, source: str,
                       exclude_categories: tuple[str, ...] = ()) -> Conversation:
    obj = _object(raw, where, _CONVERSATION_KEYS)
    conv_id = _string(obj, "id", where)
    where = f"{where} (conversation {conv_id!r})"
    turns_raw = obj.get("turns")
    if not isinstance(turns_raw, list) or not turns_raw:
        raise _fail(where, "field 'turns' must be a non-empty list")
    turns: list[Turn] = []
    seen_sessions: set[str] = set()
    last_session: str | None = None
    for i, t in enumerate(turns_raw):
        twhere = f"{where} turns[{i}]"
        t = _object(t, twhere, _TURN_KEYS)
        turn = Turn(turn_id=_string(t, "id", twhere), speaker=_string(t, "speaker", twhere),
                    text=_string(t, "text", twhere, empty_ok=True), timestamp=_string(t, "timestamp", twhere),
                    session_id=_string(t, "session", twhere))
        problem = timestamp_problem(turn.timestamp)
        if problem:
            raise _fail(f"{twhere} (turn {turn.turn_id!r}, session {turn.session_id!r})",
                        f"field 'timestamp' {problem}")
        if turn.session_id != last_session:
            if turn.session_id in seen_sessions:
                raise _fail(twhere, f"field 'session': session {turn.session_id!r} resumes after another session; "
                                    "a session's turns must be contiguous (give the later part its own session id)")
            seen_sessions.add(turn.session_id)
            last_session = turn.session_id
        turns.append(turn)
    repeated = _repeats(t.turn_id for t in turns)
    if repeated:
        raise _fail(where, f"field 'turns': turn id(s) {repeated} repeat")
    turns, reordered = order_turns(turns, lambda message: _fail(where, message))  # sort, and count (time_order)
    order = [t.turn_id for t in turns]  # time order, empty turns too (asked_after may name one)
    dropped = [t.turn_id for t in turns if not t.text.strip()]
    turns = [t for t in turns if t.text.strip()]
    if not turns:
        raise _fail(where, f"field 'turns': every turn's text is empty ({len(dropped)} turns); nothing to remember")
    known, gone = {t.turn_id for t in turns}, set(dropped)
    questions: list[Question] = []
    for qwhere, q, qid in _items(obj.get("questions", []), where, "questions", "question", _QUESTION_KEYS):
        if "answer" not in q:
            raise _fail(qwhere, "missing field 'answer'")
        answer = q["answer"]
        if isinstance(answer, bool) or not isinstance(answer, str | int | float) or not str(answer).strip():
            raise _fail(qwhere, "field 'answer' must be a non-empty string or a number")
        evidence = q.get("evidence", [])
        if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
            raise _fail(qwhere, "field 'evidence' must be a list of turn id strings")
        evidence = [e for e in evidence if e not in gone]
        unknown = [e for e in evidence if e not in known]
        if unknown:
            raise _fail(qwhere, f"field 'evidence' names unknown turn id(s) {unknown}")
        category = q.get("category", "")
        if isinstance(category, bool) or not isinstance(category, str | int):
            raise _fail(qwhere, "field 'category' must be a string or an integer")
        if str(category) in exclude_categories:
            continue
        after = _string(q, "asked_after", qwhere, required=False)
        if after is not None and after not in order:
            raise _fail(qwhere, f"field 'asked_after' names unknown turn id {after!r}")
        asked = _string(q, "date", qwhere, required=False)
        if asked and (problem := timestamp_problem(asked)):  # the day relative answers are read against
            raise _fail(qwhere, f"field 'date' {problem}")
        questions.append(Question(qid=qid, question=_string(q, "question", qwhere), answer=str(answer),
                                  category=str(category), evidence=list(dict.fromkeys(evidence)), date=asked,
                                  asked_before=None if after is None else _next_kept(after, order, known)))
    speakers = list(dict.fromkeys(t.speaker for t in turns))
    summaries = _summaries(obj.get("summaries", []), where, known, gone)
    return Conversation(conv_id, turns, questions, source, speakers, dropped, reordered, summaries)


def _next_kept(after: str, order: list[str], known: set[str]) -> str | None:
    """The first kept turn after `after` in time order (what the question may not see); None: it sees them all."""
    return next((t for t in order[order.index(after) + 1:] if t in known), None)


def _items(raw: Any, where: str, name: str, one: str, keys: set[str]) -> Iterator[tuple[str, dict, str]]:
    """(where, object, id) of each item of the list field `name`: an object of `keys` whose id no other repeats."""
    if not isinstance(raw, list):
        raise _fail(where, f"field '{name}' must be a list")
    seen: set[str] = set()
    for i, item in enumerate(raw):
        iwhere = f"{where} {name}[{i}]"
        item = _object(item, iwhere, keys)
        item_id = _string(item, "id", iwhere)
        if item_id in seen:
            raise _fail(iwhere, f"field 'id': {one} id {item_id!r} repeats")
        seen.add(item_id)
        yield iwhere, item, item_id


def _summaries(raw: Any, where: str, known: set[str], gone: set[str]) -> list[ImportedUnit]:
    units = []
    for swhere, item, unit_id in _items(raw, where, "summaries", "summary", _SUMMARY_KEYS):
        sources = item.get("source_turns")
        if not isinstance(sources, list) or not sources or not all(isinstance(t, str) for t in sources):
            raise _fail(swhere, "field 'source_turns' must be a non-empty list of turn id strings")
        unknown = [t for t in sources if t not in known and t not in gone]
        if unknown:
            raise _fail(swhere, f"field 'source_turns' names unknown turn id(s) {unknown}")
        sources = [t for t in sources if t in known]
        if not sources:
            raise _fail(swhere, "field 'source_turns' names only turns whose text is empty")
        date = _string(item, "date", swhere, required=False)
        if date and (problem := timestamp_problem(date)):
            raise _fail(swhere, f"field 'date' {problem}")
        units.append(ImportedUnit(unit_id, _string(item, "text", swhere), list(dict.fromkeys(sources)), date))
    return units


def _repeats(ids: Iterable[str]) -> list[str]:
    """The ids that occur more than once, sorted (one pass: a set of the ids seen)."""
    seen: set[str] = set()
    repeated: set[str] = set()
    for x in ids:
        (repeated if x in seen else seen).add(x)
    return sorted(repeated)


def _check_unique(convs: list[Conversation], path: Path) -> list[Conversation]:
    repeated = _repeats(c.conv_id for c in convs)
    if repeated:
        raise _fail(str(path), f"conversation id(s) {repeated} repeat")
    if not convs:
        raise _fail(str(path), "no conversations")
    return convs


def parse_document(data: Any, path: str | Path, exclude_categories: tuple[str, ...] = ()) -> list[Conversation]:
    """A parsed .json document: the header object with its `conversations` list."""
    path = Path(path)
    _check_header(data, str(path))
    unknown = sorted(set(data) - {"format", "version", "conversations", "metadata"})
    if unknown:
        raise _fail(str(path), f"unknown top-level field(s) {unknown}")
    convs = data.get("conversations")
    if not isinstance(convs, list):
        raise _fail(str(path), "field 'conversations' must be a list")
    return _check_unique([parse_conversation(c, f"{path}: conversations[{i}]", str(path), exclude_categories)
                          for i, c in enumerate(convs)], path)


def load_tiermem(path: str | Path, exclude_categories: tuple[str, ...] = ()) -> list[Conversation]:
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"conversation file not found: {path}")
    text = read_utf8(path, TiermemFormatError)
    if path.suffix != ".jsonl":
        try:
            data = check_text(json.loads(text), str(path), TiermemFormatError)
        except json.JSONDecodeError as exc:
            raise _fail(str(path), f"not valid JSON: {exc}") from None
        return parse_document(data, path, exclude_categories)
    convs: list[Conversation] = []
    header_seen = False
    for number, obj in jsonl_records(text, path, TiermemFormatError):
        where = f"{path}: line {number}"
        if not header_seen:
            _check_header(obj, where)
            header_seen = True
            continue
        convs.append(parse_conversation(obj, where, str(path), exclude_categories))
    if not header_seen:
        raise _fail(str(path), f"empty file; the first line must be the header {{\"format\": \"{FORMAT_NAME}\", "
                               f"\"version\": {FORMAT_VERSION}}}")
    return _check_unique(convs, path)


def to_dict(conv: Conversation) -> dict[str, Any]:
    turns = [{"id": t.turn_id, "session": t.session_id, "timestamp": t.timestamp, "speaker": t.speaker,
              "text": t.text} for t in conv.turns]
    questions = []
    for q in conv.questions:
        item: dict[str, Any] = {"id": q.qid, "question": q.question, "answer": q.answer}
        if q.evidence:
            item["evidence"] = list(q.evidence)
        if q.category:
            item["category"] = q.category
        if q.date:
            item["date"] = q.date
        if q.asked_before is not None:
            item["asked_after"] = _previous(conv, q.asked_before)
        questions.append(item)
    out: dict[str, Any] = {"id": conv.conv_id, "turns": turns, "questions": questions}
    if conv.summaries:
        out["summaries"] = [{"id": u.unit_id, "text": u.text, "source_turns": list(u.turn_ids),
                             **({"date": u.date} if u.date else {})} for u in conv.summaries]
    return out


def _previous(conv: Conversation, turn_id: str) -> str:
    """The last turn before `turn_id` (the tiermem format says what a question sees by its last turn)."""
    ids = [t.turn_id for t in conv.turns]
    if turn_id not in ids or ids.index(turn_id) == 0:
        raise DataError(f"conversation {conv.conv_id!r}: a question asked before turn {turn_id!r} sees no turn; the "
                        "tiermem format cannot write it")
    return ids[ids.index(turn_id) - 1]


def dump_tiermem(conversations: list[Conversation], path: str | Path) -> Path:
    """Write conversations (from any loader) in the tiermem format; .jsonl by suffix, else .json."""
    path = Path(path)
    header = {"format": FORMAT_NAME, "version": FORMAT_VERSION}
    if path.suffix == ".jsonl":
        lines = [json.dumps(header)] + [json.dumps(to_dict(c), ensure_ascii=False) for c in conversations]
        write_atomic(path, "\n".join(lines) + "\n")
    else:
        write_atomic(path, json.dumps({**header, "conversations": [to_dict(c) for c in conversations]},
                                      ensure_ascii=False, indent=1) + "\n")
    return path
