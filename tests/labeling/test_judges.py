import pytest

from labeling.answer_judges import (
    LexicalJudge,
    LLMJudge,
    SufficiencyJudge,
    all_correct,
    locomo_score,
    multi_hop_f1,
    normalize_answer,
    parse_correct_wrong,
    parse_sufficiency,
    token_f1,
)
from tiermem.llm import ScriptedLLM


def test_normalize_drops_commas_punctuation_articles_and():
    assert normalize_answer("The Cat, and a Dog!") == "cat dog"
    assert normalize_answer("Psychology, counseling certification") == "psychology counseling certification"


def test_token_f1_partial_overlap():
    # "the cat sat" -> [cat, sat]; "a cat sat down" -> [cat, sat, down]: p=1, r=2/3
    assert token_f1("The cat sat", "a cat sat down") == pytest.approx(0.8)


def test_token_f1_porter_stemming_matches_inflections():
    assert token_f1("painting sunsets", "Painted a sunset") == pytest.approx(1.0)


def test_token_f1_numbers_and_empty():
    assert token_f1("in 2022", "2022") == pytest.approx(2 / 3)
    assert token_f1("", "2022") == 0.0
    assert token_f1("no overlap here", "2022") == 0.0


def test_category_1_is_multi_hop_mean_of_best_sub_answer_f1():
    gold = "pottery, camping, painting"
    pred = "She likes painting and camping"
    # one prediction part [she, like, paint, camp]; per gold: pottery 0, camping 0.4, painting 0.4
    assert multi_hop_f1(pred, gold) == pytest.approx(0.8 / 3)
    assert locomo_score(pred, gold, "1") == pytest.approx(0.8 / 3)
    # plain F1 (categories 2/4) on the same strings is higher: common 2, p=1/2, r=2/3
    assert locomo_score(pred, gold, "4") == pytest.approx(4 / 7)
    assert locomo_score("camping, painting, pottery", gold, "1") == pytest.approx(1.0)


def test_category_3_cuts_gold_at_semicolon():
    gold = "Likely yes; she mentions enjoying it"
    assert locomo_score("likely yes", gold, "3") == pytest.approx(1.0)
    # without the cut (category 2) the tail of the gold counts against recall
    assert locomo_score("likely yes", gold, "2") == pytest.approx(0.5)


def test_non_locomo_source_uses_plain_f1():
    assert locomo_score("camping, painting, pottery", "pottery, camping, painting", "1", source="longmemeval") == 1.0
    assert locomo_score("a", "x; y", "3", source="longmemeval") == 0.0


def test_lexical_judge_threshold():
    judge = LexicalJudge(threshold=0.3)
    ok = judge.judge("q", "7 May 2023", "On 7 May 2023", "2")
    bad = judge.judge("q", "pottery, camping, painting", "She likes painting and camping", "1")
    assert ok.correct and ok.score == pytest.approx(6 / 7, abs=1e-4)
    assert not bad.correct and "<" in bad.reason
    with pytest.raises(ValueError):
        LexicalJudge(threshold=1.5)


@pytest.mark.parametrize(
    "text,expected",
    [
        ('{"reason": "same date", "label": "CORRECT"}', True),
        ('```json\n{"label": "wrong", "reason": "other city"}\n```', False),
        ("Sure. CORRECT", True),
        ("It is CORRECT or WRONG", None),
        ("no idea", None),
    ],
)
def test_parse_correct_wrong(text, expected):
    assert parse_correct_wrong(text)[0] is expected


def test_parse_sufficiency_is_strict():
    assert parse_sufficiency('{"sufficient": true, "reason": "stated"}').sufficient
    assert parse_sufficiency('{"has_sufficient_info": "false", "reason": "r"}').parsed_ok
    garbled = parse_sufficiency("maybe sufficient")
    assert not garbled.sufficient and not garbled.parsed_ok


def test_conservative_combination():
    judge = LexicalJudge()
    right = judge.judge("q", "Paris", "Paris", "4")
    wrong = judge.judge("q", "Paris", "Rome", "4")
    assert all_correct([right])
    assert not all_correct([right, wrong])
    assert not all_correct([])


def test_llm_judges_through_scripted_llm():
    replies = ['{"reason": "same", "label": "CORRECT"}', "garbage", '{"sufficient": false, "reason": "no date"}']
    llm = ScriptedLLM(replies)
    judge = LLMJudge(llm)
    assert judge.judge("When?", "7 May 2023", "May 7th, 2023").correct
    unreadable = judge.judge("When?", "7 May 2023", "x")
    assert not unreadable.correct and not unreadable.parsed_ok
    suff = SufficiencyJudge(llm).judge("When?", "7 May 2023", [{"text": "went to a group", "date": "8 May 2023"}])
    assert not suff.sufficient and suff.parsed_ok and suff.reason == "no date"
