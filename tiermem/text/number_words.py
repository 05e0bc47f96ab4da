"""Numbers in answers written one way, for answer matching (tiermem.text.answer_match): number words as digits
("two" -> 2, "twenty-five" -> 25, "three hundred" -> 300, "twice" -> 2 times), every ordinal as '<n>th' ("first")."""

from __future__ import annotations

import functools
import re

_NUMBER_WORDS = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
_NUMBER_WORDS.update({"thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70",
                      "eighty": "80", "ninety": "90", "hundred": "100", "a couple": "2", "a dozen": "12",
                      "once": "1 time", "twice": "2 times", "thrice": "3 times"})
_ORDINAL_WORDS = {w: f"{i}th" for i, w in enumerate(
    "zeroth first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth".split())}
_NUMBER_FORMS = _NUMBER_WORDS | _ORDINAL_WORDS
_NUMBERS = re.compile(r"\b(" + "|".join(sorted(map(re.escape, _NUMBER_FORMS), key=len, reverse=True)) + r")\b",
                      re.IGNORECASE)
_DIGIT_ORDINAL = re.compile(r"\b(\d+)(?:st|nd|rd|th)\b", re.IGNORECASE)


_UNIT_WORDS = "one two three four five six seven eight nine"
_TEEN_WORDS = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen"
_TENS_WORDS = "twenty thirty forty fifty sixty seventy eighty ninety"
_BELOW_100 = (rf"(?:(?:{_TENS_WORDS.replace(' ', '|')})(?:[\s-]+(?:{_UNIT_WORDS.replace(' ', '|')}))?"
              rf"|{_TEEN_WORDS.replace(' ', '|')}|{_UNIT_WORDS.replace(' ', '|')})")
_BELOW_1000 = rf"(?:(?:a|{_UNIT_WORDS.replace(' ', '|')})\s+hundred(?:\s+(?:and\s+)?{_BELOW_100})?|{_BELOW_100})"
# A number written in words of more than one: "twenty-five" is 25, "three hundred" 300, "two thousand and ten" 2010
# (word by word they would read 20-5 -> "205" and "3 100").
_COMPOUND = re.compile(rf"\b(?:{_BELOW_1000}\s+thousand(?:\s+(?:and\s+)?{_BELOW_1000})?"
                       rf"|(?:a|{_UNIT_WORDS.replace(' ', '|')})\s+hundred(?:\s+(?:and\s+)?{_BELOW_100})?"
                       rf"|(?:{_TENS_WORDS.replace(' ', '|')})[\s-]+(?:{_UNIT_WORDS.replace(' ', '|')}))\b",
                       re.IGNORECASE)
_WORD_VALUES = {w: i for i, w in enumerate(f"zero {_UNIT_WORDS} {_TEEN_WORDS}".split())} | {
    w: 20 + 10 * i for i, w in enumerate(_TENS_WORDS.split())} | {"a": 1}


def _compound_value(words: str) -> str:
    total = current = 0
    for word in re.split(r"[\s-]+", words.lower()):
        if word == "hundred":
            current *= 100
        elif word == "thousand":
            total, current = total + current * 1000, 0
        elif word != "and":
            current += _WORD_VALUES[word]
    return str(total + current)


@functools.lru_cache(maxsize=65536)  # the evidence rule reads each unit and page turn again for every question
def canonical_numbers(text: str) -> str:
    """`text` with its numbers written one way (the module docstring)."""
    text = _DIGIT_ORDINAL.sub(lambda m: f"{m.group(1)}th", text)
    text = _COMPOUND.sub(lambda m: _compound_value(m.group(0)), text)
    return _NUMBERS.sub(lambda m: _NUMBER_FORMS[m.group(0).lower()], text)
