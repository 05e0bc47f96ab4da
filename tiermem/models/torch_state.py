"""Torch mechanisms trainers and scorers share: eval mode for a block, trainable weights kept and put back, padding."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any


@contextmanager
def eval_mode(model: Any) -> Iterator[Any]:
    """The model in eval mode inside the block, and back in the mode it had after it (also on error): scoring in the
    middle of training must not leave dropout off, nor turn it on in a model that was serving."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def trainable_snapshot(model: Any) -> dict[str, Any]:
    """A copy of every trainable parameter (adapter, head): what `restore_trainable` puts back."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def restore_trainable(model: Any, snapshot: dict[str, Any]) -> None:
    """Copy a `trainable_snapshot` back into the model's parameters, in place (the optimizer keeps its tensors)."""
    import torch

    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, saved in snapshot.items():
            params[name].copy_(saved)


def padded(rows: Sequence[Sequence[int]], pad: int | None, left: bool = False) -> tuple[Any, Any]:
    """(ids, attention mask) of token rows padded to the longest, on the right or on the `left` (then every row's last
    real token sits in the last column); pad id 0 when the tokenizer has none: the mask hides it."""
    import torch

    width = max(len(r) for r in rows)
    pad = 0 if pad is None else pad

    def side(row: list[int], fill: int, n: int) -> list[int]:
        return [fill] * n + row if left else row + [fill] * n

    ids = torch.tensor([side(list(r), pad, width - len(r)) for r in rows], dtype=torch.long)
    mask = torch.tensor([side([1] * len(r), 0, width - len(r)) for r in rows], dtype=torch.long)
    return ids, mask
