"""Benchmark loaders: LoCoMo and LongMemEval files -> Conversation records with gold evidence; every structural
problem a DataError naming the file, the sample and the field (what is repaired or dropped: docs/formats.md)."""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tiermem.data.dates import timestamp_problem, zone_mix
from tiermem.data.fields import get_field as _get
from tiermem.data.records import Conversation, Question, Turn
from tiermem.data.textfile import read_json_file
from tiermem.settings.errors import DataError, MissingFileError, UsageError

SAMPLE_PATH = Path(__file__).with_name("sample_locomo.json")
FORMATS = ("auto", "locomo", "longmemeval", "tiermem", "realmem")
# LoCoMo's question categories (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial).
LOCOMO_CATEGORIES = frozenset({1, 2, 3, 4, 5})


def _read_json(path: str | Path) -> Any:
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise MissingFileError(f"benchmark file not found: {path}")
    return read_json_file(path, DataError, "benchmark JSON file")  # regular file, size and depth bounds, UTF-8


def _answer_text(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DataError(f"{where}: field 'answer' must be a string or number, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise DataError(f"{where}: field 'answer' is {value!r}, not an answer")  # json reads NaN/Infinity
    if not str(value).strip():
        # an empty gold answer would judge every prediction wrong and label the question ESCALATE
        raise DataError(f"{where}: field 'answer' is empty")
    return str(value)


def _question_text(obj: Any, where: str) -> str:
    text = _get(obj, "question", str, where)
    if not text.strip():
        raise DataError(f"{where}: field 'question' is empty or whitespace")
    return text


def _keep_spoken(turns: list[Turn], where: str) -> tuple[list[Turn], list[str]]:
    """The turns with text, and the ids of those dropped for having none; no text at all is an error."""
    kept = [t for t in turns if t.text.strip()]
    if not kept:
        raise DataError(f"{where}: every turn's text is empty ({len(turns)} turns); nothing to remember")
    return kept, [t.turn_id for t in turns if not t.text.strip()]


def _check_date(value: str, where: str, field_name: str) -> str:
    problem = timestamp_problem(value)
    if problem:
        raise DataError(f"{where}: field '{field_name}' {problem}")
    return value


def _first_seen(seen: dict[str, int], key: str, index: int, what: str, where: str) -> None:
    """Record `key` at `index`; a repeat is an error naming both positions (a repeat would overwrite data)."""
    if key in seen:
        raise DataError(f"{where}: duplicate {what} {key!r} at positions {seen[key]} and {index}")
    seen[key] = index


def _samples(data: Any, path: str | Path, what: str, one: str, id_key: str) -> Iterator[tuple[str, Any, str]]:
    """(where, sample, id) of each sample of a benchmark file: a non-empty list of `what`, their ids unique."""
    if not isinstance(data, list) or not data:
        raise DataError(f"{path}: expected a non-empty list of {what}")
    seen: dict[str, int] = {}
    for index, sample in enumerate(data):
        key = _get(sample, id_key, str, f"{path}: {one} {index}")
        _first_seen(seen, key, index, id_key, str(path))
        yield f"{path}: {one} {key!r}", sample, key


_SESSION_KEY = re.compile(r"^session_(\d+)$")
_TYPO_COLON = re.compile(r"^D:(\d+):(\d+)$")


def _evidence_ids(raw: list[Any], where: str) -> list[str]:
    ids: list[str] = []
    for item in raw:
        if not isinstance(item, str):
            raise DataError(f"{where}: field 'evidence' must hold strings, got {item!r}")
        for part in re.split(r"[;,]", item):
            part = part.strip()
            if part:
                typo = _TYPO_COLON.match(part)
                ids.append(f"D{typo.group(1)}:{typo.group(2)}" if typo else part)
    return ids


def _check_evidence(ids: list[str], known: set[str], where: str, policy: str) -> list[str]:
    unknown = [e for e in ids if e not in known]
    if unknown and policy == "error":
        raise DataError(f"{where}: field 'evidence' names unknown turn id(s) {unknown}")
    if unknown:
        warnings.warn(f"{where}: dropping unknown evidence id(s) {unknown}", stacklevel=3)
    return list(dict.fromkeys(e for e in ids if e in known))


def _locomo_caption_text(turn: dict[str, Any], where: str) -> str:
    text = _get(turn, "text", str, where)
    caption = turn.get("blip_caption")
    if caption is not None and not isinstance(caption, str):
        raise DataError(f"{where}: field 'blip_caption' must be a string")
    if caption:
        text = f"{text} [shares a photo: {caption}]".strip()
    return text


def load_locomo(
    path: str | Path, exclude_categories: tuple[int, ...] = (5,), unknown_evidence: str = "drop"
) -> list[Conversation]:
    """Load a `locomo10.json`-shaped file. Question ids are `<sample_id>:q<index in qa>`."""
    return _parse_locomo(_read_json(path), path, exclude_categories, unknown_evidence)


def _parse_locomo(
    data: Any, path: str | Path, exclude_categories: tuple[int, ...], unknown_evidence: str
) -> list[Conversation]:
    if unknown_evidence not in ("drop", "error"):
        raise ValueError(f"unknown_evidence must be 'drop' or 'error', got {unknown_evidence!r}")
    excluded = {str(c) for c in exclude_categories}
    conversations: list[Conversation] = []
    for where, sample, conv_id in _samples(data, path, "LoCoMo samples", "sample", "sample_id"):
        conv = _get(sample, "conversation", dict, where)
        speakers = [_get(conv, k, str, f"{where}.conversation") for k in ("speaker_a", "speaker_b")]
        sessions = sorted(int(m.group(1)) for k in conv if (m := _SESSION_KEY.match(k)))
        if not sessions:
            raise DataError(f"{where}: field 'conversation' has no session_N turn lists")
        turns: list[Turn] = []
        for n in sessions:
            skey = f"session_{n}"
            session = _get(conv, skey, list, f"{where}.conversation")
            if not session:
                raise DataError(f"{where}: field 'conversation.{skey}' is an empty session")
            stamp = _check_date(_get(conv, f"{skey}_date_time", str, f"{where}.conversation"),
                                f"{where}.conversation", f"{skey}_date_time")
            for t_index, turn in enumerate(session):
                twhere = f"{where}.conversation.{skey}[{t_index}]"
                turns.append(
                    Turn(
                        turn_id=_get(turn, "dia_id", str, twhere),
                        speaker=_get(turn, "speaker", str, twhere),
                        text=_locomo_caption_text(turn, twhere),
                        timestamp=stamp,
                        session_id=skey,
                    )
                )
        all_ids = {t.turn_id for t in turns}
        if len(all_ids) != len(turns):
            raise DataError(f"{where}: field 'dia_id' repeats a turn id")
        own_text = sum(1 for s_key in sessions for t in conv[f"session_{s_key}"]
                       if isinstance(t.get("text"), str) and t["text"].strip())
        if not own_text and any(t.text.strip() for t in turns):
            raise DataError(f"{where}: every turn's text is empty ({len(turns)} turns; the only text is image "
                            "captions); nothing to remember")
        turns, dropped = _keep_spoken(turns, where)
        known, gone = {t.turn_id for t in turns}, set(dropped)
        questions: list[Question] = []
        for q_index, qa in enumerate(_get(sample, "qa", list, where)):
            qwhere = f"{where}.qa[{q_index}]"
            category = _get(qa, "category", int, qwhere)
            if category not in LOCOMO_CATEGORIES:
                raise DataError(f"{qwhere}: field 'category' must be one of {sorted(LOCOMO_CATEGORIES)}, "
                                f"got {category}")
            if str(category) in excluded:
                continue
            evidence = _evidence_ids(_get(qa, "evidence", list, qwhere), qwhere)
            if category == 5 and "answer" not in qa:
                # adversarial: the premise is false; LoCoMo scores "not mentioned"-style answers as correct
                qa = {**qa, "answer": "Not mentioned in the conversation"}
            questions.append(
                Question(
                    qid=f"{conv_id}:q{q_index:03d}",
                    question=_question_text(qa, qwhere),
                    answer=_answer_text(_get(qa, "answer", (str, int, float), qwhere), qwhere),
                    category=str(category),
                    evidence=_check_evidence([e for e in evidence if e not in gone], known, qwhere,
                                             unknown_evidence),
                )
            )
        conversations.append(Conversation(conv_id, turns, questions, str(path), speakers, dropped))
    return conversations


def load_longmemeval(path: str | Path, exclude_categories: tuple[str, ...] = ()) -> list[Conversation]:
    """A LongMemEval (`_s`, `_m`, `oracle`) file: one Conversation per question, its haystack; turn ids
    `<haystack_session_id>:<turn index>`, gold evidence the turns marked `has_answer`."""
    return _parse_longmemeval(_read_json(path), path, exclude_categories)


def _parse_longmemeval(data: Any, path: str | Path, exclude_categories: tuple[str, ...]) -> list[Conversation]:
    conversations: list[Conversation] = []
    for where, item, qid in _samples(data, path, "LongMemEval instances", "instance", "question_id"):
        session_ids = _get(item, "haystack_session_ids", list, where)
        dates = _get(item, "haystack_dates", list, where)
        sessions = _get(item, "haystack_sessions", list, where)
        if not sessions:
            raise DataError(f"{where}: field 'haystack_sessions' is empty")
        if not len(session_ids) == len(dates) == len(sessions):
            raise DataError(
                f"{where}: fields 'haystack_session_ids', 'haystack_dates', 'haystack_sessions' differ in length "
                f"({len(session_ids)}, {len(dates)}, {len(sessions)})"
            )
        turns: list[Turn] = []
        evidence: list[str] = []
        seen_sessions: dict[str, int] = {}
        for s_index, (sid, date, session) in enumerate(zip(session_ids, dates, sessions, strict=True)):
            swhere = f"{where}.haystack_sessions[{s_index}]"
            if not isinstance(sid, str) or not isinstance(date, str):
                raise DataError(f"{where}: session {s_index} id and date must be strings")
            _check_date(date, f"{where} session {s_index} ({sid!r})", f"haystack_dates[{s_index}]")
            _first_seen(seen_sessions, sid, s_index, "haystack_session_ids entry", where)
            if not isinstance(session, list) or not session:
                raise DataError(f"{swhere}: expected a non-empty list of turns")
            for t_index, turn in enumerate(session):
                twhere = f"{swhere}[{t_index}]"
                turn_id = f"{sid}:{t_index}"
                turns.append(
                    Turn(
                        turn_id=turn_id,
                        speaker=_get(turn, "role", str, twhere),
                        text=_get(turn, "content", str, twhere),
                        timestamp=date,
                        session_id=sid,
                    )
                )
                if turn.get("has_answer") is True:
                    evidence.append(turn_id)
        turns, dropped = _keep_spoken(turns, where)
        gone = set(dropped)
        evidence = [e for e in evidence if e not in gone]
        category = _get(item, "question_type", str, where)
        if category in exclude_categories:
            continue
        date = item.get("question_date")
        if date is not None:  # the day relative answers are read against: a date or absent, never a guess
            if not isinstance(date, str):
                raise DataError(f"{where}: field 'question_date' must be a string, got {type(date).__name__}")
            _check_date(date, where, "question_date")
        # memory as of the question compares its date with every session's: one instant each, or refused by name
        mix = zone_mix([(f"haystack_dates[{i}]", d) for i, d in enumerate(dates)]
                       + ([("question_date", date)] if isinstance(date, str) else []))
        if mix:
            raise DataError(f"{where}: {mix}")
        question = Question(
            qid=qid,
            question=_question_text(item, where),
            answer=_answer_text(_get(item, "answer", (str, int, float), where), where),
            category=category,
            evidence=evidence,
            date=date if isinstance(date, str) else None,
            asked_before=_first_after(turns, date) if isinstance(date, str) else None,
        )
        conversations.append(Conversation(qid, turns, [question], str(path), ["user", "assistant"], dropped))
    return conversations


def _first_after(turns: list[Turn], date: str) -> str | None:
    """The first turn dated after `date` (memory as of the question); None when every turn is on or before it."""
    from tiermem.data.dates import parse_timestamp

    asked = parse_timestamp(date)
    for turn in turns:
        moment = parse_timestamp(turn.timestamp)
        if asked is not None and moment is not None and moment > asked:  # one kind of time: zone_mix checked
            return turn.turn_id
    return None


def detect_format(data: Any, path: str | Path) -> str:
    from tiermem.data.realmem import is_realmem

    if is_realmem(data):
        return "realmem"
    first = data[0] if isinstance(data, list) and data else None
    if isinstance(first, dict) and ("conversation" in first or "sample_id" in first):
        return "locomo"
    if isinstance(first, dict) and "haystack_sessions" in first:
        return "longmemeval"
    if isinstance(data, dict) and "format" in data:  # tiermem_format validates the name and version
        return "tiermem"
    raise DataError(f"{path}: neither LoCoMo (sample_id/conversation/qa), LongMemEval (haystack_sessions), RealMem "
                    "(_metadata/dialogues) nor tiermem ({\"format\": \"tiermem-conversations\", ...}) shaped")


def detect_file_format(path: str | Path) -> str:
    """detect_format for a file: JSONL is the tiermem format (the only line-delimited one), a directory RealMem's."""
    if Path(path).is_dir():
        return "realmem"
    return "tiermem" if Path(path).suffix == ".jsonl" else detect_format(_read_json(path), path)


def load_conversations(
    path: str | Path | None = None,
    fmt: str = "auto",
    exclude_categories: tuple[int | str, ...] | None = None,
    unknown_evidence: str = "drop",
) -> list[Conversation]:
    """Any supported benchmark file (`None`: the packaged sample); `exclude_categories=None`: the benchmark's default
    (LoCoMo: category 5; LongMemEval: none)."""
    path = SAMPLE_PATH if path is None or str(path) == "" else Path(path)
    if fmt not in FORMATS:
        raise UsageError(f"unknown benchmark format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if path.is_dir() or fmt == "realmem":  # one history per person: tiermem/data/realmem.py
        from tiermem.data.realmem import load_realmem

        if fmt not in ("auto", "realmem"):
            raise DataError(f"{path}: a directory is read as RealMem histories, but the format is set to {fmt!r}")
        return load_realmem(path, tuple(str(c) for c in exclude_categories or ()))
    if path.suffix == ".jsonl" or fmt == "tiermem":  # your own conversations: tiermem/data/tiermem_format.py
        from tiermem.data.tiermem_format import load_tiermem

        if fmt not in ("auto", "tiermem"):
            raise DataError(f"{path}: a .jsonl file is the tiermem format, but the format is set to {fmt!r}; "
                            "pass dataset_format=tiermem (or auto)")
        return load_tiermem(path, tuple(str(c) for c in exclude_categories or ()))
    data = _read_json(path)
    if fmt != "auto" and isinstance(data, dict) and "format" in data:
        raise DataError(f"{path}: a tiermem conversation file, but the format is set to {fmt!r}; "
                        "pass dataset_format=tiermem (or auto)")
    fmt = detect_format(data, path) if fmt == "auto" else fmt
    if fmt == "realmem":
        from tiermem.data.realmem import parse_realmem

        return [parse_realmem(data, path, tuple(str(c) for c in exclude_categories or ()))]
    if fmt == "tiermem":
        from tiermem.data.tiermem_format import parse_document

        return parse_document(data, path, tuple(str(c) for c in exclude_categories or ()))
    if fmt == "locomo":
        excluded = (5,) if exclude_categories is None else tuple(int(c) for c in exclude_categories)
        return _parse_locomo(data, path, excluded, unknown_evidence)
    return _parse_longmemeval(data, path, tuple(str(c) for c in exclude_categories or ()))
