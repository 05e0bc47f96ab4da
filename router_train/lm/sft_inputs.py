"""What SFT trains on: its rows (the label rows, filtered by the teacher and the minimal-pairs setting, with both
actions' rewards for the reward losses)."""

from __future__ import annotations

import logging
from typing import Any

from labeling.dataset import RecordError
from tiermem.rewards import RewardConfig, resolve_cost_scale, score_decision

from .objectives import REWARD_COLUMNS, REWARD_LOSSES
from .rows import balance_rows, load_label_rows, natural_rows

log = logging.getLogger(__name__)


def with_action_rewards(rows: Any, rewards: RewardConfig, scale: float | None) -> Any:
    """reward_answer / reward_escalate per row: what each action would earn under the reward table."""
    def both(row: dict[str, Any]) -> dict[str, float]:
        return {col: score_decision(action, bool(row["s_ok"]), bool(row["r_ok"]), row["cost_research_input_tokens"],
                                    rewards, scale).total
                for col, action in zip(REWARD_COLUMNS, ("ANSWER", "ESCALATE"), strict=True)}

    return rows.map(both)


def load_rows(cfg: Any, tokenizer: Any) -> tuple[Any, Any, dict[str, Any]]:
    need_rewards = cfg.loss.kind in REWARD_LOSSES
    dataset, train, val = load_label_rows(cfg, tokenizer, f"no labeled rows in split {cfg.train_split!r}; nothing "
                                          "to train on", train_rewards=need_rewards, eval_rewards=False,
                                          signals=cfg.loss.signal_head, teacher=cfg.teacher_filter)
    if not cfg.minimal_pairs:
        train = natural_rows(train)
        if len(train) == 0:
            raise RecordError(f"label dataset {cfg.data}: minimal_pairs=false left no train row (every row of split "
                              f"{cfg.train_split!r} is a minimal pair)")
    teacher_info = None
    if cfg.teacher_filter:
        before = len(train)
        train = train.filter(lambda row: row["teacher_agrees"] is not False)
        teacher_info = {"rows_before": before, "kept": len(train), "dropped_teacher_disagrees": before - len(train),
                        "without_teacher_decision": sum(v is None for v in train["teacher_agrees"])}
        log.info("teacher filter: %d of %d train rows kept (the teacher's decision equals the label, or none)",
                 len(train), before)
        if len(train) == 0:
            raise RecordError(f"label dataset {cfg.data}: teacher_filter left no train row (the teacher disagrees "
                              "with every label)")
    scale = None
    if need_rewards:
        scale = resolve_cost_scale(cfg.rewards, train["cost_research_input_tokens"])
        train = with_action_rewards(train, cfg.rewards, scale)
    balanced, info = balance_rows(cfg, dataset, train, val, minimal_pairs=True)
    info["loss"] = cfg.loss.kind
    if teacher_info is not None:
        info["teacher_filter"] = teacher_info
    if need_rewards:
        info["cost_scale_tokens"] = scale
    return balanced, val, info


def token_lengths(rows: Any, tokenizer: Any, max_length: int | None) -> dict[str, Any]:
    """What the run's metadata records of the train rows' token lengths; rows over `max_length` are truncated (said
    so)."""
    lengths = [len(tokenizer(p + c)["input_ids"]) for p, c in zip(rows["prompt"], rows["completion"], strict=True)]
    over = sum(n > max_length for n in lengths) if max_length else 0
    if over:
        log.warning("%d of %d train rows exceed max_length=%d tokens and are truncated", over, len(lengths),
                    max_length)
    return {"train_tokens_max": max(lengths), "train_tokens_mean": sum(lengths) / len(lengths),
            "train_rows_over_max_length": over}
