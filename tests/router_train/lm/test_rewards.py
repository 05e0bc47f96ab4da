from __future__ import annotations

import pytest

from router_train.lm.rewards import DecisionReward, FormatReward, build_reward_funcs
from tiermem import contract
from tiermem.rewards import RewardConfig, resolve_cost_scale, score_decision

ANSWER = contract.render_target("ANSWER", "stated")
ESCALATE = contract.render_target("ESCALATE", "missing")


@pytest.mark.parametrize(
    ("action", "s_ok", "r_ok", "expected", "case"),
    [
        ("ANSWER", True, True, 1.0, "answer_correct"),
        ("ANSWER", True, False, 1.0, "answer_correct"),
        ("ANSWER", False, True, -1.5, "answer_wrong"),
        ("ESCALATE", False, True, 1.0, "escalate_needed"),
        ("ESCALATE", True, True, 0.6, "escalate_wasted"),  # 1.0 - waste 0.4, no cost by default
        ("ESCALATE", True, False, -1.5, "escalate_research_wrong"),
        (None, True, True, -1.0, "unparseable"),
        (None, False, True, -1.0, "unparseable"),
    ],
)
def test_reward_table_defaults(action, s_ok, r_ok, expected, case):
    score = score_decision(action, s_ok, r_ok, 5000, RewardConfig(), scale=10000)
    assert score.total == pytest.approx(expected)
    assert score.case == case


def test_cost_is_charged_on_wasted_escalations_only_by_default():
    cfg = RewardConfig(cost_weight=0.5)
    wasted = score_decision("ESCALATE", True, True, 2500, cfg, scale=10000)
    assert (wasted.base, wasted.waste, wasted.cost) == (1.0, 0.4, pytest.approx(0.125))
    assert wasted.total == pytest.approx(1.0 - 0.4 - 0.125)
    assert score_decision("ESCALATE", False, True, 2500, cfg, scale=10000).total == pytest.approx(1.0)
    assert score_decision("ANSWER", True, True, 2500, cfg, scale=10000).total == pytest.approx(1.0)


def test_cost_on_every_escalation_and_clipping():
    cfg = RewardConfig(cost_weight=0.5, cost_on="every_escalation")
    assert score_decision("ESCALATE", False, True, 5000, cfg, scale=10000).total == pytest.approx(0.75)
    assert score_decision("ESCALATE", True, False, 5000, cfg, scale=10000).total == pytest.approx(-1.75)
    # beyond the scale the cost saturates at the weight
    assert score_decision("ESCALATE", False, True, 50000, cfg, scale=10000).cost == pytest.approx(0.5)


def test_every_constant_comes_from_config():
    cfg = RewardConfig(answer_correct=2.0, answer_wrong=-3.0, escalate_needed=0.7, escalate_both_right=0.9, waste=0.1,
                       escalate_research_wrong=-2.0, unparseable=-5.0)
    got = [score_decision(a, s, r, 0, cfg, None).total for a, s, r in
           [("ANSWER", True, True), ("ANSWER", False, True), ("ESCALATE", False, True), ("ESCALATE", True, True),
            ("ESCALATE", True, False), (None, True, True)]]
    assert got == pytest.approx([2.0, -3.0, 0.7, 0.8, -2.0, -5.0])


@pytest.mark.parametrize("bad", [{"cost_on": "always"}, {"cost_scale": 0.0}, {"waste": -0.1}])
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        RewardConfig(**bad)


def test_cost_scale_from_train_max_or_config():
    assert resolve_cost_scale(RewardConfig(), [100, 4000, 250]) == 4000
    assert resolve_cost_scale(RewardConfig(cost_scale=8000), [100, 4000]) == 8000
    assert resolve_cost_scale(RewardConfig(), [0, 0]) is None


def test_decision_reward_trl_signature_and_logging():
    logged: dict[str, float] = {}
    reward = DecisionReward(RewardConfig(cost_weight=1.0), cost_scale=1000)
    completions = [ANSWER, ESCALATE, '{"action": "ESCALATE"', "garbage", ESCALATE]
    out = reward(
        prompts=["p"] * 5,
        completions=completions,
        completion_ids=[[1]] * 5,
        s_ok=[True, True, False, True, True],
        r_ok=[True, True, True, True, False],
        cost_research_input_tokens=[0, 500, 500, 0, 500],
        label=["ANSWER", "ANSWER", "ESCALATE", "ANSWER", "ANSWER"],  # extra columns arrive too; ignored
        trainer_state=None,
        log_metric=logged.__setitem__,
    )
    assert out == pytest.approx([1.0, 1.0 - 0.4 - 0.5, 1.0, -1.0, -1.5])
    assert reward.__name__ == "decision"
    assert logged["case/unparseable"] == pytest.approx(0.2)
    assert logged["decision/escalation_rate"] == pytest.approx(0.6)
    assert logged["reward_parts/waste"] == pytest.approx(0.4 / 5)
    assert logged["reward_parts/cost"] == pytest.approx(0.5 / 5)


def test_build_reward_funcs_names():
    funcs = build_reward_funcs(RewardConfig(), [10, 20], max_completion_length=24)
    assert [f.__name__ for f in funcs] == ["decision", "format"]
    assert funcs[0].cost_scale == 20


def test_action_scope_format_reward_is_action_neutral_under_any_length_limit():
    from router_train.lm.rewards import check_completion_length
    from tiermem.models.specs import DEFAULT_LM, load_tokenizer

    tokenizer = load_tokenizer(DEFAULT_LM)
    limit = max(len(tokenizer(contract.OUTPUT_PREFIX + a + '"', add_special_tokens=False)["input_ids"])
                for a in contract.ACTIONS)
    logged: dict[str, float] = {}
    fmt = FormatReward(RewardConfig())
    cut = []
    for action in contract.ACTIONS:  # each target cut at the limit, as generation would cut it
        ids = tokenizer(contract.render_target(action, "a long reason " * 5), add_special_tokens=False)["input_ids"]
        cut.append(tokenizer.decode(ids[:limit]))
    assert fmt(prompts=["p", "p"], completions=cut, completion_ids=[[0] * limit] * 2) == [1.0, 1.0]
    assert fmt(prompts=["p"], completions=['{"act'], completion_ids=[[0] * 2], log_metric=logged.__setitem__) == [0.0]
    assert logged == {"format/valid_action_rate": 0.0, "format/invalid_rate": 1.0}
    check_completion_length(tokenizer, limit)  # fits: no error
    with pytest.raises(ValueError, match="depend on the action"):
        check_completion_length(tokenizer, limit - 1)


def test_action_token_completions_are_read_from_their_first_token():
    # completion action_token: the prompt ends with the output prefix, a completion is one token (ANSWER's 11,
    # ESCALATE's 12 here); any other token is unparseable, whatever its text
    cfg = RewardConfig()
    decision, fmt = build_reward_funcs(cfg, [100.0], 1, action_ids=(11, 12))
    kwargs = {"prompts": ["p"] * 3, "completions": ["ANS", "ESC", "x"], "completion_ids": [[11], [12], [7]],
              "s_ok": [True, False, True], "r_ok": [True, True, True], "cost_research_input_tokens": [1.0] * 3}
    assert decision(**kwargs) == [cfg.answer_correct, cfg.escalate_needed, cfg.unparseable]
    assert fmt(**kwargs) == [cfg.format_valid, cfg.format_valid, cfg.format_invalid]
