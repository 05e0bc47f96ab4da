"""Read a router's decision the way the contract allows: one forward pass up to OUTPUT_PREFIX (the first token
decides), plus a few greedy generations parsed by the contract so format failures show in the metrics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from router_train.lm.recipe_config import RecipeConfig
from serving.routers.base import DEFAULT_THRESHOLD_LOGIT, decide
from tiermem import contract
from tiermem.models.logistic import sigmoid
from tiermem.models.torch_state import eval_mode
from tiermem.stats import auroc

GENERATE_TOKENS = 48  # the greedy generations' length limit (the format/parse rates)


def escalation_scores(model: Any, tokenizer: Any, prompts: Sequence[str], batch_size: int = 8,
                      signal_head: Any = None, signals: Any = None, text_weight: float = 1.0,
                      trunk: Any = None) -> list[float]:
    """Log-odds of ESCALATE per prompt from serving's own scorer (LocalRouter.score_prompts), so training metrics and
    serving cannot drift apart; `trunk`: the training run's FrozenTrunk (bottom layers once per run, not per report)."""
    from serving.routers.local import LocalRouter

    if not prompts:
        return []
    with eval_mode(model):
        router = LocalRouter(model, tokenizer, prefix_cache=False, batch_size=batch_size, signal_head=signal_head,
                             text_weight=text_weight, trunk=trunk)
        return router.score_prompts(list(prompts), signals)


def decision_metrics(predicted: Sequence[str], labels: Sequence[str], train_majority: str | None) -> dict[str, Any]:
    """Accuracy vs the hindsight label, escalation rate, and the two trivial baselines on the same rows."""
    if len(predicted) != len(labels):
        raise ValueError("predicted and labels differ in length")
    n = len(labels)
    if n == 0:
        return {"n": 0}
    pairs = Counter(zip(labels, predicted, strict=True))
    escalate_share = sum(lab == "ESCALATE" for lab in labels) / n
    return {
        "n": n,
        "accuracy": sum(p == lab for p, lab in zip(predicted, labels, strict=True)) / n,
        "escalation_rate": sum(p == "ESCALATE" for p in predicted) / n,
        "label_escalate_share": escalate_share,
        "baseline_always_escalate_accuracy": escalate_share,
        "baseline_majority_accuracy": (
            None if train_majority is None else sum(lab == train_majority for lab in labels) / n
        ),
        "baseline_majority_label": train_majority,
        "confusion": {f"label_{lab}/pred_{p}": pairs.get((lab, p), 0)
                      for lab in contract.ACTIONS for p in contract.ACTIONS},
    }


def decision_report(
    model: Any, tokenizer: Any, rows: Any, train_majority: str | None, cfg: Any, limit: int | None,
    signal_head: Any = None, text_weight: float = 1.0, trunk: Any = None,
) -> dict[str, Any] | None:
    """Decision metrics on a split's first `limit` rows (None without rows), first-token path, uncalibrated threshold,
    plus parse/format rates on cfg.eval_generate_limit greedy generations; a signal head reads the rows' `signals`."""
    if rows is None or len(rows) == 0:
        return None
    rows = rows.select(range(min(len(rows), limit))) if limit else rows
    prompts, labels, batch_size = rows["prompt"], rows["label"], cfg.eval_batch_size
    signals = rows["signals"] if signal_head is not None else None
    scores = escalation_scores(model, tokenizer, prompts, batch_size, signal_head, signals, text_weight, trunk)
    probs = [sigmoid(s) for s in scores]
    predicted = [decide(s, DEFAULT_THRESHOLD_LOGIT) for s in scores]
    result = decision_metrics(predicted, labels, train_majority)
    result["threshold_logit"] = DEFAULT_THRESHOLD_LOGIT
    result["mean_p_escalate"] = sum(probs) / len(probs) if probs else None
    positive = [label == "ESCALATE" for label in labels]
    # Ranking quality is what calibration can use; accuracy at the argmax hides a router that ranks well but is shifted.
    result["auroc"] = auroc(scores, positive) if 0 < sum(positive) < len(positive) else None
    if cfg.eval_generate_limit and prompts:
        k = min(cfg.eval_generate_limit, len(prompts))
        from serving.routers.local import LocalRouter

        with eval_mode(model):  # serving's greedy generation, parsed by the contract
            router = LocalRouter(model, tokenizer, prefix_cache=False)
            texts = [g["text"] for i in range(0, k, batch_size)
                     for g in router.generate(list(prompts[i: min(i + batch_size, k)]), GENERATE_TOKENS)]
        parsed = [contract.parse(t) for t in texts]
        result["generate"] = {
            "n": k,
            "parsed_ok_rate": sum(d.parsed_ok for d in parsed) / k,
            "valid_json_rate": sum(d.valid_json for d in parsed) / k,
            "accuracy": sum(d.action == lab for d, lab in zip(parsed, labels[:k], strict=True)) / k,
            "agrees_with_first_token": sum(d.action == p for d, p in zip(parsed, predicted[:k], strict=True)) / k,
        }
    return result


def decision_reports(model: Any, tokenizer: Any, train_rows: Any, val_rows: Any, cfg: RecipeConfig,
                     signal_head: Any = None, text_weight: float = 1.0, trunk: Any = None) -> dict[str, Any]:
    """`train_decisions` (first cfg.metrics_train_rows train rows) and `validation` metrics vs the train majority."""
    majority = majority_label(list(train_rows["label"]))
    return {
        "train_decisions": decision_report(model, tokenizer, train_rows, majority, cfg, cfg.metrics_train_rows,
                                           signal_head, text_weight, trunk),
        "validation": decision_report(model, tokenizer, val_rows, majority, cfg, None, signal_head, text_weight,
                                      trunk),
    }


def majority_label(labels: list[str]) -> str | None:
    if not labels:
        return None
    counts = {a: labels.count(a) for a in contract.ACTIONS}
    return max(contract.ACTIONS, key=lambda a: (counts[a], a == "ESCALATE"))  # ties -> ESCALATE (safe side)
