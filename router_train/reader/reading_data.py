"""Public answerability data for the reader's pre-training: SQuAD 2.0 (a local file or `hf:<name>`) as (question,
sentence, target) pairs, with the negatives that teach reading rather than word matching."""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiermem.settings.errors import DataError
from tiermem.text.sentences import sentence_spans

HUB_PREFIX = "hf:"
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an the of in on at to for from by with and or but is are was were be been being do does did what which who "
    "whom whose when where why how that this these those it its as into than then there their they he she his her "
    "him we you i me my our your not no can could would should will may might must has have had about after before "
    "during over under between most many much more some any each other such only also one two".split())


@dataclass(frozen=True)
class ReadingQuestion:
    """One question with its passage. `units`: the (start, end) spans the reader sees one at a time (a chat's turns;
    empty: a paragraph's sentences); `article`: what is held out whole; `plausible`: spans an unanswerable question
    was written to look answered by."""

    article: str
    qid: str
    question: str
    context: str
    answers: tuple[tuple[int, str], ...]
    units: tuple[tuple[int, int], ...] = ()
    source: str = "squad"
    plausible: tuple[tuple[int, str], ...] = ()

    @property
    def answerable(self) -> bool:
        return bool(self.answers)

    def unit_spans(self) -> list[tuple[int, int]]:
        return list(self.units) if self.units else sentence_spans(self.context)


