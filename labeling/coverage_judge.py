"""The live coverage judge: a conservative LLM judge that writes careful-reading judgments for the questions a
judgments file does not cover yet, in the file's own format (labeling/judgments.py), the file its cache.

With `llm.coverage` and `judgments: PATH`, a question with no judgment is judged once, from its gold answer and
its router units: a verdict per unit (does this unit state the gold answer: yes / no / partial, and its exact words
that carry it), the question's verdict and a reason. The line is appended to PATH (created by the run when absent)
and read back through the same checks as a file's, so a rerun asks nothing. The judge's reply must parse and fit
the format; anything else is an LLMError: the question becomes an error record (retried by a rerun), never a
verdict. Teacher decisions are not made here (the `teacher` role asks for them, blind to the gold answer).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from labeling.dataset import RecordError
from labeling.judgments import FORMAT, VERDICTS, VERSION, Judgment, parse_judgment, text_digest, units_digest
from tiermem.data.textfile import read_utf8
from tiermem.llm import LLMError
from tiermem.runs.safe_io import open_nofollow
from tiermem.settings.errors import UsageError
from tiermem.text.json_text import first_json_object

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
        result = self.llm.chat(self.messages(question, gold, units), max_tokens=self.max_tokens, temperature=0.0,
                               json_schema=COVERAGE_SCHEMA)
        reply = first_json_object(result.text)
        if reply is None:
            raise LLMError(f"coverage judge: no JSON object in its reply {result.text[:120]!r}")
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
    """The judgments file a live judge appends to: created by the run when absent, appended to only when a live
    judge created it (its header says so), never through a link; each line flushed and fsynced before use."""

    def __init__(self, path: str | Path) -> None:
        self.path, self.lock = Path(path), threading.Lock()
        if self.path.is_symlink():
            raise UsageError(f"judgments {self.path}: a symbolic link; the live judge writes no file through a link")
        if not self.path.exists():
            header = {"format": FORMAT, "version": VERSION, "writer": WRITER}
            fd = open_nofollow(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)  # ours only if we create it
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(json.dumps(header) + "\n")
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

    def append(self, line: dict[str, Any]) -> None:
        with self.lock, os.fdopen(open_nofollow(self.path, os.O_WRONLY | os.O_APPEND), "a", encoding="utf-8") as f:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())


def judge_missing(judge: CoverageJudge, cache: JudgmentsCache, judgments: Any, conv_id: str, qid: str,
                  question: str, gold: str, units: Sequence[Any]) -> Judgment:
    """Judge a question no judgment covers, append it to the cache, and add it to the judgments read."""
    line = judge.judge(conv_id, qid, question, gold, units)
    cache.append(line)
    judged = parse_judgment(line, f"{cache.path}: appended")
    judgments.add(judged)
    return judged
