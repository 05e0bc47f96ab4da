"""GRPO's reward functions for the router: the decision scored by the reward table (tiermem.rewards), with its
waste and cost terms logged, plus a format reward; one float per completion, as TRL calls them."""

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
    """1 for the contract JSON; partial credit when the action parsed but generation hit the length limit. With
    `action_ids` (the completion is the action's first token) valid means that token is an action's."""

    def __init__(self, cfg: RewardConfig, max_completion_length: int | None,
                 action_ids: tuple[int, int] | None = None) -> None:
        self.cfg = cfg
        self.max_completion_length = max_completion_length
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
        rewards, kinds = [], Counter()
        ids = completion_ids if completion_ids is not None else [None] * len(completions)
        for completion, token_ids in zip(completions, ids, strict=True):
            if self.action_ids is not None:
                ok = read_action(completion, token_ids, self.action_ids) is not None
                kind, value = ("valid_action", self.cfg.format_valid) if ok else ("invalid", self.cfg.format_invalid)
                kinds[kind] += 1
                rewards.append(value)
                continue
            parsed = contract.parse(completion)
            truncated = (
                token_ids is not None
                and self.max_completion_length is not None
                and len(token_ids) >= self.max_completion_length
            )
            if self.cfg.format_scope == "action":
                kind, value = ("valid_action", self.cfg.format_valid) if parsed.parsed_ok else (
                    "invalid", self.cfg.format_invalid)
            elif parsed.valid_json:
                kind, value = "valid_json", self.cfg.format_valid
            elif parsed.parsed_ok and truncated:
                kind, value = "truncated", self.cfg.format_truncated
            else:
                kind, value = "invalid", self.cfg.format_invalid
            kinds[kind] += 1
            rewards.append(value)
        if log_metric is not None:
            action_only = self.cfg.format_scope == "action" or self.action_ids is not None
            kinds_logged = ("valid_action", "invalid") if action_only else ("valid_json", "truncated", "invalid")
            for kind in kinds_logged:
                log_metric(f"format/{kind}_rate", kinds[kind] / max(len(rewards), 1))
        return rewards


def check_completion_length(cfg: RewardConfig, max_completion_length: int | None,
                            needed_tokens: dict[str, int] | None) -> None:
    """The length limit must let every action earn the same format reward (RewardConfig.format_scope);
    `needed_tokens`: action -> the tokens its completion needs under the scope."""
    if max_completion_length is None or not needed_tokens:
        return
    short = {a: n for a, n in needed_tokens.items() if n > max_completion_length}
    if short:
        raise ConfigError(
            f"max_completion_length={max_completion_length} cuts the {cfg.format_scope!r}-scope format of "
            f"{sorted(short)} (needs {short} tokens): the format reward would depend on the action taken; raise "
            "max_completion_length or use rewards.format_scope=action")


def completion_tokens_needed(cfg: Any, tokenizer: Any, rows: Any) -> dict[str, int]:
    """Tokens each action's completion needs under the format scope: its prefix, or its longest full target."""
    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    if cfg.rewards.format_scope == "action":
        return {a: count(contract.OUTPUT_PREFIX + a + '"') for a in contract.ACTIONS}
    needed: dict[str, int] = {}
    for label, completion in zip(rows["label"], rows["completion"], strict=True):
        needed[label] = max(needed.get(label, 0), count(completion))  # the eos is part of a finished completion
    return needed


def build_reward_funcs(
    cfg: RewardConfig, train_tokens: Sequence[float], max_completion_length: int | None,
    needed_tokens: dict[str, int] | None = None, action_ids: tuple[int, int] | None = None,
) -> list[Any]:
    """The decision and format rewards. `action_ids`: the prompts end with contract.OUTPUT_PREFIX and each completion
    is one token, the action's first (no length check: one token is all either action needs)."""
    if action_ids is None:
        check_completion_length(cfg, max_completion_length, needed_tokens)
    return [DecisionReward(cfg, resolve_cost_scale(cfg, train_tokens), action_ids),
            FormatReward(cfg, max_completion_length, action_ids)]
