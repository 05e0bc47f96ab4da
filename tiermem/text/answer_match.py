"""Answer matching: does a text state the gold answer? LoCoMo's normalization, with dates compared as dates (spans,
relative expressions resolved), numbers as numbers; one module for the evidence rule, the lexical judge and research."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from dateutil import parser as date_parser

from tiermem.text.number_words import canonical_numbers

DATE_ORDERS = ("DMY", "MDY")

_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|"
          r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?")
_DAY = r"(?:3[01]|[12]\d|0?[1-9])(?:st|nd|rd|th)?"  # 1..31: "Jan 32" is no day (not 2032)
_YEAR = r"(?:19|20)\d{2}"
_PREP = r"(?:(?:on|in|at|by|since|around|during)\s+)?(?:the\s+)?"
_ABSOLUTE = re.compile(
    rf"\b{_PREP}(?:"
    rf"(?P<iso>{_YEAR}[-/]\d{{1,2}}[-/]\d{{1,2}}(?:T\d{{1,2}}(?::\d{{2}}){{0,2}}(?:\.\d+)?(?:Z|[+-]\d{{2}}:?\d{{2}})?)?)"
    rf"|(?P<num>\d{{1,2}}[./-]\d{{1,2}}[./-](?:{_YEAR}|\d{{2}}))"
    rf"|(?P<dm>{_DAY}\s+(?:of\s+)?{_MONTH}(?:,?\s+{_YEAR})?)"
    rf"|(?P<md>{_MONTH}\s+{_DAY}(?!\d)(?:,?\s+{_YEAR})?)"
    rf"|(?P<my>{_MONTH}(?:\s+of)?[,.]?\s*{_YEAR})"
    rf"|(?<!\d\s)(?P<m>{_MONTH})(?!\s*\d)"
    rf"|(?P<y>{_YEAR})"
    rf")\b",
    re.IGNORECASE,
)
_COUNT = r"(?:a|an|one|two|three|four|five|six|seven|eight|nine|ten|\d{1,2})"
_PERIOD = (r"(?:week|weekend|month|year|mon(?:day)?|tue(?:s(?:day)?)?|wed(?:nesday)?|thu(?:rs(?:day)?)?|fri(?:day)?|"
           r"sat(?:urday)?|sun(?:day)?)")
_RELATIVE = re.compile(
    rf"\b(?:the day (?:before yesterday|after tomorrow)|yesterday|today|tonight|tomorrow|last night"
    rf"|this (?:morning|afternoon|evening)"
    rf"|{_COUNT}\s+(?:day|week|month|year)s?\s+ago|(?:last|next|this|past)\s+{_PERIOD}"
    rf"|(?<!\d\s)the\s+[0-3]?\d(?:st|nd|rd|th)(?!\s+(?:of\s+)?{_MONTH}))\b",
    re.IGNORECASE,
)
# A gold answer that names a span by its distance from a date ("the week before 9 June 2023").
_ANCHORED = re.compile(rf"\b(?:the\s+)?(?P<period>day|{_PERIOD})\s+(?P<dir>before|after)\s+$", re.IGNORECASE)
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


@dataclass(frozen=True)
class When:
    """A date mention's stated fields (None: not stated) or a range of days; `lo`/`hi` bound its days when dated."""

    year: int | None
    month: int | None
    day: int | None
    lo: date | None = None
    hi: date | None = None

    def in_year(self, year: int) -> When:
        """A year-less mention read in `year`; itself when it has a year or the day is not in `year` (29 February)."""
        if self.year is not None or self.month is None:
            return self
        return _valid_span(year, self.month, self.day) or self

    @property
    def is_range(self) -> bool:
        """A span of days that is not one whole day, month or year ('last week', 'the week before 9 June')."""
        return self.lo is not None and self.lo != self.hi and _span(self.year, self.month, self.day) != self

    @property
    def weight(self) -> int:
        """The credit a gold mention is worth: its stated fields (a range counts as a full date)."""
        return 3 if self.is_range else sum(f is not None for f in (self.year, self.month, self.day))


