"""What an LM router reads besides its weights: each action's first token, the signal head SFT trains beside the
adapter, and the one place the served score is written (`served_score`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from serving.signals import FEATURES
from tiermem import contract
from tiermem.models.logistic import LogisticModel, read_logistic
from tiermem.runs.run_meta import RUN_META_FILE, RunMeta
from tiermem.settings import ranges
from tiermem.settings.errors import RouterLoadError


def action_token_ids(tokenizer: Any, prompt: str | None = None) -> tuple[int, int]:
    """The first token of ANSWER and of ESCALATE after a rendered prompt (default: a one-word question) +
    OUTPUT_PREFIX, tokenized as serving does: the fast path's two logits and the tokens SFT's decision loss reads."""
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
    return ranges.non_negative(value, "signal head: text_weight", RouterLoadError)


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


def served_score(margin: Any, head_log_odds: Any = None, text_weight: float = 1.0) -> Any:
    """An LM router's log-odds of ESCALATE: `text_weight x margin + head(signals)`, the margin alone without a head."""
    return margin if head_log_odds is None else text_weight * margin + head_log_odds


def head_as_trained(run_dir: str | Path, meta: RunMeta) -> tuple[LogisticModel | None, LogisticModel | None, float]:
    """(the head as training combined it with the margin, at weight 1; the served head; the served text weight) of a
    router run, or (None, None, 1.0) without a head. The served head's bias was moved for its text weight
    (`signal_head.bias_shift`, sft_head.choose_text_weight); the first is the head with that move undone."""
    served, text_weight = read_signal_head(run_dir, meta)
    if served is None:
        return None, None, 1.0
    shift = ranges.finite((meta.data.get("signal_head") or {}).get("bias_shift", 0.0),
                          f"{Path(run_dir) / RUN_META_FILE}: field data.signal_head.bias_shift", RouterLoadError)
    return dataclasses.replace(served, bias=served.bias - shift), served, text_weight
