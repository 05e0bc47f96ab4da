"""The person guard: a question's names resolved against the conversation's speakers and mentioned names
(tiermem.text.persons), each name case both ways."""

import pytest

from labeling.evidence import answer_recall, units_about
from tiermem.data.records import Turn
from tiermem.text.persons import Cast, person_guard, question_persons, same_person

LOWER = Cast(speakers=("elise", "muhhamed"), mentioned=("kate", "kane", "porto"))


@pytest.mark.parametrize(("a", "b"), [
    ("Elise", "elise"),  # case-folded
    ("Melanie's", "Melanie"), ("Melanie\u2019s", "melanie"),  # possessives folded
    ("Mel", "Melanie"),  # short form (a prefix of 3+ letters)
    ("Bob", "Robert"), ("Kate", "Katherine"), ("Liz", "Elizabeth"),  # nicknames
    ("Muhammad", "Muhhamed"), ("Caroline", "Carolline"), ("Jonathan", "Jonathon"),  # spelling variants, 5+ letters
])
def test_one_person_both_ways(a, b):
    assert same_person(a, b) and same_person(b, a)


@pytest.mark.parametrize(("a", "b"), [
    ("Kate", "Kane"),  # under 5 letters: no edit distance
    ("Michael", "Michelle"), ("Ana", "Anna"), ("Jon", "John"), ("Paola", "Lucia"), ("Mo", "Moreau"),
])
def test_two_persons_both_ways(a, b):
    assert not same_person(a, b) and not same_person(b, a)


@pytest.mark.parametrize("question", [
    "What did Elise play on 5 Jan 2024?", "What did Elise do on Tue, 5 Sept?", "Did Elise call on Thurs or Fri?",
    "Where was Elise in Dec?", "What did elise play?",
])
def test_abbreviated_months_and_days_are_dates_and_lower_case_speakers_are_names(question):
    assert question_persons(question, LOWER) == ("elise",)


def test_a_lower_case_speaker_is_found_by_its_data_both_ways():
    guard = person_guard("What did Elise play on 5 Jan 2024?", LOWER)
    assert guard.known == (("elise", ("elise",)),) and guard.reason == "units about elise = elise"
    assert guard.about("elise: Today we tried basketball", ["elise"])
    assert guard.about("Today we tried basketball", ["elise"])  # speakers are data: no name in the text needed
    assert not guard.about("muhhamed: I cooked a lamb tagine", ["muhhamed"])
    capital = person_guard("what did elise play?", Cast(speakers=("Elise", "Tom"), mentioned=()))
    assert capital.known == (("elise", ("Elise",)),)
    assert capital.about("Elise: basketball", ["Elise"]) and not capital.about("Tom: chess", ["Tom"])


def test_a_spelling_variant_resolves_both_ways():
    guard = person_guard("What did Muhammad cook?", LOWER)
    assert guard.known == (("muhammad", ("muhhamed",)),)
    assert guard.about("muhhamed: I cooked a lamb tagine", ["muhhamed"])
    other = person_guard("What did Muhhamed cook?", Cast(speakers=("Muhammad", "Elise"), mentioned=()))
    assert other.about("Muhammad: I cooked a lamb tagine", ["Muhammad"])
    assert not other.about("Elise: we tried basketball", ["Elise"])


def test_nicknames_and_short_forms_resolve_both_ways():
    cast = Cast(speakers=("Robert", "Melanie"), mentioned=())
    assert person_guard("What did Bob buy?", cast).about("Robert: a kayak", ["Robert"])
    assert not person_guard("What did Bob buy?", cast).about("Melanie: a kayak", ["Melanie"])
    assert person_guard("What did Robert buy?", Cast(("Bob", "Ana"), ())).about("Bob: a kayak", ["Bob"])
    assert person_guard("What did Mel paint?", cast).about("Melanie: a sunrise", ["Melanie"])
    assert person_guard("What did Melanie paint?", Cast(("Mel", "Ana"), ())).about("Mel: a sunrise", ["Mel"])
    # a mentioned name in the text counts too: Robert speaks of 'Mel'
    assert person_guard("What did Melanie paint?", cast).about("Robert: Mel painted a sunrise", ["Robert"])


def test_kate_is_not_kane():
    units = [{"text": "muhhamed: My sister Kate is moving to Porto", "speakers": ["muhhamed"]},
             {"text": "elise: Kane from my office is moving to Lisbon", "speakers": ["elise"]}]
    assert answer_recall("Lisbon", units, question="Where is Kate moving?", cast=LOWER) == 0.0
    assert answer_recall("Porto", units, question="Where is Kate moving?", cast=LOWER) == 1.0


def test_a_name_no_one_matches_does_not_narrow_and_says_so():
    cast = Cast(speakers=("Ana", "Lucia"), mentioned=("paola",))
    guard = person_guard("Where does Moreau work?", cast)
    assert not guard.narrows and guard.unmatched == ("moreau",)
    assert guard.reason == "every unit counts: moreau: no speaker or mentioned name matches, does not narrow"
    units = [{"text": "Ana: the office is on Carrer Verdi", "speakers": ["Ana"]}]
    assert units_about(units, "Where does Moreau work?", cast) == units
    assert answer_recall("Carrer Verdi", units, question="Where does Moreau work?", cast=cast) == 1.0
    # a resolved name narrows; the unmatched one beside it is named in the reason
    both = person_guard("What did Ana Moreau rent?", cast)
    assert both.narrows and both.reason == ("units about ana = Ana; moreau: no speaker or mentioned name matches, "
                                            "does not narrow")
    assert units_about([{"text": "Lucia: a cello", "speakers": ["Lucia"]}], "What did Ana Moreau rent?", cast) == []


def test_the_cast_of_a_conversation():
    turns = [Turn("t1", "elise", "Congrats! Kate told me. Then Porto won.", "2024-01-05", "s1"),
             Turn("t2", "muhhamed", "Elise, Jan is cold.", "2024-01-05", "s1")]
    cast = Cast.of_turns(turns)
    assert cast.speakers == ("elise", "muhhamed")
    # names past a sentence's first word; the speakers themselves, months and sentence openers are not mentions
    assert cast.mentioned == ("porto",)
    assert Cast.of_turns([Turn("t1", "ana", "I saw Kate and Porto today.", "2024-01-05", "s1")]).mentioned == \
        ("kate", "porto")
