"""The reader's model: a sequence-classification encoder with one output logit per (question, text) pair, the
logit that the text states the question's answer. The unit reader router scores retrieved units with it, the
reading pre-training trains it, and `ask`'s extractive answerer scores sentences with it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

MAX_PAIR_TOKENS = 128  # question + one clipped unit (200 characters) fits in ~80 word pieces
PRETRAIN_FILE = "reader_pretrain.json"  # a reading pre-training checkpoint's metadata (router_train.reader_pretrain)


class CrossEncoder:
    """A sequence-classification encoder with one output: the logit that the unit states the question's answer."""

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 64) -> None:
        import torch

        self.torch, self.model, self.tokenizer, self.batch_size = torch, model, tokenizer, batch_size

    @classmethod
    def load(cls, path: str | Path, batch_size: int = 64) -> CrossEncoder:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        model = AutoModelForSequenceClassification.from_pretrained(str(path), num_labels=1)
        return cls(model, AutoTokenizer.from_pretrained(str(path)), batch_size)

    def encode(self, questions: Sequence[str], texts: Sequence[str]) -> Any:
        return self.tokenizer(list(questions), list(texts), truncation=True, max_length=MAX_PAIR_TOKENS,
                              padding=True, return_tensors="pt")

    def logits(self, questions: Sequence[str], texts: Sequence[str]) -> list[float]:
        """One logit per (question, unit text) pair, in float64; puts the model in eval mode for the call."""
        was_training = self.model.training
        self.model.eval()
        # batches of similar length: a batch pads to its longest pair, and padding is most of a CPU forward pass
        order = sorted(range(len(texts)), key=lambda i: len(questions[i]) + len(texts[i]))
        out = [0.0] * len(texts)
        try:
            with self.torch.inference_mode():
                for i in range(0, len(order), self.batch_size):
                    idx = order[i: i + self.batch_size]
                    batch = self.encode([questions[j] for j in idx], [texts[j] for j in idx])
                    for j, v in zip(idx, self.model(**batch).logits[:, 0].double().tolist(), strict=True):
                        out[j] = v
        finally:
            self.model.train(was_training)
        return out
