"""RealMem histories (`<Person>_dialogues_*.json`): one long user-assistant conversation per person (docs/formats.md);
a malformed file stops with one DataError naming the file, the session and the field."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from tiermem.data.fields import get_field as _get
from tiermem.data.records import Conversation, GoldPoint, ImportedUnit, Question, Turn
from tiermem.data.textfile import read_json_file
from tiermem.settings.errors import DataError, MissingFileError
from tiermem.text.words import fact_words

FILE_PATTERN = "*_dialogues_*.json"
SPEAKERS = ("User", "Assistant")
_DAY = re.compile(r"^\s*(\d{4}-\d{2}-\d{2})(?:\s*\([A-Za-z]+\))?\s*$")


def is_realmem(data: Any) -> bool:
    return isinstance(data, dict) and "dialogues" in data and "_metadata" in data


def realmem_files(path: Path) -> list[Path]:
    """The history files a path names: itself, or a directory's `*_dialogues_*.json` (sorted by name)."""
    if path.is_dir():
        files = sorted(path.glob(FILE_PATTERN))
        if not files:
            raise DataError(f"{path}: is a directory with no RealMem history ({FILE_PATTERN}); give a data file or "
                            "a folder of RealMem histories")
        return files
    if not path.exists() and not path.is_symlink():
        raise MissingFileError(f"RealMem file not found: {path}")
    return [path]


def load_realmem(path: str | Path, exclude_categories: tuple[str, ...] = ()) -> list[Conversation]:
    """Every history under `path` (a file or a directory of them), one Conversation per person."""
    conversations = []
    for file in realmem_files(Path(path)):
        data = read_json_file(file, DataError, "RealMem history")  # a FIFO, folder or dangling link picked: named
        conversations.append(parse_realmem(data, file, exclude_categories))
    seen: dict[str, str] = {}
    for conv in conversations:
        if conv.conv_id in seen:
            raise DataError(f"{conv.source}: person {conv.conv_id!r} is also the person of {seen[conv.conv_id]}")
        seen[conv.conv_id] = conv.source
    return conversations


def _content(point: Any, where: str, notes: Counter | None = None) -> str:
    """A memory point's text: a string, or structured content (an itinerary) as JSON text (`points_structured`)."""
    value = _get(point, "content", (str, dict, list), where)
    if isinstance(value, str):
        return value
    if notes is not None:
        notes["points_structured"] += 1
    return json.dumps(value, ensure_ascii=False)


def _day(value: str, where: str) -> str:
    from tiermem.data.dates import parse_timestamp

    match = _DAY.match(value)
    if not match or parse_timestamp(match.group(1)) is None:
        raise DataError(f"{where}: field 'current_time' is {value!r}, not a day such as '2025-12-19 (Friday)'")
    return match.group(1)


def _sessions(data: Any, path: Path) -> tuple[str, list[tuple[str, dict[str, Any], str]]]:
    """(person, [(session where, session, its day)] sorted by day, stably)."""
    meta = _get(data, "_metadata", dict, str(path))
    person = _get(meta, "person_name", str, f"{path}: _metadata")
    if not person.strip():
        raise DataError(f"{path}: _metadata: field 'person_name' is empty")
    raw = _get(data, "dialogues", list, str(path))
    if not raw:
        raise DataError(f"{path}: field 'dialogues' is empty")
    sessions, uuids = [], {}
    for i, session in enumerate(raw):
        where = f"{path}: dialogues[{i}]"
        uuid = _get(session, "session_uuid", str, where)
        where = f"{path}: session {uuid!r} (dialogues[{i}])"
        if uuid in uuids:
            raise DataError(f"{where}: field 'session_uuid' repeats dialogues[{uuids[uuid]}]")
        uuids[uuid] = i
        sessions.append((where, session, _day(_get(session, "current_time", str, where), where)))
    return person, sorted(sessions, key=lambda s: s[2])  # stable: one day's sessions keep their file order


def _words(text: str) -> set[str]:
    return set(fact_words(text, letters=True))


STATES_SHARE = 0.5  # a turn states a point when it holds at least this share of the point's content words


def _source_turn(point: dict[str, Any], text: str, contents: list[tuple[str, str]], where: str
                 ) -> tuple[int | None, str]:
    """(0-based index of the turn that says the point, or None: the session's end; how it was found). Never before
    the turn stating it: the snapshot's turn (nearest `source_turn`) only if its speaker is the point's role (one point
    in nine carries another turn's snapshot), else the role's turn stating it (content words, latest of equals)."""
    source = point.get("source_turn")
    if source is not None and (isinstance(source, bool) or not isinstance(source, int)):
        raise DataError(f"{where}: field 'source_turn' must be an integer, got {type(source).__name__}")
    for name in ("source_content_snapshot", "source_role_snapshot"):
        if point.get(name) is not None and not isinstance(point[name], str):
            raise DataError(f"{where}: field {name!r} must be a string")
    snapshot, role = point.get("source_content_snapshot"), point.get("source_role_snapshot")
    words = _words(text)
    shares = [len(words & _words(text)) / len(words) if words else 0.0 for _, text in contents]
    top = max(shares, default=0.0)  # the turn that first says it is the first to say it as fully as any turn does
    first = next((i for i, share in enumerate(shares) if share >= top), -1) if top >= STATES_SHARE else -1
    if snapshot:
        hits = [i for i, (speaker, text) in enumerate(contents) if text == snapshot and speaker == role]
        if hits:
            near = (source - 1) if isinstance(source, int) else 0
            index = min(hits, key=lambda i: (abs(i - near), i))
            return (index, "snapshot") if index >= first else (first, "content")
    best, best_share = None, STATES_SHARE
    for i, ((speaker, _), share) in enumerate(zip(contents, shares, strict=True)):
        if (role not in SPEAKERS or speaker == role) and share >= best_share:  # >=: the latest of equals
            best, best_share = i, share
    return (best, "content") if best is not None else (None, "session_end")


