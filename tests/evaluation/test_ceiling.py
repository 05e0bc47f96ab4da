"""The ranking's ceiling (evaluation/ceiling.py) on a hand-computed case: the fewest tokens within w points of
raw-only at a threshold chosen on the data, the false-cache-hit share among the most ANSWER-confident decisions,
and the calibrated point beside them, in eval.json, eval.md, the eval summary and the model card."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from evaluation import ceiling as C
from evaluation import evaluate as E
from evaluation.metrics import Case, replay
from evaluation.sweep import sweep_points
from tests.helpers.records import rec

# (score, s_ok, r_ok): escalation score ascending = most ANSWER-confident first
ROWS = [(-3.0, True, True), (-2.0, False, True), (-1.0, True, True), (0.0, True, False), (0.5, False, True),
        (1.0, False, True), (2.0, True, True), (3.0, False, False), (4.0, False, True), (5.0, True, True)]


def _cases() -> list[Case]:
    return [Case(f"q{i}", "1", None, s, r, 100.0, 1000.0, 0.0, 0.0) for i, (_, s, r) in enumerate(ROWS)]


def _scores() -> list[float]:
    return [row[0] for row in ROWS]


def test_fewest_tokens_within_points_of_raw_only_by_hand():
    # raw-only: 8 of 10 right at 1000 tokens. Escalating from the top score down, (tokens, accuracy):
    # (100, .5) (190, .5) (280, .6) (370, .6) (460, .6) (550, .7) (640, .8) (730, .7) (820, .7) (910, .8) (1000, .8)
    cases, points = _cases(), sweep_points(_cases(), _scores())
    raw = C.raw_only(cases)
    assert raw == {"accuracy": pytest.approx(0.8), "mean_input_tokens": pytest.approx(1000.0)}
    one = C.fewest_tokens_within(points, raw["accuracy"], raw["mean_input_tokens"], 1)
    assert one["mean_input_tokens"] == pytest.approx(640.0) and one["accuracy"] == pytest.approx(0.8)
    assert one["tokens_fewer_share"] == pytest.approx(0.36) and one["threshold_logit"] == 0.5
    assert one["escalation_rate"] == pytest.approx(0.6)
    ten = C.fewest_tokens_within(points, raw["accuracy"], raw["mean_input_tokens"], 10)  # accuracy >= 0.7
    assert ten["mean_input_tokens"] == pytest.approx(550.0) and ten["threshold_logit"] == 1.0
    every = C.fewest_tokens_within(points, raw["accuracy"], raw["mean_input_tokens"], 30)  # never escalating counts
    assert every["mean_input_tokens"] == pytest.approx(100.0) and every["threshold_logit"] is None
    assert C.fewest_tokens_within(points, 0.95, 1000.0, 1)["mean_input_tokens"] is None  # out of reach: none


def test_false_cache_hit_share_among_the_most_answer_confident_by_hand():
    cases, scores = _cases(), _scores()
    # 10%: q0 (both paths right): no false cache hit; 20%: q0, q1 (only research right): 1 of 2; 30%: 1 of 3
    assert C.false_cache_hit_share(cases, scores, 10) == {"percent": 10, "n_decisions": 1, "false_cache_hits": 0,
                                                          "share": 0.0}
    assert C.false_cache_hit_share(cases, scores, 20)["share"] == pytest.approx(0.5)
    assert C.false_cache_hit_share(cases, scores, 30)["share"] == pytest.approx(1 / 3)
    # the order is the score's, not the list's
    assert C.false_cache_hit_share(cases[::-1], scores[::-1], 20)["share"] == pytest.approx(0.5)
    # ties at the cut count by their expected share: 2 of 3 tied cases enter, one of the three a false hit
    tied = [Case(f"t{i}", "1", None, s, r, 1.0, 2.0, 0.0, 0.0)
            for i, (s, r) in enumerate([(False, True), (True, True), (True, True), (False, True)])]
    share = C.false_cache_hit_share(tied, [0.0, 0.0, 0.0, 1.0], 50)
    assert share["n_decisions"] == 2 and share["false_cache_hits"] == pytest.approx(2 / 3)
    assert share["share"] == pytest.approx(1 / 3)


def test_router_ceiling_row_puts_the_calibrated_point_beside_it():
    cases, scores = _cases(), _scores()
    policy = replay(cases, [1.0 if s >= 2.0 else 0.0 for s in scores])  # its own threshold: 2.0
    row = C.router_ceiling(cases, scores, policy, 2.0, "calibrate max_reward on validation",
                           sweep_points(cases, scores))
    assert row["mean_input_tokens_within_1pt"] == pytest.approx(640.0)
    assert row["mean_input_tokens_within_2pt"] == pytest.approx(640.0)
    assert row["false_cache_hit_share_top10"] == 0.0 and row["false_cache_hit_share_top20"] == pytest.approx(0.5)
    # threshold 2.0 escalates 4: accuracy 0.6 at 460 tokens
    assert row["calibrated_accuracy"] == pytest.approx(0.6)
    assert row["calibrated_tokens_fewer_share"] == pytest.approx(0.54)
    assert row["calibrated_accuracy_minus_raw_only"] == pytest.approx(-0.2)
    assert row["calibrated_threshold_logit"] == 2.0


@dataclass
class Decision:
    action: str
    p_escalate: float
    reason: str
    parsed_ok: bool
    latency_s: float
    prompt_tokens: int
    score: float


class TableRouter:
    """A stand-in with Router's route_batch: each question's score from a table."""

    threshold_logit = 2.0

    def __init__(self, scores: dict[str, float]) -> None:
        self.scores = scores

    def route_batch(self, questions, summaries, threshold_logit=None):
        t = self.threshold_logit if threshold_logit is None else threshold_logit
        return [Decision("ESCALATE" if self.scores[q] >= t else "ANSWER", 0.5, "table", True, 0.0, 0, self.scores[q])
                for q in questions]


def test_eval_reports_the_ceiling_in_json_and_markdown(tmp_path):
    records = []
    for i, (_, s, r) in enumerate(ROWS):
        label = "ANSWER" if s else ("ESCALATE" if r else None)
        records.append(rec(f"q{i}", f"c{i % 2}", s, r, label, "test"))
    router = TableRouter({f"question q{i}?": row[0] for i, row in enumerate(ROWS)})
    cfg = E.EvalConfig(data=str(tmp_path / "none"), output_dir=str(tmp_path / "eval"))
    cfg.bootstrap.n_boot = 0
    report, preds = E.evaluate_records(records, cfg, router, "table")
    ceiling = report["ceiling"]
    assert "CEILING" in ceiling["note"] and ceiling["raw_only"]["mean_input_tokens"] == pytest.approx(2000.0)
    row = ceiling["routers"]["routed"]
    # the same escalations as by hand (6 of 10 at threshold 0.5), at 200 / 2000 tokens a path
    assert row["mean_input_tokens_within_1pt"] == pytest.approx(1280.0)
    assert row["tokens_fewer_share_within_1pt"] == pytest.approx(0.36)
    assert row["false_cache_hit_share_top10"] == 0.0 and row["false_cache_hit_share_top20"] == pytest.approx(0.5)
    assert row["calibrated_accuracy"] == pytest.approx(report["policies"]["routed"]["accuracy"])
    assert row["calibrated_by"] == "default threshold (not calibrated)"
    paths = E.write_outputs(report, preds, cfg.output_dir)
    assert json.loads(paths["json"].read_text())["ceiling"]["routers"]["routed"]["n_top20"] == 2
    md = paths["markdown"].read_text()
    assert "The ranking's ceiling" in md and "a CEILING, not an operating point" in md
    assert "| routed | 1,280 (36.0% fewer; accuracy 0.800) | 1,280 (36.0% fewer; accuracy 0.800) | 0.000 (0 of 1) " \
           "| 0.500 (1 of 2) | 920 (54.0% fewer; accuracy 0.600, -0.200 vs raw-only) |" in md
