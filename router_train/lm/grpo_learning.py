"""What makes GRPO's decision-token policy explore (the action prior: SFT's head plus one calibrated constant) and
what a run says it learned (the exact expected validation reward before and after; `RewardPlateauStop`)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from transformers import TrainerCallback

from serving.routers.base import DEFAULT_THRESHOLD_LOGIT, decide
from serving.routers.lm_head import served_score
from tiermem import contract
from tiermem.models.logistic import sigmoid
from tiermem.models.torch_state import eval_mode, restore_trainable, trainable_snapshot
from tiermem.stats import bootstrap_counts, interval, weighted_mean

log = logging.getLogger(__name__)
N_BOOT = 1000
CURVE_COLUMNS = ("step", "reward", "reward_std", "frac_reward_zero_std", "grad_norm", "decision/escalation_rate")
_CURVE_PREFIXES = ("reward", "rewards/", "reward_parts/", "case/", "decision/", "format/", "frac_reward_zero_std",
                   "loss", "kl", "entropy", "completions/mean_length", "learning_rate", "grad_norm")


def reward_curves(log_history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    curves = []
    for entry in log_history:
        if "reward" not in entry:
            continue
        point = {"step": entry.get("step")}
        point.update({k: v for k, v in entry.items() if k.startswith(_CURVE_PREFIXES)})
        curves.append(point)
    return curves


def prompt_keys(tokenizer: Any, prompts: Sequence[str]) -> list[tuple[int, ...]]:
    """Each rendered prompt's token ids up to the output prefix, as the trainer tokenizes its prompts."""
    return [tuple(tokenizer(p + contract.OUTPUT_PREFIX, add_special_tokens=False).input_ids) for p in prompts]


def action_logits(trainer: Any, model: Any, keys: Sequence[tuple[int, ...]], batch_size: int,
                  temperature: float) -> np.ndarray:
    """[n, 3]: ANSWER's and ESCALATE's logits and logsumexp(other logits / temperature), the prior left out; enough
    to get the policy's three probabilities under any prior (`action_probs`)."""
    answer_id, escalate_id = trainer.action_ids
    out = []
    with eval_mode(model), torch.no_grad():
        for start in range(0, len(keys), batch_size):
            logits = trainer.prompt_logits(model, list(keys[start:start + batch_size])).double()
            other = logits / temperature
            other[:, [answer_id, escalate_id]] = -math.inf
            out.append(torch.stack([logits[:, answer_id], logits[:, escalate_id],
                                    torch.logsumexp(other, dim=-1)], dim=1).cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, 3))


def action_probs(logits: np.ndarray, prior: np.ndarray, temperature: float) -> np.ndarray:
    """[n, 3] p(ANSWER), p(ESCALATE), p(other) of the sampled policy: softmax(logits / T), the prior on ESCALATE's."""
    z = np.stack([logits[:, 0] / temperature, (logits[:, 1] + prior) / temperature, logits[:, 2]], axis=1)
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=1, keepdims=True)


def escalation_share(logits: np.ndarray, prior: np.ndarray | float, temperature: float) -> np.ndarray:
    """p(ESCALATE | an action is sampled) per row."""
    return sigmoid((logits[:, 1] + prior - logits[:, 0]) / temperature)


def one_action_share(p_escalate: np.ndarray, generations: int) -> float:
    """The expected share of groups whose `generations` samples are all one action."""
    return float(np.mean(p_escalate ** generations + (1.0 - p_escalate) ** generations))