def parse_realmem(data: Any, path: str | Path, exclude_categories: tuple[str, ...] = ()) -> Conversation:
    path = Path(path)
    person, sessions = _sessions(data, path)
    turns: list[Turn] = []
    dropped: list[str] = []
    units: list[ImportedUnit] = []
    notes: Counter = Counter()
    by_point: dict[tuple[str, str], list[str]] = {}  # (session uuid, point text) -> source turn ids
    queries: list[tuple[str, int, str, dict[str, Any], dict[str, Any] | None, str]] = []
    for n, (where, session, day) in enumerate(sessions, 1):
        uuid = session["session_uuid"]
        raw_turns = _get(session, "dialogue_turns", list, where)
        if not raw_turns:
            raise DataError(f"{where}: field 'dialogue_turns' is empty")
        ids, contents = [], []
        for i, turn in enumerate(raw_turns):
            twhere = f"{where}: dialogue_turns[{i}]"
            speaker = _get(turn, "speaker", str, twhere)
            if speaker not in SPEAKERS:
                raise DataError(f"{twhere}: field 'speaker' is {speaker!r}; expected one of {list(SPEAKERS)}")
            text = _get(turn, "content", str, twhere)
            turn_id = f"S{n}:{i + 1}"
            ids.append(turn_id)
            contents.append((speaker, text))
            if text.strip():
                turns.append(Turn(turn_id, speaker, text, day, uuid))
            else:
                dropped.append(turn_id)
            is_query = turn.get("is_query", False)
            if not isinstance(is_query, bool):
                raise DataError(f"{twhere}: field 'is_query' must be true or false")
            if is_query:
                reply = raw_turns[i + 1] if i + 1 < len(raw_turns) else None
                queries.append((twhere, i, turn_id, turn, reply, day))
        points = session.get("extracted_memory", [])
        if not isinstance(points, list):
            raise DataError(f"{where}: field 'extracted_memory' must be a list")
        for j, point in enumerate(points):
            pwhere = f"{where}: extracted_memory[{j}]"
            text = _content(point, pwhere, notes)
            _get(point, "index", str, pwhere)  # not unique in the published files: the unit id is its place
            unit_id = f"S{n}:m{j + 1}"
            owner = _get(point, "session_uuid", str, pwhere)
            if owner != uuid:
                raise DataError(f"{pwhere}: field 'session_uuid' is {owner!r}, not its session's {uuid!r}")
            index, how = _source_turn(point, text, contents, pwhere)
            notes[f"points_by_{how}"] += 1
            sources = [ids[index]] if index is not None else [t for t in ids if t not in dropped]
            sources = [t for t in sources if t not in dropped] or [t for t in ids if t not in dropped]
            by_point.setdefault((uuid, text), sources if index is not None else [])
            if text.strip() and not sources:  # its session's turns are all empty: nothing to link it to
                notes["points_in_empty_sessions"] += 1
            elif text.strip():
                units.append(ImportedUnit(unit_id, text, sources, day))
    questions = []
    seen_q: set[str] = set()
    for twhere, i, turn_id, turn, reply, day in queries:
        qid = _get(turn, "query_id", str, twhere)
        if qid in seen_q:
            raise DataError(f"{twhere}: field 'query_id' {qid!r} repeats")
        seen_q.add(qid)
        category = _get(turn, "category_name", str, twhere)
        if category in exclude_categories:
            continue
        if turn_id in dropped:  # an empty request: nothing was asked (and its turn is in no page)
            notes["queries_empty"] += 1
            continue
        rwhere = f"{twhere.rsplit(': dialogue_turns', 1)[0]}: dialogue_turns[{i + 1}] (the reply)"
        if not isinstance(reply, dict) or reply.get("speaker") != "Assistant":
            raise DataError(f"{twhere}: a query turn must be followed by the Assistant's reply (its memory_used)")
        used = _get(reply, "memory_used", list, rwhere)
        points: list[GoldPoint] = []
        for k, item in enumerate(used):
            uwhere = f"{rwhere}: memory_used[{k}]"
            key = (_get(item, "session_uuid", str, uwhere), _content(item, uwhere))
            if key not in by_point:
                notes["used_points_unmatched"] += 1
                points.append(GoldPoint(key[1], []))
                continue
            if not by_point[key]:
                notes["used_points_no_source"] += 1
            points.append(GoldPoint(key[1], list(by_point[key])))
        if not points:  # nothing says what it needs: no gold to label it by
            notes["queries_without_points"] += 1
            continue
        tags = {k: turn[k] for k in ("session_type", "topic") if isinstance(turn.get(k), str)}
        evidence = list(dict.fromkeys(t for p in points for t in p.turn_ids))
        answer = "\n".join(p.text for p in points)
        questions.append(Question(qid, _get(turn, "content", str, twhere), answer, category, evidence, day,
                                  asked_before=turn_id, points=points, tags=tags,
                                  reply=_get(reply, "content", str, rwhere)))
    if not turns:
        raise DataError(f"{path}: every turn's text is empty; nothing to remember")
    return Conversation(person, turns, questions, str(path), list(SPEAKERS), dropped, [], units,
                        {k: v for k, v in sorted(notes.items())})
