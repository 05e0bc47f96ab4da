"""Careful-reading judgments (`tiermem-judgments` v1): a coverage judge's verdicts and a blind teacher's decisions,
one question a line, each handed out only for the units it read (docs/formats.md)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labeling.dataset import RecordError
from tiermem import contract
from tiermem.data.textfile import jsonl_records, read_utf8
from tiermem.runs.safe_io import check_file_path
from tiermem.settings.errors import ConfigError, MissingFileError

FORMAT, VERSION = "tiermem-judgments", 1
VERDICTS = ("yes", "no", "partial")
MATCH_OUTCOMES = ("matched", "no_judgment", "question_differs", "units_differ")


def text_digest(text: str) -> str:
    """First 16 hex digits of the sha1 of the UTF-8 text: how a judgment names the text it read."""
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]  # a lone surrogate: no crash


def units_digest(texts: Sequence[str]) -> str:
    """Digest of the texts as one JSON list (ASCII escapes: any string, a lone surrogate too, has one encoding)."""
    return hashlib.sha1(json.dumps(["tiermem-units", 2, *texts]).encode("ascii")).hexdigest()[:16]


def legacy_units_digest(texts: Sequence[str]) -> str:
    """The older digest: the texts joined by newlines (['a\\nb', 'c'] and ['a', 'b', 'c'] join alike: `Judgment.reads`
    settles a text holding a newline by the units' own digests)."""
    return text_digest("\n".join(texts))


@dataclass(frozen=True)
class UnitJudgment:
    rank: int
    unit_id: str
    text_sha1: str
    verdict: str  # yes | no | partial
    span: str | None  # the unit's words that carry the answer (null for "no", or where none was quoted)


@dataclass(frozen=True)
class TeacherDecision:
    action: str  # ANSWER | ESCALATE
    confidence: int  # 1 (a guess) .. 5 (sure)
    thinking: str

    def p_escalate(self) -> float:
        """The decision as a probability of ESCALATE: confidence c of 1..5 maps to 0.5 + 0.09 c on its side (a
        sure 5 is 0.95, never certainty: its log-odds stay finite)."""
        p = 0.5 + 0.09 * self.confidence
        return p if self.action == contract.ACTIONS[1] else 1.0 - p


@dataclass(frozen=True)
class Judgment:
    conv_id: str
    qid: str
    question: str
    units_sha1: str
    units: tuple[UnitJudgment, ...]
    verdict: str  # the question's: yes | no | partial
    reason: str
    gold_doubtful: bool
    teacher: TeacherDecision | None

    def reads(self, unit_texts: Sequence[str]) -> bool:
        """Whether this judgment read exactly these units: as many as it judged, and their digest."""
        if len(unit_texts) != len(self.units):
            return False
        if self.units_sha1 == units_digest(unit_texts):
            return True
        if self.units_sha1 != legacy_units_digest(unit_texts):
            return False
        if not any("\n" in t for t in unit_texts):
            return True
        ranked = sorted(self.units, key=lambda u: u.rank)  # a newline in a text: each unit's own digest decides
        return all(u.text_sha1 == text_digest(t) for u, t in zip(ranked, unit_texts, strict=True))

    @property
    def sufficient(self) -> bool:
        """The conservative reading: only a plain yes says the summaries suffice (partial is no)."""
        return self.verdict == "yes"

    def unit(self, rank: int, text: str) -> UnitJudgment | None:
        """The judged unit at `rank`, if it read exactly `text`."""
        for u in self.units:
            if u.rank == rank and u.text_sha1 == text_digest(text):
                return u
        return None

    def to_record(self) -> dict[str, Any]:
        """The judgment as a label record keeps it (the `judgment` JSON string): the verdicts, not the units' text."""
        return {"source": FORMAT, "verdict": self.verdict, "reason": self.reason, "gold_doubtful": self.gold_doubtful,
                "units_sha1": self.units_sha1,
                "units": [{"rank": u.rank, "verdict": u.verdict, "span": u.span} for u in self.units]}


def _get(obj: Mapping[str, Any], name: str, kind: Any, where: str, allow_none: bool = False) -> Any:
    if name not in obj:
        raise RecordError(f"{where}: missing field {name!r}")
    value = obj[name]
    if value is None and allow_none:
        return None
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise RecordError(f"{where}: field {name!r} must be {names}{' or null' if allow_none else ''}, got {value!r}")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:  # JSON's "\ud800" escape: text no UTF-8 file or reply can hold
            raise RecordError(f"{where}: field {name!r} holds a lone surrogate (U+{ord(value[exc.start]):04X}) at "
                              f"character {exc.start}: not valid Unicode text") from None
    return value


def _choice(obj: Mapping[str, Any], name: str, allowed: Sequence[str], where: str) -> str:
    value = _get(obj, name, str, where)
    if value not in allowed:
        raise RecordError(f"{where}: field {name!r} must be one of {list(allowed)}, got {value!r}")
    return value


def _digest(obj: Mapping[str, Any], name: str, where: str) -> str:
    value = _get(obj, name, str, where)
    if len(value) != 16 or any(c not in "0123456789abcdef" for c in value):
        raise RecordError(f"{where}: field {name!r} must be 16 lower-case hex digits (text_digest), got {value!r}")
    return value


def parse_judgment(obj: Any, where: str) -> Judgment:
    """One judgment line, every field checked: a RecordError names the line and the field."""
    if not isinstance(obj, dict):
        raise RecordError(f"{where}: a judgment is a JSON object, got {type(obj).__name__}")
    units_raw = _get(obj, "units", list, where)
    units = []
    for j, u in enumerate(units_raw):
        at = f"{where}: field 'units[{j}]'"
        if not isinstance(u, dict):
            raise RecordError(f"{at} must be an object, got {u!r}")
        rank = _get(u, "rank", int, at)
        if rank < 1:
            raise RecordError(f"{at}: field 'rank' must be >= 1, got {rank}")
        span = _get(u, "span", str, at, allow_none=True)
        units.append(UnitJudgment(rank, _get(u, "unit_id", str, at), _digest(u, "text_sha1", at),
                                  _choice(u, "verdict", VERDICTS, at), span if span and span.strip() else None))
    ranks = [u.rank for u in units]
    if ranks != list(range(1, len(units) + 1)):
        raise RecordError(f"{where}: field 'units' must list ranks 1..{len(units)} in order, got {ranks}")
    teacher = None
    raw = _get(obj, "teacher", dict, where, allow_none=True)
    if raw is not None:
        at = f"{where}: field 'teacher'"
        confidence = _get(raw, "confidence", int, at)
        if not 1 <= confidence <= 5:
            raise RecordError(f"{at}: field 'confidence' must be 1..5, got {confidence}")
        teacher = TeacherDecision(_choice(raw, "action", contract.ACTIONS, at), confidence,
                                  _get(raw, "thinking", str, at))
    return Judgment(
        conv_id=_get(obj, "conv_id", str, where), qid=_get(obj, "qid", str, where),
        question=_get(obj, "question", str, where), units_sha1=_digest(obj, "units_sha1", where),
        units=tuple(units), verdict=_choice(obj, "verdict", VERDICTS, where), reason=_get(obj, "reason", str, where),
        gold_doubtful=_get(obj, "gold_doubtful", bool, where), teacher=teacher)


class Judgments:
    """A judgments file, read and checked whole; `match` answers per question."""

    def __init__(self, path: str | Path, header: dict[str, Any], items: Sequence[Judgment]) -> None:
        self.path, self.header = str(path), header
        self.by_key: dict[tuple[str, str], Judgment] = {}
        for j in items:
            if (j.conv_id, j.qid) in self.by_key:
                raise RecordError(f"{path}: question {j.qid!r} of {j.conv_id!r} is judged twice")
            self.by_key[(j.conv_id, j.qid)] = j
        self.by_units = {(j.question, j.units_sha1): j for j in items}

    def add(self, j: Judgment) -> None:
        """A judgment made in this run (the live coverage judge's), as if it had been read from the file."""
        if (j.conv_id, j.qid) in self.by_key:
            raise RecordError(f"{self.path}: question {j.qid!r} of {j.conv_id!r} is judged twice")
        self.by_key[(j.conv_id, j.qid)] = j
        self.by_units[(j.question, j.units_sha1)] = j

    def __len__(self) -> int:
        return len(self.by_key)

    def match(self, conv_id: str, qid: str, question: str, unit_texts: Sequence[str]) -> tuple[Judgment | None, str]:
        """(the judgment of these exact units, "matched"), or (None, why not: one of MATCH_OUTCOMES)."""
        j = self.by_key.get((str(conv_id), str(qid)))
        if j is None:
            return None, "no_judgment"
        if j.question != question:
            return None, "question_differs"
        if not j.reads(unit_texts):
            return None, "units_differ"
        return j, "matched"

    def lookup(self, question: str, unit_texts: Sequence[str]) -> Judgment | None:
        """The judgment of this question over exactly these units (a router sees no conversation or question id)."""
        for digest in (units_digest(unit_texts), legacy_units_digest(unit_texts)):
            j = self.by_units.get((question, digest))
            if j is not None and j.reads(unit_texts):
                return j
        return None


def load_judgments(path: str | Path, allow_empty: bool = False) -> Judgments:
    """The whole file, checked; `allow_empty`: a header alone is a file (a live judge's cache before its first)."""
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"judgments file {path} not found (judgments: PATH, a tiermem-judgments .jsonl)")
    check_file_path(path, "judgments")  # a FIFO would block the read for ever, a directory fail inside it
    return parse_judgments(path, read_utf8(path, RecordError), allow_empty)


