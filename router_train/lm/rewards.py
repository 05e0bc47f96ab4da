"""GRPO's reward functions: the decision scored by tiermem.rewards (waste and cost terms logged) and a format reward."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from tiermem import contract
from tiermem.rewards import CASES, DecisionScore, RewardConfig, resolve_cost_scale, score_decision
from tiermem.settings.errors import ConfigError


def read_action(completion: str, token_ids: Sequence[int] | None,
                action_ids: tuple[int, int] | None) -> str | None:
    """The sampled action, or None when none can be read: with `action_ids` (the completion is the action's first
    token) that token decides; otherwise the completion text is parsed by the contract."""
    if action_ids is not None:
        first = token_ids[0] if token_ids else None
        return dict(zip(action_ids, contract.ACTIONS, strict=True)).get(first)
    parsed = contract.parse(completion)
    return parsed.action if parsed.parsed_ok else None


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


class DecisionReward:
    """Reward for the routing decision (the table above); logs every component through TRL's log_metric."""

    def __init__(self, cfg: RewardConfig, cost_scale: float | None,
                 action_ids: tuple[int, int] | None = None) -> None:
        self.cfg = cfg
        self.cost_scale = cost_scale
        self.action_ids = action_ids  # set: the completion is the action's first token (read_action)
        self.__name__ = "decision"

    def __call__(
        self,
        prompts: list[Any],
        completions: list[str],
        s_ok: list[bool],
        r_ok: list[bool],
        cost_research_input_tokens: list[float],
        completion_ids: list[list[int]] | None = None,
        log_metric: Any = None,
        **_: Any,
    ) -> list[float]:
        scores = []
        ids = completion_ids if completion_ids is not None else [None] * len(completions)
        for completion, token_ids, s, r, tokens in zip(completions, ids, s_ok, r_ok, cost_research_input_tokens,
                                                        strict=True):
            action = read_action(completion, token_ids, self.action_ids)
            scores.append(score_decision(action, bool(s), bool(r), tokens, self.cfg, self.cost_scale))
        if log_metric is not None:
            for name, value in decision_log(scores).items():
                log_metric(name, value)
        return [s.total for s in scores]


def decision_log(scores: Sequence[DecisionScore]) -> dict[str, float]:
    cases = Counter(s.case for s in scores)
    n = len(scores) or 1
    out = {
        "reward_parts/base": _mean([s.base for s in scores]),
        "reward_parts/waste": _mean([s.waste for s in scores]),
        "reward_parts/cost": _mean([s.cost for s in scores]),
        "decision/escalation_rate": sum(c for k, c in cases.items() if k.startswith("escalate")) / n,
    }
    out.update({f"case/{case}": cases.get(case, 0) / n for case in CASES})
    return out


class FormatReward:
    """format_valid when an action can be read: the action prefix (contract.parse), or with `action_ids` the token."""

    def __init__(self, cfg: RewardConfig, action_ids: tuple[int, int] | None = None) -> None:
        self.cfg = cfg
        self.action_ids = action_ids
        self.__name__ = "format"

    def __call__(
        self,
        prompts: list[Any],
        completions: list[str],
        completion_ids: list[list[int]] | None = None,
        log_metric: Any = None,
        **_: Any,
    ) -> list[float]:
        ids = completion_ids if completion_ids is not None else [None] * len(completions)
        ok = [read_action(completion, token_ids, self.action_ids) is not None
              for completion, token_ids in zip(completions, ids, strict=True)]
        if log_metric is not None:
            log_metric("format/valid_action_rate", sum(ok) / max(len(ok), 1))
            log_metric("format/invalid_rate", ok.count(False) / max(len(ok), 1))
        return [self.cfg.format_valid if o else self.cfg.format_invalid for o in ok]


def check_completion_length(tokenizer: Any, max_completion_length: int | None) -> None:
    """The length limit must fit every action's prefix, else the format reward would depend on the action taken."""
    if max_completion_length is None:
        return
    needed = {a: len(tokenizer(contract.OUTPUT_PREFIX + a + '"', add_special_tokens=False)["input_ids"])
              for a in contract.ACTIONS}
    short = {a: n for a, n in needed.items() if n > max_completion_length}
    if short:
        raise ConfigError(
            f"max_completion_length={max_completion_length} cuts the action prefix of {sorted(short)} (needs {short} "
            "tokens): the format reward would depend on the action taken; raise max_completion_length")


def build_reward_funcs(
    cfg: RewardConfig, train_tokens: Sequence[float], max_completion_length: int | None,
    tokenizer: Any = None, action_ids: tuple[int, int] | None = None,
) -> list[Any]:
    """The decision and format rewards. `action_ids`: the prompts end with contract.OUTPUT_PREFIX and each completion
    is one token, the action's first (no length check: one token is all either action needs)."""
    if action_ids is None and tokenizer is not None:
        check_completion_length(tokenizer, max_completion_length)
    return [DecisionReward(cfg, resolve_cost_scale(cfg, train_tokens), action_ids), FormatReward(cfg, action_ids)]
