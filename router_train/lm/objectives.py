"""Decision-focused training losses for the router (`DECISION_LOSSES`, the SFT config's `loss:`) on top of TRL's
SFTTrainer: `decision` and `expected_reward`, at the decision token, with an optional signal head (docs/DESIGN.md)."""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from trl import SFTTrainer

from tiermem.models.logistic import LogisticModel
from tiermem.models.trunk import FrozenTrunk, supports_trunk, top_layers_holding
from tiermem.settings.config import check_declared

log = logging.getLogger(__name__)

TEXT_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)  # the grid loss.text_weight=null chooses from
REWARD_COLUMNS = ("reward_answer", "reward_escalate")


@dataclass
class LossConfig:
    kind: Literal["decision", "expected_reward"] = "decision"  # DECISION_LOSSES
    # weight of the completion NLL beside the decision term (keeps the JSON format)
    lm_weight: float = field(default=0.1, metadata={"ge": 0})
    # weight of -log p(either action token) at the decision position, over the full vocabulary: the two-way
    # decision terms only compare the two actions, so without it sampled completions drift to other tokens there
    # ("EQUAL", "RESOLVE", ...), which breaks generate mode and leaves GRPO with mostly unparseable samples.
    mass_weight: float = field(default=1.0, metadata={"ge": 0})
    # Compute the frozen bottom layers once per row and reuse them every epoch (tiermem.models.trunk.FrozenTrunk),
    # when the adapter trains only the top layers (lora.top_layers) and the model type allows it.
    frozen_trunk: bool = True
    trunk_cache: str | None = None  # a file keeping the trunk states between runs (same data, model and split)
    # Add a learned linear head over the serve-time signals to the decision margin (decision / expected_reward).
    signal_head: bool = False
    # L2 of the logistic regression that initializes the head
    signal_head_l2: float = field(default=1.0, metadata={"ge": 0})
    # the LM margin's weight beside the head at serving time: null = chosen after training on the validation split
    # from TEXT_WEIGHTS by AUROC (1.0 when there are no validation rows); a number fixes it
    text_weight: float | None = field(default=None, metadata={"ge": 0})

    def __post_init__(self) -> None:
        check_declared(self, "loss.")


class SignalHead(torch.nn.Module):
    """Log-odds over standardized serve-time signals: the trainable twin of a serving.signals.LogisticModel."""

    def __init__(self, init: LogisticModel) -> None:
        super().__init__()
        self.template = init
        self.register_buffer("mean", torch.tensor(init.mean, dtype=torch.float32))
        self.register_buffer("scale", torch.tensor(init.scale, dtype=torch.float32))
        # the training range serving clips to (LogisticModel.clip), applied here too so training reads what serving
        # reads (an augmented row may lie outside the natural rows' range)
        lo, hi = (init.train_min, init.train_max) if init.train_min is not None else ([-math.inf] * len(init.mean),
                                                                                       [math.inf] * len(init.mean))
        self.register_buffer("lo", torch.tensor(lo, dtype=torch.float32))
        self.register_buffer("hi", torch.tensor(hi, dtype=torch.float32))
        self.linear = torch.nn.Linear(len(init.weights), 1)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor([init.weights], dtype=torch.float32))
            self.linear.bias.fill_(float(init.bias))

    def forward(self, signals: torch.Tensor) -> torch.Tensor:
        inside = torch.minimum(torch.maximum(signals.float(), self.lo), self.hi)
        return self.linear((inside - self.mean) / self.scale).squeeze(-1)

    def to_logistic(self) -> LogisticModel:
        return dataclasses.replace(self.template, weights=[float(w) for w in self.linear.weight[0].tolist()],
                                   bias=float(self.linear.bias.item()))


