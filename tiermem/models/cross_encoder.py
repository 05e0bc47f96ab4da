"""The reader's model: one encoder pass per (question, text) pair under two heads, the classifier (the text states the
answer) and the optional span head, saved so it also loads as a standard `AutoModelForQuestionAnswering`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiermem.models.torch_state import eval_mode

MAX_PAIR_TOKENS = 128  # question + one clipped unit (200 characters) fits in ~80 word pieces
MAX_ANSWER_TOKENS = 30  # the longest span the span head may point at
PRETRAIN_FILE = "reader_pretrain.json"  # a reading pre-training checkpoint's metadata (router_train.reader.pretrain)
SPAN_KEYS = ("qa_outputs.weight", "qa_outputs.bias")  # the span head inside model.safetensors (transformers' names)
NO_SPAN_MARGIN = -30.0  # a text the span head cannot point into (no text token survived truncation)


@dataclass
class Reading:
    """Per pair: the classifier's logit; with a span head, span margin (best span - no answer) and best span (chars)."""

    logits: list[float]
    span_margins: list[float] | None = None
    spans: list[tuple[int, int]] | None = None
    tokens: list[int] | None = None  # the tokens the encoder read of each pair (truncated, no padding)


def span_scores(start: Any, end: Any, text_mask: Any, max_tokens: int = MAX_ANSWER_TOKENS) -> tuple[Any, Any, Any]:
    """(margin, best start, best end) per row: the best s_i + e_j over text tokens i <= j < i + max_tokens against
    the no-answer s_0 + e_0; differentiable in the margin (a max), so fine-tuning trains it as a logit."""
    import torch

    null = start[:, 0] + end[:, 0]
    width = start.shape[1]
    pair = start[:, :, None] + end[:, None, :]
    idx = torch.arange(width)
    band = (idx[None, :] >= idx[:, None]) & (idx[None, :] < idx[:, None] + max_tokens)
    ok = band[None] & text_mask[:, :, None] & text_mask[:, None, :]
    flat = pair.masked_fill(~ok, float("-inf")).reshape(len(start), -1)
    best, where = flat.max(dim=1)
    empty = ~ok.reshape(len(start), -1).any(dim=1)
    margin = torch.where(empty, torch.full_like(null, NO_SPAN_MARGIN), best - null)
    return margin, where // width, where % width