def calibrated_shift(logits: np.ndarray, offsets: np.ndarray, target: float, temperature: float) -> float:
    """The constant c with mean p(ESCALATE) = target under offsets + c (bisection: the mean increases in c)."""
    if not 0.0 < target < 1.0:
        raise ValueError(f"the target escalation share must be in (0, 1), got {target}")
    lo, hi = -60.0 * temperature, 60.0 * temperature
    centre = float(np.median(logits[:, 0] - logits[:, 1] - offsets))
    lo, hi = lo + centre, hi + centre
    for _ in range(100):
        mid = (lo + hi) / 2
        if escalation_share(logits, offsets + mid, temperature).mean() < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def action_rewards(reward_funcs: Sequence[Any], weights: Sequence[float], rows: Any, tokenizer: Any,
                   action_ids: tuple[int, int]) -> np.ndarray:
    """[n, 3] the weighted sum of GRPO's reward functions for ANSWER, ESCALATE and an unparseable token per row."""
    other = next(t for t in (tokenizer.eos_token_id, 0, 1, 2) if t is not None and t not in action_ids)
    tokens = [action_ids[0], action_ids[1], other]
    n = len(rows)
    columns = {k: [v for v in rows[k] for _ in tokens] for k in ("s_ok", "r_ok", "cost_research_input_tokens")}
    ids = [[t] for _ in range(n) for t in tokens]
    texts = tokenizer.batch_decode(ids)
    total = np.zeros(n * len(tokens))
    for func, weight in zip(reward_funcs, weights, strict=True):
        total += weight * np.asarray(func(prompts=[""] * len(ids), completions=texts, completion_ids=ids,
                                          **columns), dtype=np.float64)
    return total.reshape(n, len(tokens))


def expected_reward(probs: np.ndarray, rewards: np.ndarray) -> np.ndarray:
    return (probs * rewards).sum(axis=1)


def paired(before: Sequence[float], after: Sequence[float], clusters: Sequence[Any],
           seed: int) -> dict[str, Any]:
    """Means before and after and their paired difference, each with a 95% two-stage cluster-bootstrap interval
    (conversations, then rows: the same draws for both sides)."""
    before, after = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    counts = bootstrap_counts(list(clusters), N_BOOT, seed)
    return {"rows": len(before), "conversations": len(set(clusters)),
            "before": interval(float(before.mean()), weighted_mean(before, counts)),
            "after": interval(float(after.mean()), weighted_mean(after, counts)),
            "difference": interval(float((after - before).mean()), weighted_mean(after - before, counts))}


def moved(comparison: dict[str, Any] | None) -> str:
    """up | down | not measurably: where the paired difference's interval lies."""
    diff = (comparison or {}).get("difference") or {}
    if diff.get("lo") is not None and diff["lo"] > 0:
        return "up"
    if diff.get("hi") is not None and diff["hi"] < 0:
        return "down"
    return "not measurably"


class RewardPlateauStop(TrainerCallback):
    """Every `every` steps: the policy's expected validation reward (`evaluate`); stops after `patience` checks
    without a gain over the best by more than `min_delta` (0: never), or once the mean share of one-action groups
    since the last check is above `max_zero_variance`; `restore` puts the best checked weights back."""

    def __init__(self, evaluate: Callable[[], float], every: int, patience: int, min_delta: float,
                 max_zero_variance: float = 1.0) -> None:
        self.evaluate, self.every, self.patience, self.min_delta = evaluate, every, patience, min_delta
        self.max_zero_variance = max_zero_variance
        self.checks: list[dict[str, float]] = []
        self.best: tuple[float, int, dict[str, torch.Tensor] | None] | None = None
        self.since_best = 0
        self.stopped_at: int | None = None
        self.stop_reason: str | None = None
        self.window: list[float] = []  # the logged zero-variance shares since the last check

    def start(self, model: Any, value: float) -> None:
        """The check before training (`value`: the start's reward, already measured)."""
        self._record(0, value, model)

    def _record(self, step: int, value: float, model: Any) -> None:
        self.checks.append({"step": step, "validation_reward": value})
        if self.best is None or value > self.best[0] + self.min_delta:
            self.best, self.since_best = (value, step, trainable_snapshot(model)), 0
        else:
            self.since_best += 1

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any) -> Any:
        if self.every and state.global_step % self.every == 0 and model is not None:
            value = self.evaluate()
            self._record(state.global_step, value, model)
            log.info("grpo step %d: validation expected reward %.4f (best %.4f at step %d)", state.global_step,
                     value, self.best[0], self.best[1])
            spent = float(np.mean(self.window)) if self.window else None
            self.window = []
            if self.patience and self.since_best >= self.patience:
                self.stop_reason = (f"{self.since_best} checks without a validation gain over step {self.best[1]}")
            elif spent is not None and spent > self.max_zero_variance:
                self.stop_reason = (f"the signal is spent: {spent:.2f} of the groups since the last check were one "
                                    f"action (max_zero_variance {self.max_zero_variance:g})")
            if self.stop_reason:
                self.stopped_at = state.global_step
                log.info("grpo: stopping at step %d, %s", state.global_step, self.stop_reason)
                control.should_training_stop = True
        return control

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any) -> Any:
        if logs and logs.get("frac_reward_zero_std") is not None:
            self.window.append(float(logs["frac_reward_zero_std"]))
        if logs and "frac_reward_zero_std" in logs:
            print(f"[grpo] step {state.global_step}: zero-variance groups {_num(logs.get('frac_reward_zero_std'))}, "
                  f"grad norm {_num(logs.get('grad_norm'))}, sampled escalation "
                  f"{_num(logs.get('decision/escalation_rate'))}, reward {_num(logs.get('reward'))}, entropy "
                  f"{_num(logs.get('entropy'))}", flush=True)
        return control

    def restore(self, model: Any, last_step: int) -> int:
        """Put the best checked weights back; returns the step they are from."""
        if self.best is None or not self.every:  # unchecked: the trained weights stand
            return last_step
        if self.checks and self.checks[-1]["step"] != last_step:
            self._record(last_step, self.evaluate(), model)
        value, step, weights = self.best
        if step != last_step and weights is not None:
            restore_trainable(model, weights)
        return step


