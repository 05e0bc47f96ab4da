"""Golden tests for the router contract. A failure here means the rendered text changed: if that is
deliberate, bump CONTRACT_VERSION and update the literals below together."""

from __future__ import annotations

import json

import pytest

from tiermem import contract
from tiermem.contract import ParsedDecision, parse

GOLDEN_VERSION = "tiermem-router-contract/2"

GOLDEN_SYSTEM = (
    "ANSWER if the summaries state the answer exactly and completely (dates, numbers, names, every list item); "
    "else ESCALATE to read the raw conversation.\n"
    'Reply with JSON only: {"action": "ANSWER" or "ESCALATE", "reason": "<one short sentence>"}'
)

SUMMARIES = [
    {"unit_id": "u1", "text": "Caroline attended an LGBTQ support group on 7 May 2023.", "date": "2023-05-08",
     "score": 0.91, "page_ids": ["p1"]},
    {"text": "  Melanie   paints\nsunsets. ", "date": None, "score": float("nan")},
    {"text": "x" * 450, "date": "", "score": 0.123456},
]

GOLDEN_USER = (
    "Question: When did Caroline go to the LGBTQ support group?\n"
    "Question words in no summary: go\n"
    "Summaries (best match first; retrieval score, date):\n"
    "[1] 0.91 (2023-05-08) Caroline attended an LGBTQ support group on 7 May 2023.\n"
    "[2] - (undated) Melanie paints sunsets.\n"
    "[3] 0.12 (undated) " + "x" * 197 + "..."
)

