"""GRPO on the decision token (one next-token distribution per distinct prompt, through the frozen trunk, the action
prior added where the policy is sampled and where its log-probability is read), and the signal head refit after."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from trl import GRPOTrainer

from serving.signals import FEATURES, SIGNAL_HEAD_FILE
from tiermem import contract
from tiermem.models.logistic import LogisticModel, fit_logistic
from tiermem.models.torch_state import eval_mode, padded
from tiermem.models.trunk import FrozenTrunk, supports_trunk, top_layers_holding

log = logging.getLogger(__name__)
MARGIN_FEATURE = "lm_margin"  # the adapter's margin, a column of the refit beside the serve-time signals


class DecisionGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose one-token completions are sampled and scored at the prompt's last position."""

    def __init__(self, *args: Any, action_token: bool, frozen_trunk: bool = True,
                 action_ids: tuple[int, int] | None = None, trunk_from: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.action_token = action_token
        self.action_ids = action_ids  # (ANSWER's, ESCALATE's) first token: where the prior is added
        self.prior: dict[tuple[int, ...], float] = {}  # prompt token ids -> offset on ESCALATE's logit
        self.trunk = None
        top = top_layers_holding(self.model, "trainable")
        if action_token and frozen_trunk and top is not None and supports_trunk(self.model):
            # trunk_from is read only when the SFT run that wrote it recorded its sha256
            self.trunk = FrozenTrunk(self.model, top, prefix_file=trunk_from, writer=self.args.output_dir)
        if self._fast() and self.rollout_func is None:  # TRL's public generation hook (its constructor's argument)
            self.rollout_func = self.sample_actions

    def _fast(self) -> bool:
        args = self.args
        plain_sampling = (not args.top_k and args.top_p == 1.0 and args.min_p is None
                          and args.repetition_penalty == 1.0 and not args.generation_kwargs)
        return (self.action_token and not self.use_vllm and not self.use_transformers_continuous_batching
                and plain_sampling)

    def set_prior(self, prior: dict[tuple[int, ...], float]) -> None:
        if prior and not (self._fast() and self.action_ids is not None):
            raise ValueError("an action prior needs the action-token path (completion action_token, plain sampling, "
                             "no vLLM): TRL's own generation cannot add it")
        self.prior = dict(prior)

    def prompt_logits(self, model: Any, prompts: Sequence[tuple[int, ...]]) -> torch.Tensor:
        """[len(prompts), vocab] next-token logits at each prompt's end, through the trunk; grad flows when enabled."""
        # left-padded: logits_to_keep=1 reads every row's last real position
        ids, mask = padded(prompts, self.processing_class.pad_token_id, left=True)
        device = self.accelerator.device
        ids, mask = ids.to(device), mask.to(device)
        if self.trunk is not None:
            return self.trunk.logits(model, ids, mask, logits_to_keep=1)[:, -1].float()
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        return model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1,
                     use_cache=False).logits[:, -1].float()

    def policy_logits(self, model: Any, prompts: Sequence[tuple[int, ...]]) -> torch.Tensor:
        """prompt_logits with the action prior on ESCALATE's token: the logits the policy samples from."""
        logits = self.prompt_logits(model, prompts)
        if not self.prior:
            return logits
        try:
            offsets = torch.tensor([self.prior[tuple(p)] for p in prompts], dtype=logits.dtype, device=logits.device)
        except KeyError:
            raise ValueError("a prompt without an action prior: the prior covers every train and eval prompt") from None
        escalate = torch.zeros_like(logits)
        escalate[:, self.action_ids[1]] = 1.0
        return logits + offsets[:, None] * escalate

    def sample_actions(self, prompts: list[str], trainer: Any = None) -> dict[str, Any]:
        """TRL's `rollout_func`: one action token per prompt (tokenized as serving does) sampled from the policy, prior
        included. No sampling log-probs: TRL then applies no importance correction."""
        prompt_ids = self.processing_class(text=list(prompts), add_special_tokens=False)["input_ids"]
        rows = [tuple(p) for p in prompt_ids]
        unique = list(dict.fromkeys(rows))
        with torch.no_grad():
            probs = torch.softmax(self.policy_logits(self.model, unique) / self.temperature, dim=-1)
        index = torch.tensor([unique.index(r) for r in rows])
        tokens = torch.multinomial(probs[index.to(probs.device)], 1).squeeze(-1)
        return {"prompt_ids": prompt_ids, "completion_ids": [[int(t)] for t in tokens.tolist()], "logprobs": None}

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **forward):
        if not (self._fast() and logits_to_keep == 1 and not compute_aux_loss
                and all(v is None for v in forward.values())):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **forward)
        keep = attention_mask[:, :-1].bool()
        rows = [tuple(input_ids[b, :-1][keep[b]].tolist()) for b in range(input_ids.size(0))]
        unique = list(dict.fromkeys(rows))
        logp = torch.log_softmax(self.policy_logits(model, unique) / self.temperature, dim=-1)
        logp = logp[torch.tensor([unique.index(r) for r in rows], device=logp.device)]
        token_logp = logp.gather(-1, input_ids[:, -1:].to(logp.device))
        entropy = -(logp.exp() * logp).sum(dim=-1, keepdim=True) if compute_entropy else None
        return token_logp, entropy, None


