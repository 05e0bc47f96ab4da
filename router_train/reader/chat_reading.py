"""Chat reading data for the reader's pre-training (Molweni, FriendsQA) as ReadingQuestions whose units are a
dialogue's turns (`speaker: text`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from router_train.reader.reading_data import ReadingQuestion, _field
from tiermem.settings.errors import DataError


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DataError(f"{path}: not a readable JSON file ({type(exc).__name__}: {exc})") from None


def _turns(lines: list[str]) -> tuple[str, tuple[tuple[int, int], ...]]:
    """The dialogue's text (turns joined by newlines) and each turn's (start, end)."""
    spans, at = [], 0
    for line in lines:
        spans.append((at, at + len(line)))
        at += len(line) + 1
    return "\n".join(lines), tuple(spans)


def _lowered(line: str) -> tuple[str, list[int]]:
    """`line.lower()` and, per character of it, the character of `line` it came from: lower-casing may lengthen a
    turn ('İ' becomes 'i' + a combining dot), so offsets into the published context are mapped, not shifted."""
    low, back = [], []
    for i, ch in enumerate(line):
        low.append(ch.lower())
        back += [i] * len(low[-1])
    return "".join(low), back


@dataclass(frozen=True)
class MolweniDialogue:
    """One Molweni dialogue as read: its turns (speaker, text) and its questions (answer spans into the turns)."""

    article: str
    turns: tuple[tuple[str, str], ...]
    questions: tuple[ReadingQuestion, ...]


def _molweni_spans(qa: dict, key: str, turns: tuple[str, tuple, list[int], list[list[int]]], where: str
                   ) -> tuple[tuple[int, str], ...]:
    """The question's `key` spans mapped from the published lower-cased context into our `speaker: text` turns."""
    text, units, starts, backs = turns
    got = []
    for j, a in enumerate(_field(qa, key, list, where) if key in qa and qa[key] is not None else []):
        awhere = f"{where} {key}[{j}]"
        start, answer = _field(a, "answer_start", int, awhere), _field(a, "text", str, awhere)
        for (s, _), o, back in zip(units, starts, backs, strict=True):
            if answer.strip() and o <= start and start + len(answer) <= o + len(back):
                a0, a1 = back[start - o] + s, back[start - o + len(answer) - 1] + s + 1
                if text[a0:a1].lower() == answer.lower():
                    got.append((a0, text[a0:a1]))
                    break
        else:
            raise DataError(f"{awhere}: {answer!r} at answer_start {start} is not inside one turn of the context")
    return tuple(dict.fromkeys(got))


def read_molweni(path: str | Path) -> list[MolweniDialogue]:
    """Molweni MRC JSON -> its dialogues (the format's one reader); a malformed record is named down to the field."""
    path = Path(path)
    data = _field(_read_json(path), "data", dict, str(path))
    out, ids = [], {}
    for d, dialogue in enumerate(_field(data, "dialogues", list, f"{path} data")):
        where = f"{path} dialogues[{d}]"
        edus = _field(dialogue, "edus", list, where)
        if not edus:
            raise DataError(f"{where}: field 'edus' is empty: a dialogue without turns has nothing to read")
        said = tuple((_field(e, "speaker", str, f"{where} edus[{i}]"), _field(e, "text", str, f"{where} edus[{i}]"))
                     for i, e in enumerate(edus))
        lines = [f"{who}: {what}" for who, what in said]
        text, units = _turns(lines)
        original = _field(dialogue, "context", str, where)
        # each turn's place in the published (lower-cased, space-joined) context, found in order
        starts, backs, at = [], [], 0
        for line in lines:
            low, back = _lowered(line)
            found = original.find(low, at)
            if found < 0:
                raise DataError(f"{where}: turn {line[:60]!r} is not in the dialogue's context")
            starts.append(found)
            backs.append(back)
            at = found + len(low)
        questions = []
        for q, qa in enumerate(_field(dialogue, "qas", list, where)):
            qwhere = f"{where} qas[{q}]"
            question = _field(qa, "question", str, qwhere).strip()
            impossible = qa.get("is_impossible", False)
            if not isinstance(impossible, bool) or not question:
                raise DataError(f"{qwhere}: 'question' must be non-empty and 'is_impossible' true or false")
            qid = _unique_id(ids, qa, qwhere)
            turns = (text, units, starts, backs)
            answers = () if impossible else _molweni_spans(qa, "answers", turns, qwhere)
            if not impossible and not answers:
                raise DataError(f"{qwhere}: an answerable question (is_impossible false) with no answers")
            plausible = _molweni_spans(qa, "plausible_answers", turns, qwhere) if impossible else ()
            questions.append(ReadingQuestion(f"molweni:{d}", qid, question, text, answers, units, "molweni",
                                             plausible))
        out.append(MolweniDialogue(f"molweni:{d}", said, tuple(questions)))
    return out