def _positions(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(idx [B, K], targets [B, K], valid [B, K]): each row's positions whose logits predict a completion token;
    rows with fewer than K repeat their last one, masked out by `valid`."""
    shifted = labels[:, 1:]
    mask = shifted != -100
    counts = mask.sum(dim=1)
    width = max(int(counts.max()), 1)
    idx = torch.zeros(labels.size(0), width, dtype=torch.long, device=labels.device)
    for b in range(labels.size(0)):
        pos = mask[b].nonzero().flatten()
        if len(pos):
            idx[b, : len(pos)] = pos
            idx[b, len(pos):] = pos[-1]
    valid = torch.arange(width, device=labels.device)[None, :] < counts[:, None]
    return idx, shifted.gather(1, idx), valid


class RouterSFTTrainer(SFTTrainer):
    """SFTTrainer with the decision-focused losses above."""

    def __init__(self, *args: Any, loss: LossConfig, action_ids: tuple[int, int],
                 class_weights: tuple[float, float] = (1.0, 1.0), signal_head: LogisticModel | None = None,
                 centre_signal_head: bool = True, **kwargs: Any) -> None:
        self.loss_config = loss
        self.action_ids = action_ids
        self.class_weights = class_weights
        super().__init__(*args, **kwargs)
        self.trunk = None
        top = top_layers_holding(self.model, "trainable")
        if loss.frozen_trunk and top is not None and supports_trunk(self.model):
            # read only when the run that wrote it recorded its sha256; what was recomputed or left alone is said
            self.trunk = FrozenTrunk(self.model, top, cache_file=loss.trunk_cache, writer=self.args.output_dir)
            for note in self.trunk.notes:
                log.warning("%s", note)
        # After the trunk check: the head's parameters are not in a decoder layer. A submodule of the model, so
        # the trainer's optimizer updates it with the adapter.
        self.signal_head = None
        self._head_centred = not centre_signal_head  # a head saved with a trained adapter is already centred
        if signal_head is not None:
            self.signal_head = SignalHead(signal_head).to(self.args.device)
            self.model.add_module("router_signal_head", self.signal_head)
        self.extra_columns = ((list(REWARD_COLUMNS) if loss.kind in REWARD_LOSSES else [])
                              + (["signals", "augmented"] if signal_head is not None else []))
        if self.extra_columns:
            collate = self.data_collator

            def with_columns(examples: list[dict[str, Any]]) -> dict[str, Any]:
                batch = collate(examples)
                if loss.kind in REWARD_LOSSES:
                    batch["reward_pair"] = torch.tensor([[e[c] for c in REWARD_COLUMNS] for e in examples],
                                                        dtype=torch.float32)
                if signal_head is not None:
                    batch["signals"] = torch.tensor([e["signals"] for e in examples], dtype=torch.float32)
                    batch["natural"] = torch.tensor([not e["augmented"] for e in examples], dtype=torch.float32)
                return batch

            self.data_collator = with_columns

    def _set_signature_columns_if_needed(self) -> None:
        super()._set_signature_columns_if_needed()
        if self.extra_columns and self._signature_columns is not None:
            self._signature_columns = list(self._signature_columns) + self.extra_columns

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        reward_pair = inputs.pop("reward_pair", None)
        signals = inputs.pop("signals", None)
        natural = inputs.pop("natural", None)
        labels = inputs["labels"]
        idx, targets, valid = _positions(labels)
        # Logits only where a completion token is predicted: the vocabulary projection is the costly part.
        if self.trunk is not None:
            logits = self.trunk.logits(model, inputs["input_ids"], inputs["attention_mask"], logits_to_keep=idx)
        else:
            model_inputs = {k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask", "position_ids")}
            logits = model(**model_inputs, logits_to_keep=idx, use_cache=False).logits
        logits = logits.float()
        logp = F.log_softmax(logits, dim=-1)
        token_logp = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        lm_loss = -(token_logp * valid).sum() / valid.sum().clamp(min=1)

        answer_id, escalate_id = self.action_ids
        is_action = ((targets == answer_id) | (targets == escalate_id)) & valid
        if not bool(is_action.any(dim=1).all()):
            raise ValueError("a training row has no action token in its completion: it is not a contract target")
        first = is_action.float().argmax(dim=1)  # first action token of each row
        rows = torch.arange(labels.size(0), device=labels.device)
        pair = logits[rows, first][:, [answer_id, escalate_id]]  # [B, 2]: ANSWER, ESCALATE
        if self.signal_head is not None:
            if signals is None:
                raise ValueError("loss.signal_head: the batch has no `signals` column")
            if not self._head_centred and model.training:
                # The untrained adapter's margin has an arbitrary offset; the head starts centred against it (first
                # batch), so the combined log-odds start at the logistic regression's.
                with torch.no_grad():
                    self.signal_head.linear.bias -= (pair[:, 1] - pair[:, 0]).mean().to(self.signal_head.linear.bias)
                self._head_centred = True
            head = self.signal_head(signals.to(pair.device))
            if natural is not None:
                # Minimal pairs differ from their question by one unit of text, often with near-identical signals
                # and the opposite label: they teach the reader, and would only blur the head, which serves natural
                # retrieval. Their gradient reaches the adapter, not the head.
                keep = natural.to(head)
                head = keep * head + (1.0 - keep) * head.detach()
            pair = pair + torch.stack([torch.zeros_like(head), head], dim=1)
        escalate = (targets[rows, first] == escalate_id).long()
        decision_loss = DECISION_LOSSES[self.loss_config.kind](pair, escalate, reward_pair, self.class_weights)
        decision_logp = logp[rows, first]
        mass_loss = -torch.logsumexp(decision_logp[:, [answer_id, escalate_id]], dim=-1).mean()
        loss = decision_loss + self.loss_config.lm_weight * lm_loss + self.loss_config.mass_weight * mass_loss
        mode = "train" if model.training else "eval"
        with torch.no_grad():
            p_escalate = torch.softmax(pair, dim=-1)[:, 1]
            self._metrics[mode]["action_mass"].append(float(torch.exp(-mass_loss)))
            self._metrics[mode]["decision_loss"].append(float(decision_loss))
            self._metrics[mode]["lm_loss"].append(float(lm_loss))
            self._metrics[mode]["mean_p_escalate"].append(float(p_escalate.mean()))
        return (loss, None) if return_outputs else loss


def decision_loss(pair: torch.Tensor, escalate: torch.Tensor, reward_pair: torch.Tensor | None,
                  class_weights: tuple[float, float]) -> torch.Tensor:
    """Class-weighted cross-entropy on the two action logits."""
    return F.cross_entropy(pair, escalate, weight=torch.tensor(class_weights, device=pair.device))


def expected_reward_loss(pair: torch.Tensor, escalate: torch.Tensor, reward_pair: torch.Tensor | None,
                         class_weights: tuple[float, float]) -> torch.Tensor:
    """Minus the exact expected reward of the two-action policy (each row's rewards for ANSWER and ESCALATE)."""
    if reward_pair is None:
        raise ValueError("loss expected_reward needs the reward_answer/reward_escalate columns")
    probs = torch.softmax(pair, dim=-1)
    return -(probs * reward_pair.to(probs.device)).sum(dim=-1).mean()


# what a decision loss reads and returns: docs/DESIGN.md, Adding a loss
DECISION_LOSSES = {"decision": decision_loss, "expected_reward": expected_reward_loss}
REWARD_LOSSES = ("expected_reward",)  # their rows carry REWARD_COLUMNS


def balanced_class_weights(labels: list[str]) -> tuple[float, float]:
    """Inverse-frequency weights (ANSWER, ESCALATE), normalized to mean 1 over the rows."""
    n = len(labels)
    n_escalate = sum(label == "ESCALATE" for label in labels)
    n_answer = n - n_escalate
    if not n_answer or not n_escalate:
        return 1.0, 1.0
    return n / (2 * n_answer), n / (2 * n_escalate)