def _span(year: int | None, month: int | None, day: int | None) -> When:
    if year is None:
        return When(None, month, day)
    if month is None:
        return When(year, None, None, date(year, 1, 1), date(year, 12, 31))
    if day is None:  # the month's last day from the next month's first, except December (9999-12 has no next)
        last = date(year, 12, 31) if month == 12 else date(year, month + 1, 1) - timedelta(days=1)
        return When(year, month, None, date(year, month, 1), last)
    return When(year, month, day, date(year, month, day), date(year, month, day))


def _valid_span(year: int, month: int | None, day: int | None) -> When | None:
    """_span, or None when the fields name no day of the calendar (29 February 2023, the year 0 or 10000)."""
    try:
        return _span(year, month, day)
    except ValueError:
        return None


def _range(lo: date, hi: date) -> When:
    """A span of days; its fields are those all of its days share (so a range inside one month keeps the month)."""
    year = lo.year if lo.year == hi.year else None
    month = lo.month if year is not None and lo.month == hi.month else None
    day = lo.day if lo == hi else None
    return When(year, month, day, lo, hi)


# Parse twice: a field that follows the default was not given. Both years are leap years, so a year-less
# "29 February" is a day (years 1 and 2 made it a ValueError, never matched).
_DEFAULTS = (datetime(2000, 1, 1), datetime(2004, 2, 2))


@functools.lru_cache(maxsize=65536)
def parse_absolute(text: str, date_order: str = "DMY") -> When | None:
    """One absolute date mention ('18.01.2024', 'Jan 15') -> its stated fields, or None; `date_order`: DMY/MDY/YMD."""
    try:
        a, b = (date_parser.parse(text, default=d, dayfirst=date_order == "DMY", yearfirst=date_order == "YMD",
                                  fuzzy=True) for d in _DEFAULTS)
    except (ValueError, OverflowError):
        return None
    year = a.year if a.year == b.year else None
    month = a.month if a.month == b.month else None
    day = a.day if a.day == b.day else None
    if year is not None and not 1900 <= year <= 2100:
        return None
    return _span(year, month, day)


@functools.lru_cache(maxsize=65536)
def resolve_relative(phrase: str, base: date) -> When | None:
    """A relative expression said on `base` -> the day or range it means; None past the calendar's ends, no crash."""
    key = " ".join(phrase.lower().split())
    if key != phrase:  # one cache entry per phrase however it is spelled ("PaSt MoN", "past  mon")
        return resolve_relative(key, base)
    try:
        return _resolve(key, base)
    except (OverflowError, ValueError):  # date arithmetic beyond year 1 or 9999
        return None


