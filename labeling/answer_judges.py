"""Answer judges for hindsight labeling: LoCoMo's lexical score, an LLM judge and a strict sufficiency judge."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from nltk.stem import PorterStemmer

from tiermem.text.answer_match import DATE_ORDERS, When, canonical_text, contradicts, find_dates, spoken
from tiermem.text.json_text import bounded_reply, first_json_object

_STEMMER = PorterStemmer()
_ARTICLES_RE = re.compile(r"\b(a|an|the|and)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
LOCOMO_MULTI_HOP = "1"
LOCOMO_CUT_AT_SEMICOLON = "3"


def normalize_answer(text: str) -> str:
    text = str(text).replace(",", "").lower().translate(_PUNCT)
    return " ".join(_ARTICLES_RE.sub(" ", text).split())


@lru_cache(maxsize=65536)
def stem_word(word: str) -> str:
    return _STEMMER.stem(word)


def stemmed_tokens(text: str) -> list[str]:
    return [stem_word(w) for w in normalize_answer(text).split()]


def token_f1(prediction: str, gold: str) -> float:
    pred, ref = stemmed_tokens(prediction), stemmed_tokens(gold)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def multi_hop_f1(prediction: str, gold: str) -> float:
    """Mean over gold sub-answers of the best F1 against any prediction part (both split at ',')."""
    parts = [p.strip() for p in str(prediction).split(",")]
    golds = [g.strip() for g in str(gold).split(",")]
    return sum(max(token_f1(p, g) for p in parts) for g in golds) / len(golds)


def scoring_gold(gold: str, category: str, source: str = "locomo") -> str:
    """The gold string the scorer compares against (LoCoMo category 3 keeps the part before ';')."""
    gold = str(gold)
    if source == "locomo" and str(category) == LOCOMO_CUT_AT_SEMICOLON:
        return gold.split(";")[0].strip()
    return gold


def locomo_score(prediction: str, gold: str, category: str, source: str = "locomo") -> float:
    gold = scoring_gold(gold, category, source)
    if source == "locomo" and str(category) == LOCOMO_MULTI_HOP:
        return multi_hop_f1(prediction, gold)
    return token_f1(prediction, gold)


@dataclass
class Verdict:
    judge: str  # "lexical" | "llm"
    correct: bool
    score: float | None  # lexical F1; None for the LLM judge
    reason: str
    parsed_ok: bool = True  # False: LLM output unreadable -> correct=False, counted


@dataclass
class Sufficiency:
    sufficient: bool
    reason: str
    parsed_ok: bool


class LexicalJudge:
    name = "lexical"

    def __init__(self, threshold: float = 0.3, date_order: str = "DMY"):
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"lexical judge threshold must be in [0, 1], got {threshold}")
        if date_order not in DATE_ORDERS:
            raise ValueError(f"lexical judge date_order must be one of {DATE_ORDERS}, got {date_order!r}")
        self.threshold = threshold
        self.date_order = date_order

    def judge(self, question: str, gold: str, answer: str, category: str, source: str = "locomo") -> Verdict:
        """LoCoMo's F1 with dates and numbers written one way: '18.01.2024' and '18 January 2024' are one answer."""
        score = locomo_score(canonical_text(answer or "", None, self.date_order),
                             canonical_text(gold, None, self.date_order), category, source)
        correct = score >= self.threshold
        relation = ">=" if correct else "<"
        wrong_date = self.contradicted_date(gold, answer, category, source)
        if correct and wrong_date is not None:  # answer matching's rule: a wrong day is a wrong date, whatever F1
            return Verdict(self.name, False, round(score, 4),
                           f"F1 {score:.3f} >= {self.threshold}, but the answer's date contradicts the gold's "
                           f"{spoken(wrong_date)}")
        return Verdict(self.name, correct, round(score, 4), f"F1 {score:.3f} {relation} {self.threshold}")

    def contradicted_date(self, gold: str, answer: str, category: str, source: str) -> When | None:
        """A date of the gold answer that every date of the answer contradicts; None when the answer gives no date
        or one that can be the gold's (a token F1 over '8 may 2023' and '7 may 2023' is 0.67: two of three right)."""
        stated = [m.when for m in find_dates(answer or "", None, self.date_order)]
        if not stated:
            return None
        golds = [m.when for m in find_dates(scoring_gold(gold, category, source), None, self.date_order)]
        return next((g for g in golds if all(contradicts(s, g) for s in stated)), None)


