import json
import math

import numpy as np
import pytest

from evaluation.calibrate import CalibrateConfig, calibrate, load_calibration_records, main
from evaluation.criteria import (
    ANSWER_ALL,
    CalibrationSet,
    binom_cdf,
    summarize,
    threshold_for_rate,
    threshold_max_reward,
    threshold_risk_control,
    threshold_token_budget,
)
from serving.routers.base import ESCALATE_ALL
from tiermem.settings.config import ConfigError, parse_cli

SCORES = [0.9, 0.1, 0.8, 0.3, 0.7, 0.2, 0.6, 0.4, 0.5, 0.05]
LABELS = ["ESCALATE", "ANSWER", "ESCALATE", "ESCALATE", "ANSWER", "ANSWER", "ESCALATE", "ANSWER", "ANSWER",
          "ANSWER"]


@pytest.mark.parametrize(("rate", "expected", "escalated"), [
    (0.3, 0.7, 3), (0.5, 0.5, 5), (0.25, 0.7, 3), (0.1, 0.9, 1), (1.0, 0.05, 10), (0.01, 0.9, 1)])
def test_threshold_for_rate_hits_the_quantile(rate, expected, escalated):
    t = threshold_for_rate(SCORES, rate)
    assert t == expected
    assert sum(s >= t for s in SCORES) == escalated
    assert sum(s >= t for s in SCORES) >= rate * len(SCORES)  # never under the target


def test_ties_escalate_together():
    assert threshold_for_rate([0.5, 0.5, 0.5, 0.1], 0.5) == 0.5
    assert summarize([0.5, 0.5, 0.5, 0.1], ["ANSWER"] * 4, 0.5)["escalation_rate"] == 0.75


def test_log_odds_margins_do_not_tie_where_probabilities_saturate():
    margins = [40.0, 40.5, 38.0, 12.0]  # float64 sigmoid: the first two are both exactly 1.0
    assert 1 / (1 + math.exp(-40.0)) == 1 / (1 + math.exp(-40.5)) == 1.0
    t = threshold_for_rate(margins, 0.25)
    assert t == 40.5 and sum(m >= t for m in margins) == 1  # the quantile is exact in log-odds


def test_what_a_threshold_achieves_is_stored_with_it():
    out = calibrate(CalibrationSet(SCORES, LABELS), CalibrateConfig(criterion="escalation_rate", value=0.4))
    assert out["threshold_logit"] == 0.6 and out["criterion"] == "escalation_rate"
    assert "threshold" not in out  # log-odds only in the JSON we write; a probability is for displays
    assert out["achieved"]["hard_recall"] == 0.75
    assert out["achieved"]["escalation_rate"] == 0.4  # 0.9, 0.8, 0.7, 0.6
    assert out["achieved"]["label_accuracy"] == 0.8  # 0.7 wrongly escalated, 0.3 wrongly answered
    assert out["guarantee"] is None


# Hand-built: A needs research, B both right, C needs research, D only the summary right, E neither.
HAND = CalibrationSet(
    scores=[3.0, 2.0, 1.0, 0.0, -1.0], labels=["ESCALATE", "ANSWER", "ESCALATE", "ANSWER", None],
    s_ok=[False, True, False, True, False], r_ok=[True, True, True, False, False],
    s_tokens=[100.0] * 5, r_tokens=[1000.0] * 5)


def test_max_reward_picks_the_best_total_reward():
    # gains (ESCALATE - ANSWER) under the default table: A +2.5, B -0.4 (waste), C +2.5, D -2.5, E 0
    # cumulative from the top: 2.5, 2.1, 4.6, 2.1, 2.1 -> escalate A, B, C: threshold 1.0
    t, mean_reward = threshold_max_reward(HAND, CalibrateConfig().reward)
    assert t == 1.0
    # rewards at t=1: A +1, B +0.6, C +1, D (ANSWER, right) +1, E (ANSWER, wrong) -1.5
    assert mean_reward == pytest.approx((1 + 0.6 + 1 + 1 - 1.5) / 5)
    out = calibrate(HAND, CalibrateConfig())  # the default criterion
    assert out["criterion"] == "max_reward" and out["threshold_logit"] == 1.0
    assert out["achieved"]["mean_reward"] == pytest.approx(mean_reward)
    assert out["achieved"]["accuracy"] == 0.8 and out["achieved"]["false_cache_hit_rate"] == 0.0