def summary_line(learned: dict[str, Any]) -> str:
    policy = learned.get("validation_expected_reward") or {}
    def cell(key: str) -> str:
        value = policy.get(key) or {}
        return _num(value.get("estimate")) + (f" [{_num(value['lo'])}, {_num(value['hi'])}]"
                                              if value.get("lo") is not None else "")

    return (f"[grpo] {learned.get('verdict')}: zero-variance groups {_num(learned.get('zero_variance_share'))}, grad "
            f"norm {_num(learned.get('grad_norm_mean'))} (max {_num(learned.get('grad_norm_max'))}), sampled "
            f"escalation {_num(learned.get('sampled_escalation_first'))} -> "
            f"{_num(learned.get('sampled_escalation_last'))}; validation expected reward {cell('before')} -> "
            f"{cell('after')}, difference {cell('difference')}; weights of step {learned.get('kept_step')}")


def _num(value: Any) -> str:
    return "n/a" if value is None else f"{float(value):.3g}"


def signal_summary(curves: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The run's learning signal from its logged steps: zero-variance share, gradient norm, sampled escalation."""
    def series(key: str) -> list[float]:
        return [float(p[key]) for p in curves if p.get(key) is not None]

    zero, grad, esc = series("frac_reward_zero_std"), series("grad_norm"), series("decision/escalation_rate")
    return {"logged_steps": len(curves),
            "zero_variance_share": float(np.mean(zero)) if zero else None,
            "grad_norm_mean": float(np.mean(grad)) if grad else None,
            "grad_norm_max": float(max(grad)) if grad else None,
            "logged_steps_with_zero_grad": sum(g == 0.0 for g in grad),
            "sampled_escalation_first": esc[0] if esc else None,
            "sampled_escalation_last": esc[-1] if esc else None,
            "sampled_escalation_mean": float(np.mean(esc)) if esc else None}


def signal_warnings(summary: dict[str, Any], policy: dict[str, Any] | None) -> list[str]:
    """Why this run is not a refinement, if it is not: no updates, or a validation reward that did not rise."""
    warnings = []
    zero, grad = summary.get("zero_variance_share"), summary.get("grad_norm_max")
    if (zero is not None and zero >= 1.0) or grad == 0.0:
        warnings.append(f"GRPO made no update: every logged step had zero reward spread in each group or a zero "
                        f"gradient (zero-variance share {_num(zero)}, largest grad norm {_num(grad)}): the adapter "
                        "is the SFT adapter and this run is not a refinement. Raise trainer.temperature, keep "
                        "prior_calibrate on, or raise num_generations.")
    direction = moved(policy)
    if policy is not None and direction != "up":
        diff = policy["difference"] or {}
        warnings.append(f"GRPO's validation expected reward did not rise (after - before {_num(diff.get('estimate'))} "
                        f"[{_num(diff.get('lo'))}, {_num(diff.get('hi'))}], {policy['rows']} rows, "
                        f"{policy['conversations']} conversation(s)): {direction}, so this run is not a refinement "
                        "of the SFT router.")
    return warnings


class PolicyProbe:
    """The sampled policy's prior (`prior`: prompt token ids -> offset on ESCALATE's logit, for the trainer's
    `set_prior`; empty when there is none) and its exact expected reward on the validation rows."""

    def __init__(self, trainer: Any, tokenizer: Any, reward_funcs: Sequence[Any], *, temperature: float,
                 batch_size: int, head: Any, calibrate: bool, train_rows: Any, val_rows: Any,
                 generations: int) -> None:
        self.trainer, self.temperature, self.batch_size = trainer, temperature, batch_size
        weights = getattr(trainer, "reward_weights", None)
        weights = [1.0] * len(reward_funcs) if weights is None else [float(w) for w in weights]
        every = prompt_keys(tokenizer, train_rows["prompt"])
        # one row per distinct prompt (oversampling repeats them)
        first = {k: i for i, k in reversed(list(enumerate(every)))}
        keys = list(first)
        rows = train_rows.select(list(first.values()))
        train_offsets = self._offsets(head, rows)
        logits = action_logits(trainer, trainer.model, keys, batch_size, temperature)
        target = float(np.mean([label == "ESCALATE" for label in rows["label"]]))
        start = float(escalation_share(logits, train_offsets, temperature).mean())
        shift = calibrated_shift(logits, train_offsets, target, temperature) if calibrate and 0 < target < 1 else 0.0
        self.val = val_rows if val_rows is not None and len(val_rows) else None
        self.val_keys = prompt_keys(tokenizer, self.val["prompt"]) if self.val is not None else []
        self.val_prior = (self._offsets(head, self.val) + shift) if self.val is not None else np.zeros(0)
        self.val_rewards = (action_rewards(reward_funcs, weights, self.val, tokenizer, trainer.action_ids)
                            if self.val is not None else np.zeros((0, 3)))
        self.prior: dict[tuple[int, ...], float] = {}
        if head is not None or shift:
            self.prior = dict(zip(keys, (train_offsets + shift).tolist(), strict=True))
            self.prior.update(zip(self.val_keys, self.val_prior.tolist(), strict=True))
        bare, primed = escalation_share(logits, 0.0, temperature), escalation_share(logits, train_offsets + shift,
                                                                                    temperature)
        self.info = {"head": head is not None, "calibrated": bool(calibrate and shift), "shift": shift,
                     "train_prompts": len(keys), "label_escalation_share": target,
                     "escalation_share_without_prior": float(bare.mean()), "escalation_share_with_head": start,
                     "escalation_share_at_start": float(primed.mean()),
                     # a group of one prompt's samples is all one action with probability p^G + (1-p)^G
                     "expected_zero_variance_share_without_prior": one_action_share(bare, generations),
                     "expected_zero_variance_share_at_start": one_action_share(primed, generations)}

    @staticmethod
    def _offsets(head: Any, rows: Any) -> np.ndarray:
        if head is None:
            return np.zeros(len(rows))
        return head.log_odds(np.asarray(rows["signals"], dtype=np.float64))

    def val_logits(self) -> np.ndarray:
        return action_logits(self.trainer, self.trainer.model, self.val_keys, self.batch_size, self.temperature)

    def val_expected(self, logits: np.ndarray) -> np.ndarray:
        return expected_reward(action_probs(logits, self.val_prior, self.temperature), self.val_rewards)

    def val_reward(self) -> float:
        """The policy's mean exact expected reward on the validation rows (nan without any)."""
        return float(self.val_expected(self.val_logits()).mean()) if self.val is not None else math.nan

    def router_rewards(self, logits: np.ndarray, head: Any, text_weight: float) -> np.ndarray:
        """Per validation row, the reward of the served router's decision (uncalibrated threshold, served_score)."""
        heads = None if head is None else head.log_odds(np.asarray(self.val["signals"], dtype=np.float64))
        score = served_score(logits[:, 1] - logits[:, 0], heads, text_weight)
        escalate = np.array([decide(float(s), DEFAULT_THRESHOLD_LOGIT) == "ESCALATE" for s in score], dtype=bool)
        return np.where(escalate, self.val_rewards[:, 1], self.val_rewards[:, 0])
