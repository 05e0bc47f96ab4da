"""Chat reading data for the reader's pre-training, each source in its published shape, as ReadingQuestions whose
units are a dialogue's turns shown as `speaker: text` (the shape the router's units and `ask`'s sentences have).

- Molweni (multi-party Ubuntu IRC chats; `data` -> `dialogues` -> `edus` [`speaker`, `text`], `context` (the turns
  joined as `speaker: text `, lower-cased) and `qas` with `answers` [`text`, `answer_start` into `context`],
  `is_impossible`, `plausible_answers`). Offsets are mapped from the lower-cased context to the turns.
- FriendsQA (TV-show scenes; `data` -> scenes -> `paragraphs[0]` with `utterances:` [`uid`, `speakers`,
  `utterance`] and `qas` with `answers` [`answer_text`, `utterance_id`, `inner_start`, `inner_end` (word positions,
  space-split), `is_speaker`]). A speaker answer points at the name in the turn's `speaker:` prefix.

Every question's dialogue id is its `article`, so a dialogue is held out whole.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from router_train.reading_data import ReadingQuestion, _field
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


def _molweni_spans(qa: dict, key: str, turns: tuple[str, tuple, list[int]], where: str
                   ) -> tuple[tuple[int, str], ...]:
    """The question's `key` spans mapped from the published lower-cased context into our `speaker: text` turns."""
    text, units, starts = turns
    got = []
    for j, a in enumerate(qa.get(key) or []):
        awhere = f"{where} {key}[{j}]"
        start, answer = _field(a, "answer_start", int, awhere), _field(a, "text", str, awhere)
        for (s, e), o in zip(units, starts, strict=True):
            if o <= start and start + len(answer) <= o + (e - s):
                mine = text[s + start - o: s + start - o + len(answer)]
                if mine.lower() == answer.lower() and answer.strip():
                    got.append((s + start - o, mine))
                    break
        else:
            raise DataError(f"{awhere}: {answer!r} at answer_start {start} is not inside one turn of the context")
    return tuple(dict.fromkeys(got))


def load_molweni(path: str | Path) -> list[ReadingQuestion]:
    path = Path(path)
    doc = _read_json(path)
    data = _field(doc, "data", dict, str(path))
    out = []
    for d, dialogue in enumerate(_field(data, "dialogues", list, f"{path} data")):
        where = f"{path} dialogues[{d}]"
        edus = _field(dialogue, "edus", list, where)
        lines = [f"{_field(e, 'speaker', str, f'{where} edus[{i}]')}: {_field(e, 'text', str, f'{where} edus[{i}]')}"
                 for i, e in enumerate(edus)]
        text, units = _turns(lines)
        original = _field(dialogue, "context", str, where)
        # each turn's place in the published (lower-cased, space-joined) context, found in order
        starts, at = [], 0
        for line in lines:
            found = original.find(line.lower(), at)
            if found < 0:
                raise DataError(f"{where}: turn {line[:60]!r} is not in the dialogue's context")
            starts.append(found)
            at = found + len(line)

        for q, qa in enumerate(_field(dialogue, "qas", list, where)):
            qwhere = f"{where} qas[{q}]"
            question = _field(qa, "question", str, qwhere).strip()
            impossible = qa.get("is_impossible", False)
            if not isinstance(impossible, bool) or not question:
                raise DataError(f"{qwhere}: 'question' must be non-empty and 'is_impossible' true or false")

            turns = (text, units, starts)
            answers = () if impossible else _molweni_spans(qa, "answers", turns, qwhere)
            if not impossible and not answers:
                raise DataError(f"{qwhere}: an answerable question (is_impossible false) with no answers")
            out.append(ReadingQuestion(f"molweni:{d}", str(_field(qa, "id", (str, int), qwhere)), question, text,
                                       answers, units, "molweni",
                                       _molweni_spans(qa, "plausible_answers", turns, qwhere) if impossible else ()))
    return out


def load_friendsqa(path: str | Path) -> list[ReadingQuestion]:
    path = Path(path)
    doc = _read_json(path)
    out = []
    for s, scene in enumerate(_field(doc, "data", list, str(path))):
        title = _field(scene, "title", str, f"{path} data[{s}]")
        where = f"{path} data[{s}] ({title})"
        paragraphs = _field(scene, "paragraphs", list, where)
        if not paragraphs:
            raise DataError(f"{where}: no paragraphs")
        para = paragraphs[0]
        utterances = _field(para, "utterances:", list, f"{where} paragraphs[0]")
        names, words = [], []
        for u, utt in enumerate(utterances):
            uwhere = f"{where} utterances[{u}]"
            speakers = _field(utt, "speakers", list, uwhere)
            names.append(", ".join(str(x) for x in speakers) or "someone")
            words.append(_field(utt, "utterance", str, uwhere).split(" "))
        text, units = _turns([f"{n}: {' '.join(w)}" for n, w in zip(names, words, strict=True)])
        for q, qa in enumerate(_field(para, "qas", list, f"{where} paragraphs[0]")):
            qwhere = f"{where} qas[{q}]"
            question = _field(qa, "question", str, qwhere).strip()
            answers = []
            for j, a in enumerate(_field(qa, "answers", list, qwhere)):
                awhere = f"{qwhere} answers[{j}]"
                u = _field(a, "utterance_id", int, awhere)
                if not 0 <= u < len(units):
                    raise DataError(f"{awhere}: utterance_id {u} is not one of the scene's {len(units)} utterances")
                start = units[u][0]
                if a.get("is_speaker"):
                    answers.append((start, names[u]))
                    continue
                i, e = _field(a, "inner_start", int, awhere), _field(a, "inner_end", int, awhere)
                if not 0 <= i <= e < len(words[u]):
                    raise DataError(f"{awhere}: words {i}..{e} are not inside utterance {u} ({len(words[u])} words)")
                offset = start + len(names[u]) + 2 + len(" ".join(words[u][:i])) + (1 if i else 0)
                span = " ".join(words[u][i: e + 1])
                if span != _field(a, "answer_text", str, awhere):
                    raise DataError(f"{awhere}: words {i}..{e} of utterance {u} are {span!r}, not the answer_text "
                                    f"{a['answer_text']!r}")
                answers.append((offset, span))
            if not question or not answers:
                raise DataError(f"{qwhere}: a FriendsQA question needs its text and at least one answer")
            out.append(ReadingQuestion(f"friendsqa:{title}", str(_field(qa, "id", (str, int), qwhere)), question,
                                       text, tuple(dict.fromkeys(answers)), units, "friendsqa"))
    return out


LOADERS = {"molweni": load_molweni, "friendsqa": load_friendsqa}


def check_source(source: str) -> tuple[str, str]:
    """`kind:path` -> (kind, path); a kind this module cannot read is a ConfigError naming the kinds."""
    from tiermem.settings.errors import ConfigError

    kind, sep, path = str(source).partition(":")
    if not sep or kind not in LOADERS or not path:
        raise ConfigError(f"chat_data entry {source!r} must be <kind>:<file> with kind one of {sorted(LOADERS)}")
    return kind, path


def load_chat_source(source: str) -> tuple[list[ReadingQuestion], str]:
    """(questions, sha256 of the file) of one `kind:path` chat source."""
    import hashlib

    kind, path = check_source(source)
    if not Path(path).is_file():
        raise DataError(f"chat reading data {source!r}: no such file")
    return LOADERS[kind](path), hashlib.sha256(Path(path).read_bytes()).hexdigest()