def _field(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise DataError(f"{where}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise DataError(f"{where}: field {key!r} must be {getattr(kind, '__name__', kind)}, got "
                        f"{type(value).__name__}")
    return value


def _question(article: str, context: str, qa: Any, where: str) -> ReadingQuestion:
    question = _field(qa, "question", str, where).strip()
    qid = str(_field(qa, "id", (str, int), where))
    impossible = qa.get("is_impossible", False) if isinstance(qa, dict) else False
    if not isinstance(impossible, bool):
        raise DataError(f"{where}: field 'is_impossible' must be true or false, got {impossible!r}")
    if not question:
        raise DataError(f"{where}: field 'question' is empty")
    spans = []
    for j, ans in enumerate([] if impossible else _field(qa, "answers", list, where)):
        text = _field(ans, "text", str, f"{where} answers[{j}]")
        start = _field(ans, "answer_start", int, f"{where} answers[{j}]")
        if not text.strip() or start < 0 or context[start: start + len(text)] != text:
            raise DataError(f"{where} answers[{j}]: {text!r} is not at answer_start {start} of the context")
        spans.append((start, text))
    if not impossible and not spans:
        raise DataError(f"{where}: an answerable question (is_impossible false) with no answers")
    return ReadingQuestion(article, qid, question, context, tuple(dict.fromkeys(spans)))


def load_squad_file(path: str | Path) -> list[ReadingQuestion]:
    """The official SQuAD 2.0 JSON shape -> questions; a malformed record names file, article, paragraph, field."""
    path = Path(path)
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DataError(f"{path}: not a readable SQuAD JSON file ({type(exc).__name__}: {exc})") from None
    out = []
    for a, article in enumerate(_field(doc, "data", list, str(path))):
        title = str(_field(article, "title", str, f"{path} data[{a}]"))
        for p, para in enumerate(_field(article, "paragraphs", list, f"{path} data[{a}] ({title})")):
            where = f"{path} data[{a}] ({title}) paragraphs[{p}]"
            context = _field(para, "context", str, where)
            for q, qa in enumerate(_field(para, "qas", list, where)):
                out.append(_question(title, context, qa, f"{where} qas[{q}]"))
    return out


def load_squad_hub(name: str, split: str) -> list[ReadingQuestion]:
    """`datasets.load_dataset(name, split=split)` rows (id, title, context, question, answers{text, answer_start})."""
    import datasets

    try:
        rows = datasets.load_dataset(name, split=split)
    except Exception as exc:  # offline hub, unknown name or split: say which data set and why
        raise DataError(f"reading data {HUB_PREFIX}{name} (split {split!r}) could not be loaded: {exc}") from None
    from router_train.reader.checks import hub_answers

    out = []
    for i, row in enumerate(rows):
        answers = hub_answers(row, f"{HUB_PREFIX}{name} [{split}] row {i}")  # rows of another shape: named
        qa = {"question": row.get("question"), "id": row.get("id"), "is_impossible": not answers,
              "answers": answers}
        out.append(_question(str(row.get("title", "")), str(row.get("context", "")), qa,
                             f"{HUB_PREFIX}{name} [{split}] row {i}"))
    return out


def load_reading_data(source: str, hub_split: str = "validation") -> tuple[list[ReadingQuestion], str]:
    """(questions, sha256 of the data): a file's bytes, or the canonical JSON of what the hub gave."""
    if source.startswith(HUB_PREFIX):
        questions = load_squad_hub(source[len(HUB_PREFIX):], hub_split)
        blob = json.dumps([q.__dict__ for q in questions], sort_keys=True).encode()
        return questions, hashlib.sha256(blob).hexdigest()
    path = Path(source)
    if not path.is_file():
        raise DataError(f"reading data {source!r}: no such file (a SQuAD 2.0 JSON file, or {HUB_PREFIX}<dataset name>)")
    return load_squad_file(path), hashlib.sha256(path.read_bytes()).hexdigest()


def content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


Pair = tuple[str, str, float, "tuple[int, int] | None"]  # (question, unit text, target, answer span in the text)


def _inside(spans: Sequence[tuple[int, str]], s: int, e: int) -> list[tuple[int, int]]:
    """The gold spans overlapping unit [s, e), clipped to it, as offsets into the unit's text."""
    return [(max(a, s) - s, min(a + len(t), e) - s) for a, t in spans if a < e and a + len(t) > s]


def erase(text: str, spans: Sequence[tuple[int, int]]) -> str | None:
    """The unit with its answer spans cut out ("I met Sam at the park yesterday" -> "I met Sam yesterday"): the
    event without the asked attribute. None when too little is left to read as a turn (< 3 words)."""
    keep, at = [], 0
    for a, b in sorted(spans):
        keep.append(text[at: max(a, at)])
        at = max(at, b)
    keep.append(text[at:])
    out = re.sub(r"\s+([,.!?;:])", r"\1", re.sub(r"\s{2,}", " ", "".join(keep))).strip()
    return out if len(_WORD.findall(out.lower())) >= 3 and out != text.strip() else None


def question_pairs(q: ReadingQuestion, negatives: int, unanswerable_units: int = 0, erased: bool = False
                   ) -> list[Pair]:
    """(question, unit, target, span) pairs. Answerable: every gold unit (target 1), the `negatives` units sharing
    most content words (target 0), with `erased` each gold unit with its spans cut out (target 0). Unanswerable: the
    `unanswerable_units` sharing most words (0 = all), a plausible answer's unit first (written to look answered)."""
    spans = q.unit_spans()
    words = content_words(q.question)

    def overlap_order(idx: Iterable[int]) -> list[int]:
        return sorted(idx, key=lambda i: (-len(words & content_words(q.context[spans[i][0]: spans[i][1]])), i))

    text = [q.context[s:e] for s, e in spans]
    if not q.answerable:
        plausible = [i for i, (s, e) in enumerate(spans) if _inside(q.plausible, s, e)]
        order = list(dict.fromkeys([*plausible, *overlap_order(range(len(spans)))]))
        keep = sorted(order[:unanswerable_units] if unanswerable_units else order)
        return [(q.question, text[i], 0.0, None) for i in keep]
    inside = {i: _inside(q.answers, s, e) for i, (s, e) in enumerate(spans)}
    gold = [i for i in range(len(spans)) if inside[i]]
    rest = overlap_order(i for i in range(len(spans)) if i not in gold)
    out = {i: (q.question, text[i], float(i in gold), inside[i][0] if i in gold else None)
           for i in [*gold, *rest[:negatives]]}
    pairs = [out[i] for i in sorted(out)]
    if erased:
        for i in gold:
            cut = erase(text[i], inside[i])
            if cut is not None:
                pairs.append((q.question, cut, 0.0, None))
    return pairs


def all_pairs(questions: Iterable[ReadingQuestion], negatives: int, unanswerable_units: int = 0,
              erased: bool = False) -> list[Pair]:
    return [p for q in questions for p in question_pairs(q, negatives, unanswerable_units, erased)]


def heldout_split(questions: Sequence[ReadingQuestion], heldout_articles: int, seed: int
                  ) -> tuple[list[ReadingQuestion], list[ReadingQuestion], list[str]]:
    """(train, held out, held-out article titles): whole articles held out, so no paragraph is in both."""
    titles = sorted({q.article for q in questions})
    if heldout_articles >= len(titles):
        raise DataError(f"reading data has {len(titles)} article(s); heldout_articles={heldout_articles} leaves "
                        "none to train on")
    held = set(random.Random(seed).sample(titles, heldout_articles))
    return ([q for q in questions if q.article not in held], [q for q in questions if q.article in held],
            sorted(held))