def parse_judgments(path: str | Path, text: str, allow_empty: bool = False) -> Judgments:
    lines = list(jsonl_records(text, path, RecordError))
    if not lines:
        raise RecordError(f"{path}: empty; line 1 must be the header {{\"format\": \"{FORMAT}\", \"version\": 1}}")
    number, header = lines[0]
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise RecordError(f"{path}: line {number}: the header must say \"format\": \"{FORMAT}\", got {header!r:.120}")
    if header.get("version") != VERSION:
        raise RecordError(f"{path}: line {number}: field 'version' must be {VERSION}, got {header.get('version')!r}")
    items = [parse_judgment(obj, f"{path}: line {n}") for n, obj in lines[1:]]
    if not items and not allow_empty:
        raise RecordError(f"{path}: the header is followed by no judgment")
    return Judgments(path, header, items)


# ---- what a label run reports -------------------------------------------------------------------


def check_covers(path: str | Path, judgments: Judgments, keys: Sequence[tuple[str, str]]) -> None:
    """Before labeling: refuse a judgments file none of whose judgments names one of the selected questions."""
    if not keys or any(k in judgments.by_key for k in keys):
        return
    raise ConfigError(f"judgments {path}: none of its {len(judgments)} judgment(s) names one of the "
                      f"{len(keys)} selected questions (conv_id and qid): the file of other data? Give the "
                      "conversations it judged, or leave judgments out to label by the lexical rule")


