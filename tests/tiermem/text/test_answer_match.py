"""Answer matching: every date, number and relative form the labels read, compared by meaning
(tiermem.text.answer_match)."""

from datetime import date

import pytest

from labeling.answer_judges import LexicalJudge
from labeling.evidence import answer_recall, units_about
from tiermem.text.answer_match import canonical_numbers, find_dates, states
from tiermem.text.persons import PersonGuard, fold, question_persons


def _one(text, base=None, order="DMY"):
    found = find_dates(text, base, order)
    assert len(found) == 1, found
    return found[0].when


@pytest.mark.parametrize("text,ymd", [
    ("On 18.01.2024", (2024, 1, 18)),
    ("2024-01-15", (2024, 1, 15)),
    ("30 December, 2023", (2023, 12, 30)),
    ("the 15th of January", (None, 1, 15)),
    ("Jan 15", (None, 1, 15)),
    ("January 15th, 2024", (2024, 1, 15)),
    ("January 2024", (2024, 1, None)),
    ("In May", (None, 5, None)),
    ("April.2023", (2023, 4, None)),
    ("in 2013", (2013, None, None)),
])
def test_absolute_forms_parse_to_their_stated_fields(text, ymd):
    when = _one(text)
    assert (when.year, when.month, when.day) == ymd


def test_numeric_dates_follow_the_configured_order():
    assert (_one("01/02/2024", order="DMY").month, _one("01/02/2024", order="MDY").month) == (2, 1)
    assert _one("2024/02/01", order="MDY").month == 2  # year first is never ambiguous


def test_the_verb_may_is_not_a_month():
    assert find_dates("she may come by") == []


@pytest.mark.parametrize("phrase,lo,hi", [
    ("caught a flu yesterday", date(2024, 1, 13), date(2024, 1, 13)),
    ("two days ago", date(2024, 1, 12), date(2024, 1, 12)),
    ("this morning", date(2024, 1, 14), date(2024, 1, 14)),
    ("last week", date(2024, 1, 7), date(2024, 1, 13)),
    ("last Fri", date(2024, 1, 12), date(2024, 1, 12)),
    ("the day after tomorrow", date(2024, 1, 16), date(2024, 1, 16)),
    ("last month", date(2023, 12, 1), date(2023, 12, 31)),
    ("on the 15th after my trip", date(2024, 1, 15), date(2024, 1, 15)),
])
def test_relative_expressions_resolve_against_the_units_date(phrase, lo, hi):
    when = _one(phrase, base=date(2024, 1, 14))  # a Sunday
    assert (when.lo, when.hi) == (lo, hi)


def test_relative_expressions_need_a_date_to_resolve():
    assert find_dates("caught a flu yesterday") == []


def test_anchored_gold_spans():
    week = _one("The week before 9 June 2023")
    assert (week.lo, week.hi) == (date(2023, 6, 2), date(2023, 6, 8)) and week.weight == 3
    sunday = _one("The sunday before 25 May 2023")
    assert sunday.lo == sunday.hi == date(2023, 5, 21)


def test_a_stated_date_must_lie_inside_the_gold():
    month, day = _one("January 2024"), _one("18 January 2024")
    assert states(day, month) and not states(month, day)
    assert states(_one("Jan 18"), _one("18 January"))  # year-less: month and day alike


def test_numbers_and_ordinals():
    assert canonical_numbers("two dogs, twice, the first time, 1st") == "2 dogs, 2 times, the 1th time, 1th"


@pytest.mark.parametrize("gold,text,date_", [
    ("On 18.01.2024", "Ana: Signed the lease for the studio today.", "18 January 2024"),
    ("2024-01-18", "Ana: I signed the studio lease on 18 January 2024.", None),
    ("30 December, 2023", "Ana: we signed the lease on Dec 30th, 2023", None),
    ("13 January", "Ana: Caught a flu yesterday, staying in bed.", "14 January 2024"),
    ("The week before 22 January 2024", "Lucia: Last week I passed my driving test!", "22 January 2024"),
    ("two", "Lucia: I went to the climbing gym 2 times this week.", None),
    ("twice", "Lucia: I went to the climbing gym 2 times this week.", None),
])
def test_answer_recall_reads_dates_and_numbers_in_any_form(gold, text, date_):
    question = "When did Ana sign the lease? When did Ana catch the flu? When did Lucia pass? climbing gym"
    units = [{"text": text, "date": date_}]
    assert answer_recall(gold, units, source="tiermem", question=question) == 1.0


def test_answer_recall_wrong_day_is_not_partly_right():
    units = [{"text": "Ana: signed the studio lease", "date": "17 January 2024"}]
    assert answer_recall("18.01.2024", units, question="When did Ana sign the studio lease?") == 0.0


def test_a_unit_dated_that_day_but_about_something_else_does_not_state_the_date():
    units = [{"text": "Ana: Let's make great memories tomorrow at the opening!", "date": "17 January 2024"}]
    assert answer_recall("18 January 2024", units, question="When did Ana sign the studio lease?") == 0.0


def names_person(text, persons):
    """Whether a unit is about one of `persons` as written (no cast)."""
    persons = tuple(fold(p) for p in persons)
    return PersonGuard(persons, tuple((p, ()) for p in persons), ()).about(text)


def test_question_persons_and_units_about_them():
    assert question_persons("Where is Paola going on 16.01.2024?") == ("paola",)
    assert question_persons("When did Melanie's daughter visit in May?") == ("melanie",)
    assert question_persons("What did I buy?") == ()
    assert names_person("Caroline: Wow Mel, that's beautiful", ["Melanie"])  # a short form names her
    assert names_person("Melanie: my kids love it", ["Mel"])
    assert not names_person("Lucia: she is at Walt Disney World", ["Paola"])
    assert names_person("Ana: did you get the tickets?", ["Lucia"])  # spoken to the other one
    assert names_person("assistant: the Gion ryokan fits", ["Ines"])  # an assistant serves one person


def test_a_fact_about_someone_else_does_not_state_the_answer():
    units = [{"text": "Lucia: Paola is at Walt Disney World with her kids this week.", "date": "14 January 2024"}]
    assert answer_recall("Walt Disney World", units, question="Where is Ana this week?") == 0.0
    assert answer_recall("Walt Disney World", units, question="Where is Paola this week?") == 1.0
    assert units_about(units, "Where is the park?") == units  # no person named: every unit counts


def test_lexical_judge_compares_dates_as_dates():
    judge = LexicalJudge(threshold=0.5)
    assert judge.judge("q", "On 18.01.2024", "on January 18th, 2024", "", "tiermem").score == 1.0
    assert judge.judge("q", "On 18.01.2024", "on January 17th, 2024", "", "tiermem").score < 1.0
    assert LexicalJudge(date_order="MDY").judge("q", "01/02/2024", "2 January 2024", "", "tiermem").score == 1.0
    with pytest.raises(ValueError, match="date_order"):
        LexicalJudge(date_order="YMD")