def test_max_reward_follows_the_table():
    from tiermem.rewards import RewardConfig

    # a heavy waste penalty: escalating B (both right) earns 1 - 3 = -2 instead of ANSWER's +1: gain -3.0
    cfg = RewardConfig(waste=3.0)
    # gains: A +2.5, B -3.0, C +2.5, D -2.5, E 0 -> cumulative 2.5, -0.5, 2.0, -0.5, -0.5: threshold 3.0
    assert threshold_max_reward(HAND, cfg)[0] == 3.0
    # every escalation hopeless: nothing escalates
    cfg = RewardConfig(escalate_needed=-5.0, escalate_both_right=-5.0, escalate_research_wrong=-5.0)
    assert threshold_max_reward(HAND, cfg)[0] == ANSWER_ALL


def test_token_budget_best_accuracy_within_budget():
    # (threshold: mean tokens, accuracy): never 100/0.4, 3: 280/0.6, 2: 460/0.6, 1: 640/0.8, 0: 820/0.6
    assert threshold_token_budget(HAND, 500) == 3.0  # 0.6 at 280 and 460: the cheaper one
    assert threshold_token_budget(HAND, 700) == 1.0
    assert threshold_token_budget(HAND, 100) == ANSWER_ALL
    with pytest.raises(ValueError, match="below the summary-only"):
        threshold_token_budget(HAND, 50)
    out = calibrate(HAND, CalibrateConfig(criterion="token_budget", value=700))
    assert out["achieved"]["mean_input_tokens"] == 640 and out["achieved"]["accuracy"] == 0.8


def test_escalation_rate_criterion_counts_dropped_records():
    out = calibrate(HAND, CalibrateConfig(criterion="escalation_rate", value=0.4))
    assert out["threshold_logit"] == 2.0 and out["achieved"]["n"] == 5


def test_bad_criteria_are_rejected():
    with pytest.raises(ValueError, match="rate"):
        threshold_for_rate(SCORES, 0.0)
    with pytest.raises(ConfigError, match="criterion"):
        parse_cli(CalibrateConfig, ["criterion=cheap"])
    with pytest.raises(ConfigError, match="value"):
        parse_cli(CalibrateConfig, ["criterion=escalation_rate", "value=1.5"])
    with pytest.raises(ConfigError, match="token_budget"):
        parse_cli(CalibrateConfig, ["criterion=token_budget"])
    with pytest.raises(ConfigError, match="unknown key"):  # `criterion` is the one name
        parse_cli(CalibrateConfig, ["target=escalation_rate", "value=0.5"])


def test_p_values():
    assert binom_cdf(0, 10, 0.1) == pytest.approx(0.9 ** 10)
    assert binom_cdf(2, 10, 0.5) == pytest.approx((1 + 10 + 45) / 1024)
    assert binom_cdf(10, 10, 0.3) == 1.0 and binom_cdf(-1, 10, 0.3) == 0.0


def _simulate(rng, n):
    """Exchangeable records: score ~ N(0, 2); a false cache hit if answered with probability 0.6 sigmoid(-score)."""
    scores = rng.normal(0.0, 2.0, n)
    fch = rng.random(n) < 0.6 / (1 + np.exp(scores))
    return scores, fch


def _true_risk(t):
    grid = np.linspace(-16, 16, 64001)
    dens = np.exp(-grid ** 2 / 8) / math.sqrt(8 * math.pi)
    q = 0.6 / (1 + np.exp(grid))
    return float(np.sum(dens * q * (grid < t)) * (grid[1] - grid[0]))


def test_risk_control_meets_its_bound_on_exchangeable_data():
    alpha, delta, n, seeds = 0.1, 0.1, 400, 300
    ok, nontrivial = 0, 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        scores, fch = _simulate(rng, n)
        cs = CalibrationSet(scores=scores.tolist(), labels=[None] * n, s_ok=[not f for f in fch],
                            r_ok=[True] * n)
        t, g = threshold_risk_control(cs, alpha, delta, grid=(-8.0, 8.0, 321))
        ok += _true_risk(t) <= alpha
        nontrivial += t > ESCALATE_ALL
        assert g["alpha"] == alpha and g["n_calibration"] == n and g["achieved"] <= alpha
    assert ok / seeds >= 1 - delta
    assert nontrivial == seeds  # 400 questions are enough to certify a real threshold every time
    # and it is not vacuous: the threshold answers a real share (the risk at the bound is near alpha)
    assert _true_risk(t) > alpha / 3


