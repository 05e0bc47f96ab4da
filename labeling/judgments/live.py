"""The live coverage judge: a conservative LLM judge that appends judgments for the questions a judgments file
does not cover yet."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from labeling.dataset import RecordError
from labeling.judgments.format import (
    FORMAT,
    VERDICTS,
    VERSION,
    Judgment,
    parse_judgment,
    parse_judgments,
    text_digest,
    units_digest,
)
from tiermem.data.textfile import decode_utf8, jsonl_records, read_utf8
from tiermem.llm import LLMError
from tiermem.runs.safe_io import check_file_path, create_exclusive, open_nofollow
from tiermem.settings.errors import UsageError
from tiermem.text.json_text import first_json_object

try:
    import fcntl
except ImportError:  # no flock (Windows): one run per judgments file there
    fcntl = None  # type: ignore[assignment]

WRITER = "tiermem-router label: live coverage judge"

COVERAGE_SYSTEM = (
    "You audit a memory system. Given a question, its gold answer and the numbered summaries a system retrieved, "
    "read each summary carefully and decide whether it states the gold answer: yes (it states it exactly and "
    "completely), partial (it states part of it), or no. For yes and partial, quote the summary's exact words that "
    "carry the answer. Then decide whether the summaries together answer the question correctly without guessing.\n"
    "Rules: lists must be complete; dates, numbers and names exact (another format of the same date is fine); a fact "
    "about another person does not count; when in doubt, no.\n"
    'Reply with JSON only: {"units": [{"rank": 1, "verdict": "yes|no|partial", "span": "<exact words or null>"}, '
    '...], "verdict": "yes|no|partial", "reason": "<one short sentence>", "gold_doubtful": false}'
)
COVERAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "units": {"type": "array", "items": {"type": "object", "properties": {
            "rank": {"type": "integer"}, "verdict": {"enum": list(VERDICTS)}, "span": {"type": ["string", "null"]}},
            "required": ["rank", "verdict", "span"]}},
        "verdict": {"enum": list(VERDICTS)}, "reason": {"type": "string"}, "gold_doubtful": {"type": "boolean"}},
    "required": ["units", "verdict", "reason", "gold_doubtful"],
}


def _text(unit: Any, name: str) -> Any:
    return unit.get(name) if isinstance(unit, dict) else getattr(unit, name, None)


class CoverageJudge:
    def __init__(self, llm: Any, max_tokens: int = 384) -> None:
        self.llm, self.max_tokens = llm, max_tokens

    def messages(self, question: str, gold: str, units: Sequence[Any]) -> list[dict[str, str]]:
        lines = [f"[{i}] ({_text(u, 'date') or 'undated'}) {' '.join(str(_text(u, 'text')).split())}"
                 for i, u in enumerate(units, 1)]
        user = f"Question: {question}\nGold answer: {gold}\nSummaries:\n" + ("\n".join(lines) or "(none)")
        return [{"role": "system", "content": COVERAGE_SYSTEM}, {"role": "user", "content": user}]

    def judge(self, conv_id: str, qid: str, question: str, gold: str, units: Sequence[Any]) -> dict[str, Any]:
        """One judgment line for these units. LLMError: the call failed, or its reply does not fit the format."""
        messages = self.messages(question, gold, units)
        params = {"max_tokens": self.max_tokens, "temperature": 0.0, "json_schema": COVERAGE_SCHEMA}
        result = self.llm.chat(messages, **params)
        try:
            return self._line(result.text, conv_id, qid, question, units)
        except LLMError:
            self.llm.forget(messages, **params)  # an unfit reply is no answer to keep: a rerun asks again
            raise

    def _line(self, text: str, conv_id: str, qid: str, question: str, units: Sequence[Any]) -> dict[str, Any]:
        reply = first_json_object(text)
        if reply is None:
            raise LLMError(f"coverage judge: no JSON object in its reply {text[:120]!r}")
        texts = [str(_text(u, "text")) for u in units]
        given = {u.get("rank"): u for u in reply.get("units") or [] if isinstance(u, dict)}
        if sorted(k for k in given if isinstance(k, int)) != list(range(1, len(units) + 1)):
            raise LLMError(f"coverage judge: its reply judges ranks {sorted(map(str, given))}, not 1..{len(units)}")
        line_units = []
        for rank, text in enumerate(texts, 1):
            span = given[rank].get("span")
            # a span is the unit's own words; words it does not contain are not a span of it
            span = span if isinstance(span, str) and span.strip() and span in text else None
            line_units.append({"rank": rank, "unit_id": str(_text(units[rank - 1], "unit_id")),
                               "text_sha1": text_digest(text), "verdict": given[rank].get("verdict"), "span": span})
        line = {"conv_id": conv_id, "qid": qid, "question": question, "units_sha1": units_digest(texts),
                "units": line_units, "verdict": reply.get("verdict"), "reason": reply.get("reason"),
                "gold_doubtful": reply.get("gold_doubtful", False), "teacher": None}
        try:
            parse_judgment(line, "coverage judge reply")
        except RecordError as exc:
            raise LLMError(str(exc)) from None
        return line


class JudgmentsCache:
    """The judgments file a live judge appends to (only one a live judge created; never through a link; fsynced).
    Runs sharing it append under an exclusive lock after reading the others' lines: no question judged twice."""

    def __init__(self, path: str | Path) -> None:
        self.path, self.lock = Path(path), threading.Lock()
        self.read_bytes, self.lines = 0, 0  # how much of the file this run has read: bytes, and lines
        if self.path.is_symlink():
            raise UsageError(f"judgments {self.path}: a symbolic link; the live judge writes no file through a link")
        check_file_path(self.path, "judgments", may_be_new=True)
        if not self.path.exists() and self._create():
            return
        first = read_utf8(self.path, RecordError).split("\n", 1)[0]
        try:
            header = json.loads(first)
        except json.JSONDecodeError:
            header = None
        if not isinstance(header, dict) or header.get("writer") != WRITER:
            raise UsageError(f"judgments {self.path}: not written by the live coverage judge (its header names no "
                             f"writer {WRITER!r}); it is read, never appended to: give llm.coverage a new judgments "
                             "path, or leave llm.coverage out to label with this file alone")

    def _create(self) -> bool:
        """Make the file with its header in one step; False when another run made it first."""
        return create_exclusive(self.path, json.dumps({"format": FORMAT, "version": VERSION, "writer": WRITER}) + "\n")

    @contextmanager
    def _locked(self, flags: int, exclusive: bool) -> Iterator[int]:
        fd = open_nofollow(self.path, flags)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield fd
        finally:
            os.close(fd)  # closing releases the lock

    def load(self) -> Any:
        """The whole file as Judgments (a header alone is a file here), remembering how much of it was read."""
        with self.lock, self._locked(os.O_RDONLY, exclusive=False) as fd:
            data = _read_from(fd, 0)
            judgments = parse_judgments(self.path, decode_utf8(data, self.path, RecordError), allow_empty=True)
            self.read_bytes, self.lines = len(data), data.count(b"\n")
        return judgments

    def _catch_up(self, fd: int, judgments: Any) -> None:
        """Add the lines other writers appended since this run last read the file."""
        data = _read_from(fd, self.read_bytes)
        if not data:
            return
        if not data.endswith(b"\n"):
            torn = self.lines + data.count(b"\n") + 1
            raise RecordError(f"{self.path}: line {torn}: cut off (a writer was stopped while appending it); "
                              "remove that line and rerun")
        for number, obj in jsonl_records(decode_utf8(data, self.path, RecordError), self.path, RecordError):
            judgments.add(parse_judgment(obj, f"{self.path}: line {self.lines + number}"))
        self.read_bytes, self.lines = self.read_bytes + len(data), self.lines + data.count(b"\n")

    def refresh(self, judgments: Any) -> None:
        """Read what other runs appended, so a question one of them judged is not asked again."""
        with self.lock, self._locked(os.O_RDONLY, exclusive=False) as fd:
            self._catch_up(fd, judgments)

    def append(self, line: dict[str, Any], judgments: Any) -> Judgment:
        """Append `line` and add it to `judgments`, unless another run appended its question first: then theirs."""
        with self.lock, self._locked(os.O_RDWR | os.O_APPEND, exclusive=True) as fd:
            self._catch_up(fd, judgments)
            taken = judgments.by_key.get((line["conv_id"], line["qid"]))
            if taken is not None:
                return taken
            data = (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8")
            judged = parse_judgment(line, f"{self.path}: line {self.lines + 1}")
            os.write(fd, data)
            os.fsync(fd)
            self.read_bytes, self.lines = self.read_bytes + len(data), self.lines + 1
            judgments.add(judged)
            return judged


def _read_from(fd: int, offset: int) -> bytes:
    chunks = []
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def judge_missing(judge: CoverageJudge, cache: JudgmentsCache, judgments: Any, conv_id: str, qid: str,
                  question: str, gold: str, units: Sequence[Any]) -> Judgment:
    """The judgment of a question the file did not cover when read: another run's, appended since, or this judge's."""
    cache.refresh(judgments)
    judged = judgments.by_key.get((conv_id, qid))
    if judged is not None:
        return judged
    return cache.append(judge.judge(conv_id, qid, question, gold, units), judgments)