def margins(trainer: Any, model: Any, tokenizer: Any, prompts: Sequence[str], batch_size: int) -> np.ndarray:
    """The adapter's ESCALATE - ANSWER margin per rendered prompt, as serving reads it: through the trainer's trunk
    when it has one (prompts it trained on are cached), else serving's own scorer."""
    from serving.routers.lm_head import action_token_ids

    from .decisions import escalation_scores

    if getattr(trainer, "trunk", None) is None or not len(prompts):
        return np.array(escalation_scores(model, tokenizer, list(prompts), batch_size), dtype=np.float64)
    answer_id, escalate_id = action_token_ids(tokenizer, prompts[0])
    out: list[float] = []
    with eval_mode(model), torch.no_grad():
        for start in range(0, len(prompts), batch_size):
            chunk = [tuple(tokenizer(p + contract.OUTPUT_PREFIX, add_special_tokens=False).input_ids)
                     for p in prompts[start:start + batch_size]]
            logits = trainer.prompt_logits(model, chunk)
            out += (logits[:, escalate_id] - logits[:, answer_id]).tolist()
    return np.array(out, dtype=np.float64)


def refit_signal_head(signals: np.ndarray, margin: np.ndarray, escalate: np.ndarray,
                      l2: float) -> tuple[LogisticModel, float]:
    """(head over the serve-time signals, margin weight): SFT's logistic regression with the adapter's margin as one
    more column, folded out (its mean into the bias), so `head(signals) + weight x margin` is the fitted log-odds."""
    x = np.hstack([np.asarray(signals, dtype=np.float64), np.asarray(margin, dtype=np.float64)[:, None]])
    full = fit_logistic(x, escalate, (*FEATURES, MARGIN_FEATURE), l2)
    n = len(FEATURES)
    weight = full.weights[n] / full.scale[n]
    head = dataclasses.replace(
        full, feature_names=list(FEATURES), mean=full.mean[:n], scale=full.scale[:n], weights=full.weights[:n],
        bias=float(full.bias - weight * full.mean[n]), train_min=full.train_min[:n], train_max=full.train_max[:n])
    return head, float(weight)


def refit_head(cfg: Any, trainer: Any, tokenizer: Any, natural: Any,
               val_rows: Any) -> tuple[Any, float, dict[str, Any]]:
    """The signal head refit on the adapter's margins (natural train rows), its margin weight chosen as SFT's is."""
    from .rows import natural_rows
    from .sft import SFTRecipeConfig
    from .sft_head import choose_text_weight

    rows = natural_rows(natural)
    margin = margins(trainer, trainer.model, tokenizer, rows["prompt"], cfg.eval_batch_size)
    escalate = np.array([label == "ESCALATE" for label in rows["label"]], dtype=np.float64)
    head, fitted = refit_signal_head(np.array(rows["signals"], dtype=np.float64), margin, escalate,
                                     cfg.signal_head_l2)
    fit_bias = head.bias
    choose = SFTRecipeConfig(eval_batch_size=cfg.eval_batch_size)  # loss.text_weight None: chosen on validation
    # the refit's combination is head + fitted x margin: the served weight keeps its level, not weight 1's
    text_weight, grid, head = choose_text_weight(choose, trainer.model, tokenizer, head, val_rows, fitted,
                                                 trunk=trainer.trunk)
    info = {"file": SIGNAL_HEAD_FILE, "features": list(FEATURES), "init": "refit on the GRPO adapter's margins",
            "refit_rows": len(rows), "refit_margin_weight": fitted,
            "weights": dict(zip(FEATURES, head.weights, strict=True)), "text_weight": text_weight,
            "text_weight_validation_auroc": grid, "bias_shift": head.bias - fit_bias}
    return head, text_weight, info
