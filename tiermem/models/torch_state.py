"""Small torch mechanisms every trainer and scorer shares: a model put in eval mode for a while and handed back as it
was, the trainable weights kept aside and put back (the best epoch or step), and right padding of token rows."""

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


def right_padded(rows: Sequence[Sequence[int]], pad: int | None) -> tuple[Any, Any]:
    """(ids, attention mask) of token rows padded on the right to the longest (pad id 0 when the tokenizer has
    none: the mask hides it)."""
    import torch

    width = max(len(r) for r in rows)
    pad = 0 if pad is None else pad
    ids = torch.tensor([list(r) + [pad] * (width - len(r)) for r in rows], dtype=torch.long)
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], dtype=torch.long)
    return ids, mask


def left_padded(rows: Sequence[Sequence[int]], pad: int | None) -> tuple[Any, Any]:
    """(ids, attention mask) padded on the left: every row's last real token sits in the last column."""
    import torch

    width = max(len(r) for r in rows)
    pad = 0 if pad is None else pad
    ids = torch.tensor([[pad] * (width - len(r)) + list(r) for r in rows], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
    return ids, mask