def _resolve(key: str, base: date) -> When | None:
    import dateparser  # deferred: its first import takes about a second

    words = key.split()
    if len(words) == 2 and words[1] not in _WEEKDAYS:  # 'last fri' -> 'last friday'
        words[1] = next((d for d in _WEEKDAYS if d.startswith(words[1])), words[1])
        key = " ".join(words)
    if words[0] in ("last", "past", "next", "this") and words[1] in ("week", "weekend", "month", "year"):
        step = {"last": -1, "past": -1, "next": 1, "this": 0}[words[0]]
        return _period(words[1], base, step)
    if words[-1] == "ago" and words[1].rstrip("s") in ("week", "month", "year"):
        moment = dateparser.parse(key, languages=["en"],
                                  settings={"RELATIVE_BASE": datetime.combine(base, datetime.min.time())})
        if moment is None:
            return None
        return _period(words[1].rstrip("s"), moment.date(), 0) if words[1].startswith("week") else \
            _span(moment.year, moment.month if not words[1].startswith("year") else None, None)
    if re.fullmatch(r"the [0-3]?\d(st|nd|rd|th)", key):  # 'on the 15th': that day of the month nearest `base`
        day = int(re.sub(r"\D", "", key))
        near = []
        for shift in (-1, 0, 1):
            month0 = base.year * 12 + base.month - 1 + shift
            try:
                near.append(date(month0 // 12, month0 % 12 + 1, day))
            except ValueError:
                continue
        return _range(*[min(near, key=lambda d: abs((d - base).days))] * 2) if near else None
    if key.startswith("the day "):  # before yesterday / after tomorrow
        shift = timedelta(days=-2 if key.endswith("yesterday") else 2)
        return _range(base + shift, base + shift)
    if key == "last night":
        key = "yesterday"
    if key in ("tonight",) or key.startswith("this "):
        return _range(base, base)
    settings = {"RELATIVE_BASE": datetime.combine(base, datetime.min.time()), "PREFER_DATES_FROM": "past"}
    if words[0] == "next":
        settings["PREFER_DATES_FROM"] = "future"
    moment = dateparser.parse(key, languages=["en"], settings=settings)  # English: no language detection
    return None if moment is None else _range(moment.date(), moment.date())


def _period(period: str, anchor: date, step: int) -> When:
    """The week/weekend/month/year `step` periods from `anchor` (-1: the one before, as a speaker means 'last')."""
    if period == "week":  # "last week" said on a day: the seven days before it, as LoCoMo's golds write it
        if step == 0:
            return _range(anchor - timedelta(days=3), anchor + timedelta(days=3))
        lo = anchor + timedelta(days=7 * step) if step > 0 else anchor - timedelta(days=7)
        return _range(lo, lo + timedelta(days=6))
    if period == "weekend":
        saturday = anchor - timedelta(days=(anchor.weekday() - 5) % 7 or 7) if step < 0 else \
            anchor + timedelta(days=(5 - anchor.weekday()) % 7 or 7) if step > 0 else \
            anchor - timedelta(days=(anchor.weekday() - 5) % 7)
        return _range(saturday, saturday + timedelta(days=1))
    if period == "month":
        month0 = anchor.year * 12 + anchor.month - 1 + step
        return _span(month0 // 12, month0 % 12 + 1, None)
    return _span(anchor.year + step, None, None)


def _anchored(period: str, direction: str, anchor: When) -> When | None:
    """'the <period> before/after <date>' -> the day or range it names."""
    if anchor.lo is None or anchor.lo != anchor.hi:
        return None
    day, step = anchor.lo, -1 if direction.lower() == "before" else 1
    period = period.lower()
    if period == "day":
        return _range(day + timedelta(days=step), day + timedelta(days=step))
    if period in _WEEKDAYS:
        target = _WEEKDAYS.index(period)
        shift = ((day.weekday() - target) % 7 or 7) * step if step < 0 else ((target - day.weekday()) % 7 or 7)
        return _range(day + timedelta(days=shift), day + timedelta(days=shift))
    return _period(period, day, step)


@dataclass(frozen=True)
class Mention:
    when: When
    start: int  # character span in the text, the preposition before it included
    end: int
    core: int = -1  # where the date itself starts (past 'on', 'in the', ...); -1: at `start`


def _fill_year(when: When, base: date | None) -> When:
    """A unit's 'on 20 March' means the 20 March nearest its own date (a year-less gold keeps no year)."""
    if when.year is not None or base is None or when.month is None:
        return when
    candidates = [w for y in (base.year - 1, base.year, base.year + 1) if (w := _valid_span(y, when.month, when.day))]
    return min(candidates, key=lambda w: abs((w.lo - base).days)) if candidates else when


# A text's date work is bounded: at most this many absolute and this many relative mentions are read (in order),
# so a hostile text (1 KB of "past mon" in odd cases, a 200 KB turn of dates) costs a bounded number of parses.
MAX_MENTIONS_PER_TEXT = 200
_VERB_MONTHS = ("may", "mar", "march")
_SUBJECT = re.compile(r"\s+(?:i|we|you|he|she|it|they|there|one)\b", re.IGNORECASE)


def _verb_not_month(text: str, m: re.Match[str]) -> bool:
    """A bare 'may'/'march'/'mar' that is the verb: lower case ("it may rain") or opening a sentence ("May I ask")."""
    word = m.group("m")
    if word.lower().rstrip(".") not in _VERB_MONTHS:
        return False
    if word[0].islower():
        return True
    before = text[max(0, m.start() - 40): m.start()].rstrip()
    opens = m.start() == m.start("m") and (before.endswith((".", "!", "?")) or not before and m.start() < 40)
    return opens and _SUBJECT.match(text, m.end("m")) is not None


def find_dates(text: str, base: date | None = None, date_order: str = "DMY") -> list[Mention]:
    """Every date mention of `text`: absolute (a missing year from `base`, the text's own date), relative (resolved
    against `base`; none without it) and anchored spans; at most MAX_MENTIONS_PER_TEXT of each kind."""
    return list(_find_dates(text, base, date_order))


@functools.lru_cache(maxsize=65536)  # a unit's text is read again by every question that retrieves it
def _find_dates(text: str, base: date | None, date_order: str) -> tuple[Mention, ...]:
    found: list[Mention] = []
    for count, m in enumerate(_ABSOLUTE.finditer(text)):
        if count >= MAX_MENTIONS_PER_TEXT:
            break
        group = next(name for name, value in m.groupdict().items() if value)
        if group == "m" and _verb_not_month(text, m):
            continue
        order = {"num": date_order, "iso": "YMD"}.get(group, "DMY")  # only day-month numbers are ambiguous
        when = parse_absolute(m.group(group), order)
        if when is None:
            continue
        start = m.start()
        anchored = _ANCHORED.search(text[max(0, start - 30): start])
        if anchored is not None and group not in ("m", "y"):
            try:
                span = _anchored(anchored.group("period"), anchored.group("dir"), _fill_year(when, base))
            except (OverflowError, ValueError):  # a day before 0001-01-01 or after 9999-12-31: no date
                span = None
            if span is not None:
                at = max(0, start - 30) + anchored.start()
                found.append(Mention(span, at, m.end(), at))
                continue
        found.append(Mention(_fill_year(when, base), start, m.end(), m.start(group)))
    if base is not None:
        taken = [(x.start, x.end) for x in found]
        for count, m in enumerate(_RELATIVE.finditer(text)):
            if count >= MAX_MENTIONS_PER_TEXT:
                break
            if any(s < m.end() and m.start() < e for s, e in taken):
                continue
            when = resolve_relative(m.group(0), base)
            if when is not None:
                found.append(Mention(when, m.start(), m.end()))
    return tuple(sorted(found, key=lambda x: x.start))


def without_spans(text: str, mentions: Iterable[Mention]) -> str:
    out, last = [], 0
    for x in sorted(mentions, key=lambda x: x.start):
        out.append(text[last: x.start])
        out.append(" ")
        last = max(last, x.end)
    out.append(text[last:])
    return "".join(out)


_FIELDS = ("year", "month", "day")


def states(stated: When, gold: When) -> bool:
    """Whether a stated date gives the gold date: it lies inside the gold's span ('18 January 2024' states
    'January 2024', not the other way round); a year-less gold needs its month and day stated alike."""
    if gold.lo is not None:
        return stated.lo is not None and gold.lo <= stated.lo and stated.hi <= gold.hi
    return all(getattr(stated, f) == getattr(gold, f) for f in _FIELDS if getattr(gold, f) is not None)


def contradicts(stated: When, gold: When) -> bool:
    """Whether a stated date cannot be the gold date: a field both give differs ('8 May 2023' for '7 May 2023'), or
    their spans do not meet. A coarser or year-less date does not; whether it states enough is the caller's rule."""
    if any(getattr(stated, f) is not None and getattr(gold, f) is not None and getattr(stated, f) != getattr(gold, f)
           for f in _FIELDS):
        return True
    both_dated = stated.lo is not None and gold.lo is not None
    return both_dated and (stated.hi < gold.lo or gold.hi < stated.lo)


# ---- whole answers -------------------------------------------------------------------------------


def canonical_text(text: str, base: date | None = None, date_order: str = "DMY") -> str:
    """`text` with its dates written one way ('18 january 2024', a range as its first and last day) and its numbers
    as digits: what the lexical judge's token F1 compares, so '18.01.2024' and 'January 18th, 2024' score alike."""
    mentions = find_dates(text, base, date_order)
    out, last = [], 0
    for x in mentions:
        out.append(text[last: x.core if x.core >= 0 else x.start])  # the preposition stays, as LoCoMo scores it
        out.append(f" {spoken(x.when)} ")
        last = max(last, x.end)
    out.append(text[last:])
    return canonical_numbers("".join(out))


_MONTHS = ("january february march april may june july august september october november december").split()


def spoken(when: When) -> str:
    """A date mention in one form: '18 january 2024', 'january 2024', '18 january', a range as 'A to B'."""
    if when.is_range:
        return f"{spoken(_range(when.lo, when.lo))} to {spoken(_range(when.hi, when.hi))}"
    parts = [str(when.day) if when.day else "", _MONTHS[when.month - 1] if when.month else "",
             str(when.year) if when.year else ""]
    return " ".join(p for p in parts if p)