JUDGE_SYSTEM = (
    "You grade answers to questions about a long conversation. Compare the generated answer with the gold "
    "answer. Be generous on format: the same date, number or name written differently counts (e.g. '7 May 2023' "
    "and 'May 7th, 2023'); a longer answer that contains the gold answer counts; an answer about the right time "
    "period counts for a relative date. An answer that contradicts the gold answer, misses its key fact, or says "
    "it does not know is WRONG.\n"
    'Reply with JSON only: {"reason": "<one short sentence>", "label": "CORRECT" or "WRONG"}'
)
JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"reason": {"type": "string"}, "label": {"type": "string", "enum": ["CORRECT", "WRONG"]}},
    "required": ["reason", "label"],
}

SUFFICIENCY_SYSTEM = (
    "You audit a memory system. Given a question, its gold answer and the summaries a system retrieved, decide "
    "whether the summaries ALONE are enough to give the gold answer exactly and completely, without guessing.\n"
    "Sufficient only if: the answer is stated directly (not implied); dates, numbers and names are exact; every "
    "item of a list or count is present; no cause is inferred from an effect. If anything is missing, vague or in "
    "doubt, it is insufficient.\n"
    'Reply with JSON only: {"sufficient": true or false, "reason": "<one short sentence>"}'
)
SUFFICIENCY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"sufficient": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["sufficient", "reason"],
}


def parse_correct_wrong(text: str) -> tuple[bool | None, str]:
    """(True/False, reason) from a judge reply; (None, '') when it says neither or both."""
    text = bounded_reply(text)
    obj = first_json_object(text)
    if obj is not None and isinstance(obj.get("label"), str):
        label = obj["label"].strip().upper()
        if label in ("CORRECT", "WRONG"):
            reason = obj.get("reason")
            return label == "CORRECT", reason if isinstance(reason, str) else ""
    words = set(re.findall(r"\b(CORRECT|WRONG)\b", (text or "").upper()))
    if len(words) == 1:
        return words == {"CORRECT"}, " ".join((text or "").split())[:200]
    return None, ""


def parse_sufficiency(text: str) -> Sufficiency:
    obj = first_json_object(text)
    if obj is not None:
        value = obj.get("sufficient", obj.get("has_sufficient_info"))
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            value = value.strip().lower() == "true"
        if isinstance(value, bool):
            reason = obj.get("reason")
            return Sufficiency(value, reason if isinstance(reason, str) else "", True)
    # Strict by design: anything unreadable is insufficient, and flagged so it is counted.
    return Sufficiency(False, "unparseable sufficiency output", False)


class LLMJudge:
    name = "llm"

    def __init__(self, llm: Any, max_tokens: int = 96):
        self.llm, self.max_tokens = llm, max_tokens

    def messages(self, question: str, gold: str, answer: str) -> list[dict[str, str]]:
        user = f"Question: {question}\nGold answer: {gold}\nGenerated answer: {answer or '(empty)'}"
        return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]

    def judge(self, question: str, gold: str, answer: str, category: str = "", source: str = "") -> Verdict:
        result = self.llm.chat(
            self.messages(question, gold, answer),
            max_tokens=self.max_tokens,
            temperature=0.0,
            json_schema=JUDGE_SCHEMA,
        )
        correct, reason = parse_correct_wrong(result.text)
        if correct is None:
            return Verdict(self.name, False, None, f"unparseable judge output: {result.text[:120]!r}", False)
        return Verdict(self.name, correct, None, reason)


class SufficiencyJudge:
    def __init__(self, llm: Any, max_tokens: int = 128):
        self.llm, self.max_tokens = llm, max_tokens

    def messages(self, question: str, gold: str, summaries: Sequence[Any]) -> list[dict[str, str]]:
        lines = []
        for i, unit in enumerate(summaries, 1):
            text = unit["text"] if isinstance(unit, dict) else unit.text
            date = unit.get("date") if isinstance(unit, dict) else getattr(unit, "date", None)
            lines.append(f"[{i}] ({date or 'undated'}) {' '.join(str(text).split())}")
        user = f"Question: {question}\nGold answer: {gold}\nSummaries:\n" + ("\n".join(lines) or "(none)")
        return [{"role": "system", "content": SUFFICIENCY_SYSTEM}, {"role": "user", "content": user}]

    def judge(self, question: str, gold: str, summaries: Sequence[Any]) -> Sufficiency:
        result = self.llm.chat(
            self.messages(question, gold, summaries),
            max_tokens=self.max_tokens,
            temperature=0.0,
            json_schema=SUFFICIENCY_SCHEMA,
        )
        return parse_sufficiency(result.text)


def all_correct(verdicts: Sequence[Verdict]) -> bool:
    """Conservative combination: correct only if there is a verdict and every one says correct."""
    return bool(verdicts) and all(v.correct for v in verdicts)


def verdicts_json(verdicts: Sequence[Verdict]) -> list[dict[str, Any]]:
    return [asdict(v) for v in verdicts]
