"""Grounding an answer in what was read: the quote it rests on, and an extractive answer (the best-matching sentence,
verbatim with speaker and date) when the LM's is unusable (docs/DESIGN.md, "... answers that rest on a quote")."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tiermem.memory.raw_store import Page
from tiermem.memory.summaries import RetrievedUnit, absolutize, day_of
from tiermem.memory.text import content_words, split_sentences
from tiermem.text.words import normalize, stem

# What the answer prompts show and a reply copying them starts with: "(17 March 2024)", "[3]" or "[D1:3]" (a note
# or turn marker), "Tomas:" (a speaker of what was read). A list marker ("1.") and an "Answer:" preamble are only
# stripped: a reply may start with them and still answer.
_MARKER = re.compile(r"^\s*(?:\([^)]*\)|\[[^\]]*\])\s*")
_SPEAKER = re.compile(r"^\s*([\w .'-]{1,40}):\s*")
_PREAMBLE = re.compile(r"^\s*(?:\d{1,2}[.)]\s+|(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*:\s*)", re.IGNORECASE)
_TURN_ID = re.compile(r"^\s*\[?[A-Za-z]{0,8}\d+[:-]\d+\]?\s*$")  # "D19:3", "s1-1": an id, not an answer
_YES_NO = {"yes", "no"}  # complete answers made only of stop words


@dataclass
class Evidence:
    """One sentence of the conversation, verbatim, with where it came from."""

    quote: str
    speaker: str | None
    date: str | None
    turn_id: str | None
    page_id: str | None
    source: str  # "page" (a raw turn the research path read) | "summary" (a retrieved summary unit)
    unit_id: str | None = None

    def cite(self) -> str:
        """`"<quote>" (<speaker>, <date>; turn <id>)`: how `ask` shows it."""
        who = ", ".join(x for x in (self.speaker, self.date) if x)
        where = f"turn {self.turn_id}" if self.turn_id else (f"unit {self.unit_id}" if self.unit_id else "")
        meta = "; ".join(x for x in (who, where) if x)
        return f'"{self.quote}"' + (f" ({meta})" if meta else "")


@dataclass
class _Candidate:
    evidence: Evidence
    resolved: str  # the sentence with relative dates made absolute ("yesterday (16 March 2024)")
    words: frozenset[str]
    similarity: float = 0.0  # cosine to the question (with_similarity); 0 when no embedder scored it
    context: frozenset[str] = frozenset()  # its speaker and the rest of its turn ("called Pepper" by "I adopted")
    timed: bool = False  # names a time (a date, a month, a weekday, "yesterday", ...)


# How much meaning counts beside shared words, and the similarity at which a sentence sharing no word with the
# question still counts as matching it (a paraphrase; all-MiniLM-L6-v2 puts unrelated chat turns below ~0.3).
SIMILARITY_WEIGHT = 2.0
MIN_SIMILARITY = 0.45
CONTEXT_WEIGHT = 0.5  # a question word found elsewhere in the sentence's turn counts half
TIME_BONUS = 1.0  # a "when" question prefers a sentence that names a time
SUPPORT_K = 2  # an LM answer must draw on the sentences that best match the question, not on any page text
_TIME = re.compile(
    r"\b(?:\d{4}|\d{1,2}(?:st|nd|rd|th)?|january|february|march|april|may|june|july|august|september|october|"
    r"november|december|monday|tuesday|wednesday|thursday|friday|saturday|sunday|yesterday|today|tonight|"
    r"tomorrow|ago|last|next)\b", re.IGNORECASE)  # not a bare "year": "a three-year-old dog" names no time
_WHEN = re.compile(r"^\W*(?:when\b|(?:what|which) (?:date|day|year|month|time)\b|how long ago\b)", re.IGNORECASE)


def with_similarity(candidates: list[_Candidate], similarities: Sequence[float]) -> list[_Candidate]:
    for cand, sim in zip(candidates, similarities, strict=True):
        cand.similarity = float(sim)
    return candidates


_POSSESSIVE = re.compile(r"(?<=\w)['\u2019]s\b")


def _stems(text: str) -> set[str]:
    """Folded content words; "Tomas's" is "Tomas" (normalize alone makes it "tomass", no name of anyone)."""
    return {stem(w) for w in content_words(_POSSESSIVE.sub("", text))}


def page_candidates(pages: Sequence[Page]) -> list[_Candidate]:
    out = []
    for page in pages:
        for turn in page.turns:
            turn_words = _stems(f"{turn.speaker} {turn.text}")  # "Ines" in a question points to Ines's turns
            for sentence in split_sentences(turn.text):
                ev = Evidence(sentence, turn.speaker, day_of(turn.timestamp), turn.turn_id, page.page_id, "page")
                words = frozenset(_stems(sentence))
                out.append(_Candidate(ev, absolutize(sentence, turn.timestamp), words,
                                      context=frozenset(turn_words - words), timed=bool(_TIME.search(sentence))))
    return out


def summary_candidates(units: Sequence[RetrievedUnit], speakers: dict[str, str] | None = None) -> list[_Candidate]:
    """Retrieved units as candidates; `speakers`: turn id -> speaker (an extractive unit's "<speaker>: " split off)."""
    out = []
    for unit in units:
        turn_id = unit.turn_ids[0] if unit.turn_ids else None
        speaker = (speakers or {}).get(turn_id or "")
        text = unit.text
        if speaker and text.startswith(f"{speaker}: "):
            text = text[len(speaker) + 2:]
        ev = Evidence(text, speaker, unit.date, turn_id, unit.page_ids[0] if unit.page_ids else None, "summary",
                      unit.unit_id)
        out.append(_Candidate(ev, text, frozenset(_stems(text)), unit.score,  # retrieval's cosine to the question
                              timed=bool(_TIME.search(text))))
    return out


def _idf(candidates: Sequence[_Candidate]) -> dict[str, float]:
    df = Counter(w for c in candidates for w in c.words)
    n = len(candidates)
    return {w: math.log(1 + n / k) for w, k in df.items()}


def ranked(question: str, candidates: Sequence[_Candidate], answer: str | None = None) -> list[_Candidate]:
    """The matching candidates, best first: idf-weighted words shared with the question (and doubled, with `answer`:
    the quote under an LM answer should contain it), plus context, similarity and time; ties to the shorter one."""
    idf = _idf(candidates)
    # speakers are named all over their conversation ("Hey Nate!"): their names count as context, never the match
    names = {w for c in candidates if c.evidence.speaker for w in _stems(c.evidence.speaker)}
    asked = _stems(question) - names
    answered = _stems(answer) - asked - names if answer else set()
    when = bool(_WHEN.search(question))
    named = _stems(question) & names
    scored = []
    for i, cand in enumerate(candidates):
        lexical = sum(idf[w] for w in cand.words & asked) + 2 * sum(idf[w] for w in cand.words & answered)
        if lexical <= 0 and cand.similarity < MIN_SIMILARITY:
            continue
        score = (lexical + CONTEXT_WEIGHT * sum(idf.get(w, 0.0) for w in cand.context & asked)
                 + CONTEXT_WEIGHT * sum(idf.get(w, 0.0) for w in (cand.context | cand.words) & named)
                 + SIMILARITY_WEIGHT * cand.similarity + (TIME_BONUS if when and cand.timed else 0.0))
        scored.append(((-score, len(cand.words), i), cand))
    return [cand for _, cand in sorted(scored, key=lambda pair: pair[0])]


def best_sentence(question: str, candidates: Sequence[_Candidate], answer: str | None = None) -> _Candidate | None:
    best = ranked(question, candidates, answer)
    return best[0] if best else None


def extractive_answer(cand: _Candidate) -> str:
    """`<speaker> (<date>): "<sentence, relative dates resolved>"`: the fallback answer, quoted with its source."""
    ev = cand.evidence
    who = " ".join(x for x in (ev.speaker, f"({ev.date})" if ev.date else None) if x)
    return f'{who}: "{cand.resolved}"' if who else f'"{cand.resolved}"'


def unusable_reason(answer: str | None, question: str, read_text: str,
                    speakers: Iterable[str] = (), support_text: str | None = None) -> str | None:
    """Why an LM answer cannot be shown, or None. "not in what was read" also catches an abstention; "unsupported":
    under half its words in `support_text` (the best-matching sentences), a reply assembled from elsewhere."""
    text = (answer or "").strip()
    if not normalize(text):
        return "empty"
    if _TURN_ID.match(text):
        return "fragment"
    names = {normalize(s) for s in speakers} | {"assistant", "user"}
    body, copied = text, False
    while True:
        stripped = _PREAMBLE.sub("", body, count=1)
        if stripped == body:
            stripped = _MARKER.sub("", body, count=1)
            speaker = _SPEAKER.match(body)
            if stripped == body and speaker and normalize(speaker.group(1)) in names:
                stripped = body[speaker.end():]
            copied |= stripped != body
        if stripped == body:
            break
        body = stripped
    words = _stems(body)
    if not words and normalize(body).split()[:1] not in (["yes"], ["no"]):
        return "fragment"
    if copied:
        return "copied excerpt"
    if normalize(body).split()[0] in _YES_NO:
        return None
    novel = words - _stems(question)
    if not novel:
        return "echo"
    if not novel & _stems(read_text):
        return "not in what was read"
    if _WHEN.search(question) and not _TIME.search(body):
        return "no time"
    if support_text is not None and 2 * len(novel & _stems(support_text)) < len(novel):
        return "unsupported"
    return None


@dataclass
class Grounded:
    answer: str
    source: str  # "lm" | "extractive"
    reason: str | None  # why the LM's answer was replaced (unusable_reason); None when it was kept
    evidence: Evidence | None
    extractive: str | None  # the extractive answer (kept even when the LM's answer is shown, for evaluation)


def ground(question: str, lm_answer: str | None, candidates: Sequence[_Candidate]) -> Grounded:
    """A usable LM answer with its best quote, else the best-matching quote (none: the LM answer stays, flagged)."""
    def text(cands: Sequence[_Candidate], dated: bool = True) -> str:  # what the prompts showed: sentence, date
        return " ".join(f"{c.evidence.quote} {c.resolved} {c.evidence.date if dated and c.evidence.date else ''}"
                        for c in cands)

    matching = ranked(question, candidates)
    speakers = {c.evidence.speaker for c in candidates if c.evidence.speaker}
    # a turn's date supports a date answer to a "when" question only: every sentence has one
    support = text(matching[:SUPPORT_K], dated=bool(_WHEN.search(question))) if matching else None
    reason = unusable_reason(lm_answer, question, text(candidates), speakers, support)
    fallback = matching[0] if matching else None
    extractive = extractive_answer(fallback) if fallback else None
    if reason is None:
        support = best_sentence(question, candidates, lm_answer) or fallback
        return Grounded(lm_answer or "", "lm", None, support.evidence if support else None, extractive)
    if fallback is None:
        return Grounded(lm_answer or "", "lm", reason, None, None)
    return Grounded(extractive or "", "extractive", reason, fallback.evidence, extractive)