def test_risk_control_with_too_little_data_escalates_everything():
    cs = CalibrationSet(scores=[0.0, 1.0, 2.0], labels=[None] * 3, s_ok=[False] * 3, r_ok=[True] * 3)
    t, g = threshold_risk_control(cs, 0.1, 0.1, grid=(-5.0, 5.0, 11))
    assert t == ESCALATE_ALL and g["p_value"] is None and "escalates everything" in g["statement"]
    out = calibrate(cs, CalibrateConfig(criterion="risk_control"))
    assert out["guarantee"]["unit"] == "question" and out["guarantee"]["n_calibration"] == 3
    assert out["achieved"]["escalation_rate"] == 1.0


def test_load_calibration_records_keeps_dropped_records_with_verdicts_and_names_bad_records(tmp_path):
    from tests.helpers.records import rec

    path = tmp_path / "records.jsonl"
    rows = [rec("q1", "c1", True, True, "ANSWER", "validation"), rec("q2", "c1", False, False, None, "validation"),
            rec("q3", "c1", True, True, "ANSWER", "test")]
    rows[1]["s_ok"] = rows[1]["r_ok"] = None  # unknown under the rule: not replayable
    rows.append(dict(rec("q4", "c2", False, False, None, "validation")))
    path.write_text("\n".join(json.dumps(r) for r in rows))
    assert [r["qid"] for r in load_calibration_records(str(path), "validation")[0]] == ["q1", "q4"]
    path.write_text(json.dumps({"question": "q"}))
    with pytest.raises(ValueError, match="line 1: missing field 'router_summaries'"):
        load_calibration_records(str(path), "validation")


def test_main_reports_one_clear_error_line(tmp_path, capsys):
    assert main([f"data={tmp_path / 'missing'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "label data not found" in err[0]


def test_a_router_without_a_score_is_one_clear_error(tmp_path, capsys):
    from tests.helpers.records import rec

    data = tmp_path / "val.jsonl"
    row = rec("f0", "c0", True, True, "ANSWER", "validation")
    row.update(question="What is it?", router_summaries=[])
    data.write_text(json.dumps(row))
    assert main(["router=always-escalate", f"data={data}", "write=false"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]  # (after the progress bar)
    assert len(errors) == 1 and "gives no score" in errors[0] and "Traceback" not in errors[0]


def test_calibrate_stage_stores_threshold_used_at_load(tmp_path):
    import shutil

    from serving.routers.local import LocalRouter
    from tests.helpers.records import rec
    from tests.helpers.router_fixtures import FIXTURES, make_router_run
    from tiermem.runs.run_meta import read_run_meta

    run_dir = tmp_path / "run"
    shutil.copytree(make_router_run(), run_dir)
    rows = []
    for i, (q, s, label) in enumerate(FIXTURES):
        r = rec(f"f{i}", f"c{i % 2}", label == "ANSWER", True, label, "validation")
        r.update(question=q, router_summaries=s)
        rows.append(r)
    dropped = rec("fx", "c9", False, False, None, "validation")  # dropped, both verdicts known: scored too
    dropped.update(question=FIXTURES[0][0], router_summaries=FIXTURES[0][1])
    data = tmp_path / "val.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in [*rows, dropped]))
    assert main([f"router={run_dir}", f"data={data}", "criterion=escalation_rate", "value=1.0"]) == 0
    cal = read_run_meta(run_dir).calibration
    assert (cal["criterion"], cal["value"]) == ("escalation_rate", 1.0) and "target" not in cal
    assert cal["achieved"]["hard_recall"] == 1.0 and cal["achieved"]["n"] == len(FIXTURES) + 1
    router = LocalRouter.from_pretrained(run_dir)
    assert router.threshold_logit == cal["threshold_logit"]
    escalated = [d.action == "ESCALATE" for d in router.route_batch([r["question"] for r in [*rows, dropped]],
                                                                     [r["router_summaries"] for r in [*rows, dropped]])]
    assert sum(escalated) / len(escalated) == cal["achieved"]["escalation_rate"]
    # the default criterion (max expected reward) also runs end to end and is stored with its table
    assert main([f"router={run_dir}", f"data={data}"]) == 0
    cal = read_run_meta(run_dir).calibration
    assert cal["criterion"] == "max_reward" and cal["reward"]["waste"] == 0.4
    # every fixture: research right; the summary right exactly on ANSWER labels -> escalating the ESCALATE
    # labels (and the dropped one, whose both paths fail, is neutral) is optimal: the fixture router ranks them
    assert cal["achieved"]["accuracy"] == pytest.approx(6 / 7)