def check_matched(path: str | Path, stats: dict[str, Any] | None) -> None:
    """After labeling: refuse a run whose judgments matched none of its questions' units (its records are kept)."""
    if not stats or not stats["questions"] or stats["by_match"]["matched"]:
        return
    raise ConfigError(f"judgments {path}: 0 of {stats['questions']} questions judged over their units "
                      f"({stats['by_match']}): the units this run retrieved are not the ones judged (another "
                      "memory or top_k?); no dataset written")


def coverage_line(path: str | Path, stats: dict[str, Any] | None) -> str | None:
    """The command line's account of the judgments a label run read."""
    if not stats:
        return None
    m = stats["by_match"]
    return (f"judgments {path}: {m['matched']} of {stats['questions']} questions judged over their units "
            f"({m['units_differ']} over other units, {m['question_differs']} with another question text, "
            f"{m['no_judgment']} not judged: the lexical rule for those)")


def judged_stats(records: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Coverage and the lexical-vs-judged tables over the natural records (None: the run read no judgments)."""
    natural = [r for r in records if not r.get("augmentation") and not r.get("error")]
    if not any(r.get("s_ok_by") for r in natural):
        return None
    matched = [r for r in natural if r.get("s_ok_by") == "judgment"]
    outcomes = Counter(r.get("judgment_match") or "no_judgment" for r in natural)
    labels = Counter(f"{r.get('label_evidence') or 'unlabeled'} -> {r.get('label') or 'unlabeled'}" for r in matched)
    both = [r for r in matched if r.get("label_evidence") and r.get("label")]
    units = Counter((("states" if u["s_ok"] else "does not"), u.get("verdict")) for r in matched
                    for u in r.get("unit_targets") or [] if u.get("verdict"))
    taught = [(json.loads(r["teacher"]), r["label"]) for r in matched if r.get("teacher") and r.get("label")]
    recorded = [(t, lab) for t, lab in taught if t.get("source") == FORMAT]
    return {"questions": len(natural), "by_match": {k: outcomes.get(k, 0) for k in MATCH_OUTCOMES},
            "coverage": round(len(matched) / len(natural), 4) if natural else None,
            "labels_lexical_to_judged": dict(sorted(labels.items())),
            "label_agreement": {"n": len(both), "agree": sum(r["label_evidence"] == r["label"] for r in both)},
            "units_lexical_vs_judged": {f"{a}/{b}": n for (a, b), n in sorted(units.items())},
            "teacher_label_agreement": {"n": len(recorded),
                                        "agree": sum(t["action"] == lab for t, lab in recorded)}}


def report_lines(stats: dict[str, Any] | None) -> list[str]:
    if not stats:
        return []
    m, a, t = stats["by_match"], stats["label_agreement"], stats["teacher_label_agreement"]
    lines = ["", "## Careful-reading judgments", "",
             f"Summary verdicts from the judgments file for {m['matched']} of {stats['questions']} questions "
             f"(coverage {stats['coverage']}); the lexical rule for the rest: {m['no_judgment']} not judged, "
             f"{m['units_differ']} judged over other units, {m['question_differs']} with another question text.",
             f"Lexical label vs judged label: {a['agree']} of {a['n']} agree; teacher decision vs label: "
             f"{t['agree']} of {t['n']} agree.", "", "| lexical label -> judged label | questions |", "|---|---|"]
    lines += [f"| {k} | {n} |" for k, n in stats["labels_lexical_to_judged"].items()]
    lines += ["", "| unit: lexical rule / judged verdict | units |", "|---|---|"]
    lines += [f"| {k} | {n} |" for k, n in stats["units_lexical_vs_judged"].items()]
    return lines