def load_molweni(path: str | Path) -> list[ReadingQuestion]:
    return [q for dialogue in read_molweni(path) for q in dialogue.questions]


def _unique_id(seen: dict[str, str], qa: Any, where: str) -> str:
    """The question's id, refused when another question of the file has it (named by both positions)."""
    qid = str(_field(qa, "id", (str, int), where))
    if qid in seen:
        raise DataError(f"{where}: question id {qid!r} repeats {seen[qid]}; ids must be unique in a file")
    seen[qid] = where
    return qid


def _speakers(utt: Any, where: str) -> list[str]:
    speakers = _field(utt, "speakers", list, where)
    if not speakers or not all(isinstance(x, str) and x.strip() for x in speakers):
        raise DataError(f"{where}: field 'speakers' must be a non-empty list of names (non-empty strings), got "
                        f"{json.dumps(speakers)[:80]}")
    return speakers


def _friendsqa_paragraph(para: Any, article: str, where: str, ids: dict[str, str]) -> list[ReadingQuestion]:
    utterances = _field(para, "utterances:", list, where)
    speakers, words = [], []
    for u, utt in enumerate(utterances):
        speakers.append(_speakers(utt, f"{where} utterances[{u}]"))
        words.append(_field(utt, "utterance", str, f"{where} utterances[{u}]").split(" "))
    names = [", ".join(x) for x in speakers]
    text, units = _turns([f"{n}: {' '.join(w)}" for n, w in zip(names, words, strict=True)])
    out = []
    for q, qa in enumerate(_field(para, "qas", list, where)):
        qwhere = f"{where} qas[{q}]"
        question = _field(qa, "question", str, qwhere).strip()
        qid = _unique_id(ids, qa, qwhere)
        answers = []
        for j, a in enumerate(_field(qa, "answers", list, qwhere)):
            awhere = f"{qwhere} answers[{j}]"
            u = _field(a, "utterance_id", int, awhere)
            if not 0 <= u < len(units):
                raise DataError(f"{awhere}: utterance_id {u} is not one of the scene's {len(units)} utterances")
            start, said, is_speaker = units[u][0], _field(a, "answer_text", str, awhere), a.get("is_speaker", False)
            if not isinstance(is_speaker, bool):  # "false" (a string) would be read as true
                raise DataError(f"{awhere}: field 'is_speaker' must be true or false, got "
                                f"{json.dumps(is_speaker)[:40]}")
            if is_speaker:  # the speaker's own name in the turn's `speaker:` prefix
                if said not in speakers[u]:
                    raise DataError(f"{awhere}: answer_text {said!r} is no speaker of utterance {u} "
                                    f"({speakers[u]})")
                k = speakers[u].index(said)
                answers.append((start + sum(len(x) + 2 for x in speakers[u][:k]), said))
                continue
            i, e = _field(a, "inner_start", int, awhere), _field(a, "inner_end", int, awhere)
            if not 0 <= i <= e < len(words[u]):
                raise DataError(f"{awhere}: words {i}..{e} are not inside utterance {u} ({len(words[u])} words)")
            offset = start + len(names[u]) + 2 + len(" ".join(words[u][:i])) + (1 if i else 0)
            span = " ".join(words[u][i: e + 1])
            if span != said:
                raise DataError(f"{awhere}: words {i}..{e} of utterance {u} are {span!r}, not the answer_text "
                                f"{said!r}")
            answers.append((offset, span))
        if not question or not answers:
            raise DataError(f"{qwhere}: a FriendsQA question needs its text and at least one answer")
        out.append(ReadingQuestion(article, qid, question, text, tuple(dict.fromkeys(answers)), units, "friendsqa"))
    return out


