"""Fine-tuning a cross-encoder reader: every layer (`fit_reader`), or the top layers over a `FrozenBottom`
(`train_epochs`). Batches come from length buckets: on CPU a step is padding-bound (docs/DESIGN.md)."""

from __future__ import annotations

import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from router_train.reader.checks import check_loss
from tiermem.settings.errors import ConfigError


def length_batches(lengths: Sequence[int], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Index batches of pairs of similar length: shuffle, sort within windows of 50 batches, cut, shuffle the cuts."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    window = batch_size * 50
    grouped = [i for s in range(0, len(order), window)
               for i in sorted(order[s: s + window], key=lambda i: lengths[i])]
    batches = [grouped[s: s + batch_size] for s in range(0, len(grouped), batch_size)]
    rng.shuffle(batches)
    return batches


def span_targets(enc: Any, pairs: Sequence[Sequence[Any]]) -> list[tuple[int, int]]:
    """Token (start, end) of each pair's answer span in its text; (0, 0), the no-answer option ([CLS]), for a pair
    without one; (-100, -100), ignored, for a span the truncation cut off."""
    out = []
    for i, p in enumerate(pairs):
        span = p[3] if len(p) > 3 else None
        if span is None:
            out.append((0, 0))
            continue
        seq, offsets = enc.sequence_ids(i), enc["offset_mapping"][i]
        toks = [t for t, (sid, (a, b)) in enumerate(zip(seq, offsets, strict=True))
                if sid == 1 and b > span[0] and a < span[1]]
        out.append((toks[0], toks[-1]) if toks else (-100, -100))
    return out


def reader_loss(reader: Any, cls: Any, start: Any, end: Any, mask: Any, y: Any, span_y: Any,
                span_weight: float) -> Any:
    """BCE on the classifier; with a span head, cross-entropy of start and end over [CLS] + the text's tokens (the
    SQuAD 2.0 target: the answer span, or [CLS] for no answer; rows whose span target is -100 left out), or with no
    span targets (`span_y` None: the conversations' soft unit targets) BCE on the span margin."""
    import torch

    bce = torch.nn.functional.binary_cross_entropy_with_logits
    loss = bce(cls, y)
    if start is None:
        return loss
    allowed = mask.clone()
    allowed[:, 0] = True
    start, end = start.masked_fill(~allowed, -1e4), end.masked_fill(~allowed, -1e4)
    if span_y is None:
        from tiermem.models.cross_encoder import span_scores

        return loss + span_weight * bce(span_scores(start, end, mask)[0], y)
    ce = torch.nn.functional.cross_entropy
    return loss + span_weight * (ce(start, span_y[:, 0], ignore_index=-100)
                                 + ce(end, span_y[:, 1], ignore_index=-100)) / 2


def fit_reader(reader: Any, pairs: Sequence[Sequence[Any]], *, epochs: int, learning_rate: float,
               weight_decay: float, batch_size: int, warmup_share: float, seed: int, max_length: int,
               log_every: int = 0, label: str = "reader", after_epoch: Callable[[int], None] | None = None,
               span_weight: float = 1.0) -> list[float]:
    """Train every parameter of the reader (and its span head); the mean loss per epoch. A non-finite loss stops it."""
    import torch

    if not pairs:
        raise ValueError(f"{label}: no training pairs")
    tok = reader.tokenizer
    spans = reader.has_spans
    enc = tok([p[0] for p in pairs], [p[1] for p in pairs], truncation=True, max_length=max_length,
              return_offsets_mapping=spans)
    ids, types = enc["input_ids"], enc.get("token_type_ids")
    text_masks = [[s == 1 for s in enc.sequence_ids(i)] for i in range(len(pairs))] if spans else None
    span_y = torch.tensor(span_targets(enc, pairs), dtype=torch.long) if spans else None
    targets = torch.tensor([p[2] for p in pairs], dtype=torch.float32)
    model = reader.model
    model.requires_grad_(True)
    params = list(model.parameters()) + (list(reader.span_head.parameters()) if spans else [])
    steps_per_epoch = math.ceil(len(pairs) / batch_size)
    total = steps_per_epoch * epochs
    warmup = max(1, int(warmup_share * total))
    optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (total - s) / max(1, total - warmup))))
    rng = random.Random(seed)
    torch.manual_seed(seed)  # dropout
    losses, step, started = [], 0, time.perf_counter()
    for epoch in range(1, epochs + 1):
        model.train()
        seen, window = 0.0, []
        for batch in length_batches([len(x) for x in ids], batch_size, rng):
            width = max(len(ids[i]) for i in batch)
            input_ids = torch.full((len(batch), width), tok.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            token_types = torch.zeros((len(batch), width), dtype=torch.long)
            text_mask = torch.zeros((len(batch), width), dtype=torch.bool)
            for r, i in enumerate(batch):
                n = len(ids[i])
                input_ids[r, :n], mask[r, :n] = torch.tensor(ids[i]), 1
                if types is not None:
                    token_types[r, :n] = torch.tensor(types[i])
                if text_masks is not None:
                    text_mask[r, :n] = torch.tensor(text_masks[i])
            cls, start, end = reader.forward({"input_ids": input_ids, "attention_mask": mask,
                                              "token_type_ids": token_types})
            loss = reader_loss(reader, cls, start, end, text_mask, targets[batch],
                               span_y[batch] if span_y is not None else None, span_weight)
            check_loss(loss.item(), label, epoch, step + 1, learning_rate)  # a diverged run named as it happens
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            seen += loss.item() * len(batch)
            window.append(loss.item())
            if log_every and (step % log_every == 0 or step == total):
                spent = time.perf_counter() - started
                print(f"{label}: epoch {epoch}/{epochs} step {step}/{total} loss {sum(window) / len(window):.4f} "
                      f"{spent:.0f} s, ~{spent / step * (total - step):.0f} s left", file=sys.stderr, flush=True)
                window = []
        losses.append(round(seen / len(pairs), 5))
        if after_epoch is not None:
            model.eval()
            after_epoch(epoch)
    model.eval()
    return losses


class FrozenBottom:
    """The encoder's frozen bottom: its output per pair is computed once and reused by every epoch and fold, so a
    step runs only the top `trainable_layers`, pooler and classifier. Serving runs the whole encoder: same function."""

    def __init__(self, reader: Any, trainable_layers: int) -> None:
        import torch

        self.torch, self.reader = torch, reader
        bert = reader.model.bert
        layers = bert.encoder.layer
        if not 1 <= trainable_layers <= len(layers):
            raise ConfigError(f"trainable_layers must be in 1..{len(layers)}, got {trainable_layers}")
        self.n_frozen = len(layers) - trainable_layers
        self.states: dict[tuple[str, str], Any] = {}
        self.text_masks: dict[tuple[str, str], Any] = {}  # where the span head may point, per pair

    def _mask(self, hidden: Any, mask: Any) -> Any:
        from transformers.masking_utils import create_bidirectional_mask

        return create_bidirectional_mask(config=self.reader.model.bert.config, inputs_embeds=hidden,
                                         attention_mask=mask)

    def freeze(self, reader: Any) -> None:
        bert = reader.model.bert
        for module in [bert.embeddings, *bert.encoder.layer[: self.n_frozen]]:
            module.requires_grad_(False)

    def fill(self, keys: Sequence[tuple[str, str]], batch_size: int = 64) -> None:
        """Bottom states of the pairs not cached yet, each trimmed to its own length."""
        todo = [k for k in dict.fromkeys(keys) if k not in self.states]
        bert = self.reader.model.bert
        bert.eval()
        with self.torch.inference_mode():
            for i in range(0, len(todo), batch_size):
                chunk = todo[i: i + batch_size]
                enc = self.reader.encode([k[0] for k in chunk], [k[1] for k in chunk])
                h = bert.embeddings(input_ids=enc["input_ids"], token_type_ids=enc["token_type_ids"])
                mask = self._mask(h, enc["attention_mask"])
                for layer in bert.encoder.layer[: self.n_frozen]:
                    h = layer(h, mask)
                lengths = enc["attention_mask"].sum(dim=1).tolist()
                text = self.reader.text_mask(enc)
                for r, (k, row, n) in enumerate(zip(chunk, h, lengths, strict=True)):
                    self.states[k], self.text_masks[k] = row[:n].clone(), text[r, :n].clone()

    def scores(self, reader: Any, keys: Sequence[tuple[str, str]]) -> tuple[Any, Any, Any, Any]:
        """(classifier, start, end logits, text mask) over the cached bottom states (with grad); spans None without a
        span head."""
        torch = self.torch
        rows = [self.states[k] for k in keys]
        width = max(len(r) for r in rows)
        h = torch.zeros(len(rows), width, rows[0].shape[-1])
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        text = torch.zeros(len(rows), width, dtype=torch.bool)
        for i, (k, r) in enumerate(zip(keys, rows, strict=True)):
            h[i, : len(r)], mask[i, : len(r)], text[i, : len(r)] = r, 1, self.text_masks[k]
        model = reader.model
        mask4 = self._mask(h, mask)
        for layer in model.bert.encoder.layer[self.n_frozen:]:
            h = layer(h, mask4)
        cls = model.classifier(model.dropout(model.bert.pooler(h)))[:, 0]
        if not reader.has_spans:
            return cls, None, None, None
        start_end = reader.span_head(h)
        return cls, start_end[..., 0], start_end[..., 1], text


def train_epochs(reader: Any, train: Sequence[Sequence[Any]], cfg: Any,
                 bottom: FrozenBottom, after_epoch: Any = None, epochs: int | None = None) -> list[float]:
    """Fine-tune the reader's top layers for `epochs` (default cfg.max_epochs), calling after_epoch(epoch) after
    each; returns the mean loss per epoch. Seeded shuffles; AdamW with weight decay, linear warmup and decay."""
    import torch

    epochs = epochs or cfg.max_epochs
    bottom.freeze(reader)
    bottom.fill([(p[0], p[1]) for p in train])
    model = reader.model
    params = [p for p in model.parameters() if p.requires_grad]
    if reader.has_spans:  # the span margin is trained as a second logit of the same target
        params += list(reader.span_head.parameters())
    steps_per_epoch = (len(train) + cfg.batch_size - 1) // cfg.batch_size
    total = steps_per_epoch * epochs
    warmup = max(1, int(cfg.warmup_share * total))
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (total - s) / max(1, total - warmup))))
    rng = random.Random(cfg.seed)
    losses = []
    for epoch in range(1, epochs + 1):
        model.train()
        order = list(range(len(train)))
        rng.shuffle(order)
        seen = 0.0
        for start in range(0, len(order), cfg.batch_size):
            idx = order[start: start + cfg.batch_size]
            batch = [train[i] for i in idx]
            y = torch.tensor([b[2] for b in batch], dtype=torch.float32)
            cls, begin, end, text = bottom.scores(reader, [(b[0], b[1]) for b in batch])
            loss = reader_loss(reader, cls, begin, end, text, y, None, 1.0)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            seen += loss.item() * len(batch)
        losses.append(round(seen / len(train), 5))
        if after_epoch is not None:
            after_epoch(epoch)
    model.eval()
    return losses