class CrossEncoder:
    """A sequence-classification encoder (one output logit) with an optional span head (torch Linear(hidden, 2))."""

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 64, span_head: Any = None) -> None:
        import torch

        self.torch, self.model, self.tokenizer, self.batch_size = torch, model, tokenizer, batch_size
        self.span_head = span_head

    @property
    def has_spans(self) -> bool:
        return self.span_head is not None

    @classmethod
    def load(cls, path: str | Path, batch_size: int = 64, span_head: bool = False) -> CrossEncoder:
        """The directory's encoder and classifier; its saved span head, else a new one when `span_head`."""
        import torch
        import transformers
        from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

        config = AutoConfig.from_pretrained(str(path))
        config.num_labels = 1  # the classifier's one logit (a span-head checkpoint's config says 2: start, end)
        verbosity = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()  # the span head's keys are "unused" by the classifier model
        try:
            model = AutoModelForSequenceClassification.from_pretrained(str(path), config=config)
        finally:
            transformers.logging.set_verbosity(verbosity)
        head = None
        saved = _saved_span_head(Path(path))
        if saved is not None or span_head:
            head = torch.nn.Linear(model.config.hidden_size, 2)
            if saved is not None:
                head.load_state_dict({"weight": saved[0], "bias": saved[1]})
        return cls(model, AutoTokenizer.from_pretrained(str(path)), batch_size, head)

    def encode(self, questions: Sequence[str], texts: Sequence[str], offsets: bool = False) -> Any:
        return self.tokenizer(list(questions), list(texts), truncation=True, max_length=MAX_PAIR_TOKENS,
                              padding=True, return_tensors="pt", return_offsets_mapping=offsets)

    def text_mask(self, enc: Any) -> Any:
        """True at the tokens of the text (the pair's second sequence), where a span may start and end."""
        rows = [[s == 1 for s in enc.sequence_ids(i)] for i in range(len(enc["input_ids"]))]
        return self.torch.tensor(rows, dtype=self.torch.bool)

    def forward(self, enc: Any) -> tuple[Any, Any, Any]:
        """(classifier logits, start logits, end logits) of one encoded batch; the span parts None without a head."""
        inputs = {k: v for k, v in enc.items() if k != "offset_mapping"}
        out = self.model(**inputs, output_hidden_states=self.has_spans)
        if not self.has_spans:
            return out.logits[:, 0], None, None
        start_end = self.span_head(out.hidden_states[-1])
        return out.logits[:, 0], start_end[..., 0], start_end[..., 1]

    def read(self, questions: Sequence[str], texts: Sequence[str]) -> Reading:
        """Every pair's classifier logit (float64) and, with a span head, span margin and best span; eval mode."""
        # batches of similar length: a batch pads to its longest pair, and padding is most of a CPU forward pass
        order = sorted(range(len(texts)), key=lambda i: len(questions[i]) + len(texts[i]))
        logits, margins, spans = [0.0] * len(texts), [0.0] * len(texts), [(0, 0)] * len(texts)
        tokens = [0] * len(texts)
        with eval_mode(self.model), self.torch.inference_mode():
            for i in range(0, len(order), self.batch_size):
                idx = order[i: i + self.batch_size]
                enc = self.encode([questions[j] for j in idx], [texts[j] for j in idx], offsets=self.has_spans)
                cls, start, end = self.forward(enc)
                for j, v, n in zip(idx, cls.double().tolist(), enc["attention_mask"].sum(dim=1).tolist(),
                                   strict=True):
                    logits[j], tokens[j] = v, int(n)
                if start is None:
                    continue
                margin, s, e = span_scores(start.double(), end.double(), self.text_mask(enc))
                offsets = enc["offset_mapping"].tolist()
                for r, j in enumerate(idx):
                    margins[j] = float(margin[r])
                    spans[j] = (int(offsets[r][int(s[r])][0]), int(offsets[r][int(e[r])][1]))
        if not self.has_spans:
            return Reading(logits, tokens=tokens)
        return Reading(logits, margins, spans, tokens)

    def logits(self, questions: Sequence[str], texts: Sequence[str]) -> list[float]:
        return self.read(questions, texts).logits

    def best_spans(self, questions: Sequence[str], texts: Sequence[str]) -> list[tuple[int, int, float]]:
        """(start, end, span margin) per pair: the span head's answer in each text (characters) and its margin."""
        if not self.has_spans:
            raise ValueError("this reader has no span head (a classifier-only checkpoint)")
        got = self.read(questions, texts)
        return [(s, e, m) for (s, e), m in zip(got.spans or [], got.span_margins or [], strict=True)]

    def save(self, target: str | Path) -> None:
        """Encoder, classifier, span head and tokenizer into `target` (never through a planted link). With a span
        head, config.json says `num_labels` 2, so AutoModelForQuestionAnswering reads qa_outputs as start/end."""
        import json

        from safetensors.torch import save as to_bytes

        from tiermem.runs import safe_io

        target = Path(target)
        safe_io.save_pretrained(self.model, target, safe_serialization=True)
        safe_io.save_pretrained(self.tokenizer, target)
        if not self.has_spans:
            return
        tensors = {k: v.detach().contiguous() for k, v in self.model.state_dict().items()}
        tensors.update({SPAN_KEYS[0]: self.span_head.weight.detach().contiguous(),
                        SPAN_KEYS[1]: self.span_head.bias.detach().contiguous()})
        safe_io.write_atomic(target / "model.safetensors", to_bytes(tensors, metadata={"format": "pt"}))
        config = json.loads((target / "config.json").read_text())
        config["id2label"], config["label2id"] = {"0": "start", "1": "end"}, {"start": 0, "end": 1}
        qa_arch = type(self.model).__name__.replace("ForSequenceClassification", "ForQuestionAnswering")
        config["architectures"] = [qa_arch, type(self.model).__name__]
        safe_io.write_atomic(target / "config.json", json.dumps(config, indent=2, sort_keys=True))


def _saved_span_head(path: Path) -> tuple[Any, Any] | None:
    weights = path / "model.safetensors"
    if not weights.is_file():
        return None
    from safetensors import safe_open

    with safe_open(str(weights), framework="pt") as fh:
        keys = set(fh.keys())
        if not set(SPAN_KEYS) <= keys:
            return None
        return fh.get_tensor(SPAN_KEYS[0]), fh.get_tensor(SPAN_KEYS[1])