GOLDEN_SMOLLM2_PROMPT = (
    "<|im_start|>system\n" + GOLDEN_SYSTEM + "<|im_end|>\n"
    "<|im_start|>user\n"
    "Question: What did Melanie paint?\n"
    "Question words in no summary: (none)\n"
    "Summaries (best match first; retrieval score, date):\n"
    "[1] - (2023-05-08) Melanie painted a sunrise over a lake.<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def test_version_and_constants_are_pinned():
    assert contract.CONTRACT_VERSION == GOLDEN_VERSION
    assert contract.ACTIONS == ("ANSWER", "ESCALATE")
    assert contract.OUTPUT_PREFIX == '{"action": "'
    assert contract.SYSTEM_PROMPT == GOLDEN_SYSTEM


def test_render_messages_golden():
    messages = contract.render_messages("When did Caroline go to the LGBTQ   support group?", SUMMARIES)
    assert messages == [{"role": "system", "content": GOLDEN_SYSTEM}, {"role": "user", "content": GOLDEN_USER}]


def test_render_user_without_summaries_and_rank_order_kept():
    assert contract.render_user("Q?", []) == ("Question: Q?\nQuestion words in no summary: q\n"
                                              "Summaries (best match first; retrieval score, date):\n(none retrieved)")
    user = contract.render_user("Q?", [{"text": "second", "date": "d2"}, {"text": "first", "date": "d1"}])
    assert user.endswith("[1] - (d2) second\n[2] - (d1) first")


def test_render_user_caps_summaries_and_accepts_objects():
    class Unit:
        def __init__(self, i: int) -> None:
            self.text, self.date = f"fact {i}", None

    user = contract.render_user("Q?", [Unit(i) for i in range(contract.MAX_SUMMARIES + 3)])
    assert f"[{contract.MAX_SUMMARIES}] - (undated) fact {contract.MAX_SUMMARIES - 1}" in user
    assert f"[{contract.MAX_SUMMARIES + 1}]" not in user
    with pytest.raises(TypeError, match="text"):
        contract.render_user("Q?", [{"date": "2023"}])


def test_render_prompt_golden_with_packaged_tokenizer():
    from tiermem.models.specs import DEFAULT_LM, load_tokenizer

    tokenizer = load_tokenizer(DEFAULT_LM)
    prompt = contract.render_prompt(
        tokenizer, "What did Melanie paint?", [{"text": "Melanie painted a sunrise over a lake.", "date": "2023-05-08"}]
    )
    assert prompt == GOLDEN_SMOLLM2_PROMPT


def test_render_target_is_action_first_json():
    target = contract.render_target("ESCALATE", "  The date is\n missing. ")
    assert target == '{"action": "ESCALATE", "reason": "The date is missing."}'
    assert target.startswith(contract.OUTPUT_PREFIX + "ESCALATE")
    assert json.loads(contract.render_target("ANSWER", "")) == {"action": "ANSWER", "reason": "no reason given"}
    with pytest.raises(ValueError, match="action"):
        contract.render_target("answer", "lower case is not an action")


@pytest.mark.parametrize("action", contract.ACTIONS)
def test_parse_round_trips_render_target(action):
    assert parse(contract.render_target(action, "why")) == ParsedDecision(action, "why", True, True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"action":"ANSWER","reason":"stated"}', ParsedDecision("ANSWER", "stated", True, True)),
        ('  \n{"action": "ESCALATE", "reason": "no date"}\n', ParsedDecision("ESCALATE", "no date", True, True)),
        # <think> blocks (reasoning routers) are skipped before the JSON
        ('<think>The summary gives 7 May.</think>\n{"action": "ANSWER", "reason": "date stated"}',
         ParsedDecision("ANSWER", "date stated", True, True)),
        ("<think>\nmulti\nline\n</think>{\"action\": \"ESCALATE\"",
         ParsedDecision("ESCALATE", "", True, False)),
        # truncated after the action: the decision is readable, the JSON is not valid
        ('{"action": "ANSWER"', ParsedDecision("ANSWER", "", True, False)),
        ('{"action": "ANSWER", "reason": "the summ', ParsedDecision("ANSWER", "", True, False)),
        ('{"action": "ESCALATE", "rea', ParsedDecision("ESCALATE", "", True, False)),
        # readable action, but not exactly the contract JSON
        ('{"action": "ANSWER", "reason": "ok", "confidence": 0.9}', ParsedDecision("ANSWER", "ok", True, False)),
        ('{"action": "ANSWER", "reason": 3}', ParsedDecision("ANSWER", "", True, False)),
        ('{"action": "ANSWER", "reason": "ok"} and more text', ParsedDecision("ANSWER", "ok", True, False)),
        ('{"action": "ANSWER", "action": "ESCALATE", "reason": "dup"}',
         ParsedDecision("ANSWER", "dup", True, False)),
    ],
)
def test_parse_cases(text, expected):
    assert parse(text) == expected


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        None,
        "   ",
        "ANSWER",
        "I think the summaries are enough, so ANSWER.",
        '{"action": "answer", "reason": "lower case"}',
        '{"action": "ANSWERED", "reason": "not an action"}',
        '{"reason": "action second", "action": "ANSWER"}',
        '```json\n{"action": "ANSWER", "reason": "fenced"}\n```',
        "<think>never closed {\"action\": \"ANSWER\"}",
        '{"action": "ESC',
        "<|im_end|>",
    ],
)
def test_garbage_parses_to_flagged_escalate(garbage):
    decision = parse(garbage)
    assert decision == ParsedDecision("ESCALATE", "", parsed_ok=False, valid_json=False)


def test_missing_words_fold_plurals_and_tenses_and_skip_question_form():
    assert contract.missing_words("How many agencies did Caroline contact?", ["She called an agency."]) == [
        "caroline", "contact"]
    assert contract.missing_words("When did Melanie paint?", ["Melanie painted a lake"]) == []
    # only the text the router sees counts: words clipped away are missing
    user = contract.render_user("Where is the zebra?", [{"text": "y" * 300 + " zebra", "date": None}])
    assert "Question words in no summary: zebra" in user


def test_check_version():
    contract.check_version(GOLDEN_VERSION)
    for saved in ("tiermem-router-contract/0", None, ""):
        with pytest.raises(contract.ContractVersionError, match="retrain"):
            contract.check_version(saved, where="runs/sft")
