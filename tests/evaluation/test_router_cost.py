"""Every router's figures count alike: the answering model's input tokens and latency never hold a router's own
cost, which is its own columns (the tokens it read, its time) for every kind, an LM router's prompt, a unit
reader's pairs or nothing for a router that runs no model."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from evaluation import evaluate as E
from evaluation.report import render_markdown
from tests.evaluation.test_evaluate import RECORDS
from tests.evaluation.test_evaluate import Decision as _Decision


@dataclass
class Decision(_Decision):
    score: float | None = None


class SameDecisions:
    """Two routers deciding alike on every record, one reading a 325-token prompt (an LM router running its LM),
    one reading nothing (a score router, or an LM router whose text weight is 0)."""

    threshold_logit = 0.0

    def __init__(self, tokens: int, latency_s: float) -> None:
        self.tokens, self.latency_s = tokens, latency_s

    def route_batch(self, questions, summaries, threshold_logit=None):
        out = []
        for s in summaries:
            score = -2.0 if any("SAYS IT" in u["text"] for u in s) else 2.0
            out.append(Decision("ESCALATE" if score >= 0 else "ANSWER", 0.5, "", True, self.latency_s, self.tokens,
                                score))
        return out


def test_eval_counts_the_answering_models_tokens_alike_and_each_routers_own_cost_apart(tmp_path):
    records = [r for r in RECORDS if r["split"] == "test"]
    cfg = E.EvalConfig(data="records", output_dir=str(tmp_path / "eval"), bootstrap=E.BootstrapConfig(n_boot=50))
    report, preds = E.evaluate_records(records, cfg, SameDecisions(325, 0.8), "lm",
                                       [("reader", SameDecisions(0, 0.01), "score router")])
    lm, reader = report["policies"]["routed"], report["policies"]["reader"]
    for key in ("accuracy", "escalation_rate", "mean_input_tokens", "mean_latency_s"):
        assert lm[key] == pytest.approx(reader[key]), key
    assert lm["mean_input_tokens"] == pytest.approx((200 + 2000 + 200 + 2000) / 4)  # the paths' own tokens
    assert (lm["mean_router_tokens"], reader["mean_router_tokens"]) == (325, 0)
    assert (lm["mean_router_latency_s"], reader["mean_router_latency_s"]) == pytest.approx((0.8, 0.01))
    # the sweep, the ceiling and the intervals read the answering model's tokens too: equal for equal decisions
    assert [p["mean_input_tokens"] for p in report["sweeps"]["routed"]["points"]] == \
        [p["mean_input_tokens"] for p in report["sweeps"]["reader"]["points"]]
    ceiling = report["ceiling"]["routers"]
    assert ceiling["routed"]["calibrated_mean_input_tokens"] == ceiling["reader"]["calibrated_mean_input_tokens"]
    intervals = report["intervals"]
    assert intervals["routed"]["mean_input_tokens"] == intervals["reader"]["mean_input_tokens"]
    table = render_markdown(report)
    assert "| router tokens | router latency (s) |" in table and "| 325.0 | 0.800 |" in table


def test_a_unit_reader_counts_the_tokens_it_read_and_none_when_its_reader_is_not_run(tmp_path):
    from tests.helpers.unit_reader_run import requests, tiny_unit_reader

    router = tiny_unit_reader(tmp_path / "bert")
    questions, summaries, _ = requests(4)
    decisions = router.route_batch(questions, summaries)
    for q, units, d in zip(questions, summaries, decisions, strict=True):
        from serving.routers.unit_reader import unit_text
        from tiermem.models.cross_encoder import MAX_PAIR_TOKENS

        enc = router.reader.tokenizer([q] * len(units), [unit_text(u) for u in units], truncation=True,
                                      max_length=MAX_PAIR_TOKENS)
        assert d.prompt_tokens == sum(len(ids) for ids in enc["input_ids"]) > 0
    router.text_weight = 0.0  # the signals decide alone: the reader is not run
    assert all(d.prompt_tokens == 0 for d in router.route_batch(questions, summaries))
