"""What an LM router reads besides its weights: the first token of each action (the fast path's two logits, an
endpoint's log-probs) and the signal head that SFT trains beside the adapter (added to their margin)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from serving.signals import FEATURES, LogisticModel, read_logistic
from tiermem import contract
from tiermem.runs.run_meta import RunMeta
from tiermem.settings.errors import RouterLoadError


def action_token_ids(tokenizer: Any, prompt: str | None = None) -> tuple[int, int]:
    """The first token of ANSWER and of ESCALATE right after a prompt + OUTPUT_PREFIX, tokenized as serving does
    (add_special_tokens=False: the chat template holds the special tokens): the fast path's two logits, and the
    tokens SFT's decision loss reads. `prompt`: a rendered contract prompt (default: a one-word question)."""
    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False).input_ids

    head = (contract.render_prompt(tokenizer, "q", []) if prompt is None else prompt) + contract.OUTPUT_PREFIX
    head_ids = encode(head)
    ids = []
    for action in contract.ACTIONS:
        full = encode(head + action)
        if full[: len(head_ids)] != head_ids or len(full) <= len(head_ids):
            raise RouterLoadError(f"tokenizer merges {action!r} into the output prefix; fast path impossible")
        ids.append(full[len(head_ids)])
    if ids[0] == ids[1]:
        raise RouterLoadError(f"ANSWER and ESCALATE share their first token {ids[0]}; use mode='generate'")
    return ids[0], ids[1]


def action_pieces(tokenizer: Any) -> dict[str, str]:
    """action -> the text of its first token (action_token_ids), as an endpoint's log-probs name it."""
    return {a: tokenizer.decode([t]) for a, t in zip(contract.ACTIONS, action_token_ids(tokenizer), strict=True)}


def check_text_weight(value: Any) -> float:
    """The LM margin's weight beside a signal head: a finite number >= 0 (named error at load, never per request)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise RouterLoadError(f"signal head: text_weight must be a finite number >= 0, got {value!r}")
    return float(value)


def check_head_features(head: LogisticModel) -> LogisticModel:
    if list(head.feature_names) != list(FEATURES):
        raise RouterLoadError(f"signal head reads features {head.feature_names}, this version computes "
                              f"{list(FEATURES)}: retrain the router")
    return head


def read_signal_head(run_dir: str | Path, meta: RunMeta) -> tuple[LogisticModel | None, float]:
    """(head, text_weight) a router run saved (None, 1.0 for a run without a head)."""
    saved = meta.data.get("signal_head") or {}
    if not saved.get("file"):
        return None, 1.0
    head = check_head_features(read_logistic(Path(run_dir) / saved["file"]))
    return head, check_text_weight(saved.get("text_weight", 1.0))