def load_friendsqa(path: str | Path) -> list[ReadingQuestion]:
    """FriendsQA JSON -> questions of every scene; scene titles (held out whole) and question ids are unique."""
    path = Path(path)
    out: list[ReadingQuestion] = []
    ids: dict[str, str] = {}
    titles: dict[str, str] = {}
    for s, scene in enumerate(_field(_read_json(path), "data", list, str(path))):
        title = _field(scene, "title", str, f"{path} data[{s}]")
        where = f"{path} data[{s}] ({title})"
        if title in titles:
            raise DataError(f"{where}: title {title!r} repeats {titles[title]}; two scenes would be held out as one")
        titles[title] = where
        paragraphs = _field(scene, "paragraphs", list, where)
        if not paragraphs:
            raise DataError(f"{where}: no paragraphs")
        for p, para in enumerate(paragraphs):
            out += _friendsqa_paragraph(para, f"friendsqa:{title}", f"{where} paragraphs[{p}]", ids)
    return out


LOADERS = {"molweni": load_molweni, "friendsqa": load_friendsqa}


def check_source(source: str) -> tuple[str, str]:
    """`kind:path` -> (kind, path); a kind this module cannot read is a ConfigError naming the kinds."""
    from tiermem.settings.errors import ConfigError

    kind, sep, path = str(source).partition(":")
    if not sep or kind not in LOADERS or not path:
        raise ConfigError(f"chat_data entry {source!r} must be <kind>:<file> with kind one of {sorted(LOADERS)}")
    return kind, path


def check_sources(sources: list[str]) -> None:
    """Each `kind:path` readable; no file listed twice (it would double every question, held-out ones too)."""
    from tiermem.settings.errors import ConfigError

    seen: dict[Path, str] = {}
    for source in sources:
        path = Path(check_source(source)[1]).expanduser().resolve()
        if path in seen:
            raise ConfigError(f"chat_data lists {path} twice ({seen[path]!r} and {source!r}); list each file once")
        seen[path] = source


def load_chat_source(source: str) -> tuple[list[ReadingQuestion], str]:
    """(questions, sha256 of the file) of one `kind:path` chat source, checked as SQuAD's are (reader.checks)."""
    import hashlib

    from router_train.reader.checks import check_reading_questions

    kind, path = check_source(source)
    if not Path(path).is_file():
        raise DataError(f"chat reading data {source!r}: no such file")
    questions = LOADERS[kind](path)
    check_reading_questions(questions, source)
    return questions, hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_chat_sources(sources: list[str]) -> tuple[list[ReadingQuestion], list[str]]:
    """(every source's questions, `kind:sha256` per source). A question id or scene in two sources of one kind is
    a DataError naming both; Molweni's dialogues, numbered per file, are told apart by the file's place."""
    import dataclasses

    check_sources(sources)
    out: list[ReadingQuestion] = []
    shas: list[str] = []
    owner: dict[tuple[str, str, str], str] = {}
    files: dict[str, int] = {}
    for source in sources:
        kind = source.partition(":")[0]
        questions, sha = load_chat_source(source)
        n, files[kind] = files.get(kind, 0), files.get(kind, 0) + 1
        if kind == "molweni" and n:
            questions = [dataclasses.replace(q, article=f"molweni:{n}/{q.article[len('molweni:'):]}")
                         for q in questions]
        for q in questions:
            for what, value in (("question id", q.qid), ("dialogue", q.article)):
                first = owner.setdefault((kind, what, value), source)
                if first != source:
                    raise DataError(f"chat reading data {source!r}: {what} {value!r} is also in {first!r}; a "
                                    "question in two sources is trained on twice or held out twice")
        out += questions
        shas.append(f"{kind}:{sha}")
    return out, shas
