"""`tiermem-router unit-reader`: train the unit reader router (serving/routers/unit_reader.py).

1. Pairs: every natural question's per-unit targets (labeling/unit_targets.py): its router units and, in the train
   split, its deeper units that state the answer plus the `deep_negatives` highest-ranked ones that do not (the near
   misses: same topic, no answer). The target is the unit's own answer recall (soft) or its one-unit verdict.
2. Model selection by leave-one-conversation-out over train + validation: for each conversation, a reader is
   fine-tuned on the other conversations' pairs and scores the held-out one's router units after every epoch
   (out-of-fold unit logits). For each (epochs, pooling, text weight) a logistic head over the serve-time signals
   and the pooled unit logits is fitted on the other conversations and ranks the held-out one; the best mean
   AUROC wins (fold spread reported, beside the signals-only head's). The test split is never read.
3. The final reader is fine-tuned on the train split for the chosen epochs; the head is fitted on the train
   split's out-of-fold logits (a reader's logits on its own training questions are overconfident, so a head fitted
   on them would overweight the text), and validation stays clean for calibrate. Metrics go through the serving
   scorer (UnitReaderRouter.score).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from serving.routers.unit_reader import (
    POOLINGS,
    CrossEncoder,
    UnitReaderRouter,
    head_matrix,
    head_parts,
    unit_logits,
    unit_text,
)
from serving.signals import FEATURES, feature_matrix, fit_logistic
from tiermem import contract
from tiermem.errors import ConfigError, DataError, stage_main

log = logging.getLogger(__name__)


@dataclass
class UnitReaderConfig:
    data: str = "runs/label/dataset"  # label DatasetDict with unit_targets (labeling: unit_targets.enabled)
    output_dir: str = "runs/reader"
    base: str = "packaged:all-minilm-l6-v2"  # the encoder fine-tuned as a cross-encoder (a model spec)
    target: str = "recall"  # recall: the unit's answer recall (soft BCE) | s_ok: its one-unit evidence verdict
    # deeper units (rank > top_k, train split) per question kept as negatives, highest-ranked first; every deeper
    # positive is kept
    deep_negatives: int = 3
    max_epochs: int = 2  # epochs per fold; CV picks the number of epochs in 1..max_epochs
    learning_rate: float = 1e-4
    weight_decay: float = 0.01
    batch_size: int = 32  # pairs per step
    warmup_share: float = 0.1  # share of steps with a linear learning-rate warmup
    poolings: list[str] = field(default_factory=lambda: list(POOLINGS))  # candidates CV chooses among
    text_weights: list[float] = field(default_factory=lambda: [0.0, 0.5, 1.0, 1.5])  # the text part's weight grid
    l2: float = 1.0  # the head's L2 penalty (standardized features)
    cv_splits: list[str] = field(default_factory=lambda: ["train", "validation"])  # LOCO over their conversations
    train_split: str = "train"  # the final reader and head
    eval_splits: list[str] = field(default_factory=lambda: ["validation"])  # metrics through the serving scorer
    score_batch_size: int = 64  # pairs per forward pass when scoring
    trainable_layers: int = 1  # top encoder layers fine-tuned (the bottom ones are frozen and their output cached)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.target not in ("recall", "s_ok"):
            raise ConfigError(f"target must be recall or s_ok, got {self.target!r}")
        bad = [p for p in self.poolings if p not in POOLINGS]
        if bad or not self.poolings:
            raise ConfigError(f"poolings must be names from {sorted(POOLINGS)}, got {self.poolings}")
        if not self.text_weights or any(w < 0 for w in self.text_weights):
            raise ConfigError(f"text_weights must be numbers >= 0, got {self.text_weights}")
        for name in ("deep_negatives", "max_epochs", "batch_size", "score_batch_size"):
            if getattr(self, name) < (0 if name == "deep_negatives" else 1):
                raise ConfigError(f"{name} must be >= {0 if name == 'deep_negatives' else 1}")
        if self.learning_rate <= 0 or self.weight_decay < 0 or not 0 <= self.warmup_share < 1 or self.l2 < 0:
            raise ConfigError("learning_rate > 0, weight_decay >= 0, 0 <= warmup_share < 1 and l2 >= 0 are required")
        if self.train_split not in self.cv_splits:
            raise ConfigError(f"train_split {self.train_split!r} must be one of cv_splits {self.cv_splits}")


# ---- rows and pairs ------------------------------------------------------------------------------


def natural_records(data: str, split: str) -> list[dict[str, Any]]:
    """The split's natural question records, every field training reads checked first (the shared label-record
    reader and field checks: RecordError naming file or record and field), so a bad record stops the stage before
    any training, never after the whole cross-validation."""
    from labeling.dataset import action_label, load_split, record_key, summary_units, text
    from labeling.unit_targets import check_unit_targets

    rows = [r for r in load_split(data, split) if not r.get("augmentation") and not r.get("error")]
    for i, r in enumerate(rows):
        for key in ("question", "router_summaries", "unit_targets", "conv_id", "label"):
            if key not in r:
                raise DataError(f"{data} [{split}] record {i} (qid={r.get('qid')!r}): missing field {key!r}"
                                + (" (relabel with unit_targets.enabled)" if key == "unit_targets" else ""))
        where = f"{data} [{split}] record {i} (qid={r.get('qid')!r})"
        record_key(r, where)
        text(r, "question", where)
        summary_units(r, where)
        action_label(r, where)
        check_unit_targets(r["unit_targets"], where)
    return rows


def pairs(records: Sequence[dict[str, Any]], target: str, deep_negatives: int) -> list[tuple[str, str, float]]:
    """(question, unit text, target) for the reader: router units, deeper positives, top deeper negatives."""
    out = []
    for r in records:
        k, negatives = len(r["router_summaries"]), 0
        for u in r["unit_targets"]:
            if u["answer_recall"] is None:  # the gold answer has no scorable token: no target
                continue
            y = float(u["answer_recall"]) if target == "recall" else float(u["s_ok"])
            if not 0.0 <= y <= 1.0:
                raise DataError(f"record {r['qid']!r}: unit {u['unit_id']!r} target {y} outside [0, 1]")
            if u["rank"] > k and not u["s_ok"] and y == 0.0:
                if negatives >= deep_negatives:
                    continue
                negatives += 1
            out.append((r["question"], unit_text(u), y))
    if records and not out:  # nothing to fine-tune on (the loss would divide by zero pairs)
        raise DataError(f"none of {len(records)} record(s) has a unit with a target: every answer_recall is null "
                        "or unit_targets is empty (relabel with unit_targets.enabled)")
    return out


# ---- fine-tuning ---------------------------------------------------------------------------------


def fresh_reader(cfg: UnitReaderConfig) -> CrossEncoder:
    import torch

    from tiermem.models import resolve_model

    torch.manual_seed(cfg.seed)  # the classification head's initialization
    return CrossEncoder.load(resolve_model(cfg.base), batch_size=cfg.score_batch_size)


class FrozenBottom:
    """The encoder's embeddings and bottom layers, frozen: their output per (question, unit text) pair is computed
    once (no grad) and reused by every epoch and every fold (each fold starts from the same pretrained weights), so a
    step runs only the top `trainable_layers`, the pooler and the classifier. Serving runs the whole encoder with
    the same weights, so the scores are the same function."""

    def __init__(self, reader: CrossEncoder, trainable_layers: int) -> None:
        import torch

        self.torch, self.reader = torch, reader
        bert = reader.model.bert
        layers = bert.encoder.layer
        if not 1 <= trainable_layers <= len(layers):
            raise ConfigError(f"trainable_layers must be in 1..{len(layers)}, got {trainable_layers}")
        self.n_frozen = len(layers) - trainable_layers
        self.states: dict[tuple[str, str], Any] = {}

    def _mask(self, hidden: Any, mask: Any) -> Any:
        from transformers.masking_utils import create_bidirectional_mask

        return create_bidirectional_mask(config=self.reader.model.bert.config, inputs_embeds=hidden,
                                         attention_mask=mask)

    def freeze(self, reader: CrossEncoder) -> None:
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
                for k, row, n in zip(chunk, h, lengths, strict=True):
                    self.states[k] = row[:n].clone()

    def logits(self, reader: CrossEncoder, keys: Sequence[tuple[str, str]]) -> Any:
        """The top layers, pooler and classifier of `reader` over the cached bottom states (with grad)."""
        torch = self.torch
        rows = [self.states[k] for k in keys]
        width = max(len(r) for r in rows)
        h = torch.zeros(len(rows), width, rows[0].shape[-1])
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            h[i, : len(r)], mask[i, : len(r)] = r, 1
        model = reader.model
        mask4 = self._mask(h, mask)
        for layer in model.bert.encoder.layer[self.n_frozen:]:
            h = layer(h, mask4)
        return model.classifier(model.dropout(model.bert.pooler(h)))[:, 0]


def train_epochs(reader: CrossEncoder, train: list[tuple[str, str, float]], cfg: UnitReaderConfig,
                 bottom: FrozenBottom, after_epoch: Any = None, epochs: int | None = None) -> list[float]:
    """Fine-tune the reader's top layers for `epochs` (default cfg.max_epochs), calling after_epoch(epoch) after
    each; returns the mean loss per epoch. Seeded shuffles; AdamW with weight decay, linear warmup and decay."""
    import torch

    epochs = epochs or cfg.max_epochs
    bottom.freeze(reader)
    bottom.fill([(q, t) for q, t, _ in train])
    model = reader.model
    params = [p for p in model.parameters() if p.requires_grad]
    steps_per_epoch = (len(train) + cfg.batch_size - 1) // cfg.batch_size
    total = steps_per_epoch * epochs
    warmup = max(1, int(cfg.warmup_share * total))
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (total - s) / max(1, total - warmup))))
    loss_fn = torch.nn.BCEWithLogitsLoss()
    rng = random.Random(cfg.seed)
    losses = []
    for epoch in range(1, epochs + 1):
        model.train()
        order = list(range(len(train)))
        rng.shuffle(order)
        seen = 0.0
        for start in range(0, len(order), cfg.batch_size):
            batch = [train[i] for i in order[start: start + cfg.batch_size]]
            y = torch.tensor([b[2] for b in batch], dtype=torch.float32)
            loss = loss_fn(bottom.logits(reader, [(b[0], b[1]) for b in batch]), y)
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


# ---- selection -----------------------------------------------------------------------------------


def _auroc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    from tiermem.stats import auroc

    return auroc(list(scores), list(labels)) if 0 < sum(labels) < len(labels) else None


def escalate(rows: Sequence[dict[str, Any]]) -> np.ndarray:
    return np.array([r["label"] == "ESCALATE" for r in rows], dtype=np.float64)


def loco_scores(rows: list[dict[str, Any]], x: np.ndarray, text_weight: float, l2: float,
                text_columns: bool) -> dict[str, float | None]:
    """conv -> AUROC of a head fitted on the other conversations' rows, scoring this one's."""
    y = escalate(rows)
    conv = np.array([r["conv_id"] for r in rows])
    out: dict[str, float | None] = {}
    for c in sorted(set(conv)):
        fit_on, held = conv != c, conv == c
        names = [*FEATURES, *[f"text{i}" for i in range(x.shape[1] - len(FEATURES))]]
        head = fit_logistic(x[fit_on], y[fit_on], l2, feature_names=names)
        if text_columns:
            score, _ = head_parts(head, x[held], text_weight)
        else:
            score = head.log_odds(x[held])
        out[str(c)] = _auroc(score.tolist(), (y[held] > 0.5).tolist())
    return out


def summary(per_conv: dict[str, float | None]) -> dict[str, Any]:
    vals = [v for v in per_conv.values() if v is not None]
    return {"mean": round(float(np.mean(vals)), 4) if vals else None,
            "min": round(min(vals), 4) if vals else None, "max": round(max(vals), 4) if vals else None,
            "std": round(float(np.std(vals)), 4) if vals else None,
            "per_conversation": {k: None if v is None else round(v, 4) for k, v in per_conv.items()}}


def cross_validate(cfg: UnitReaderConfig, records: list[dict[str, Any]], train_convs: set[str]
                   ) -> tuple[dict, dict, dict]:
    """(out-of-fold unit logits: epoch -> qid -> logits, the CV table, epoch -> the reader weights of the fold
    trained on exactly `train_convs`, if there is one). Records: the natural ones of cv_splits."""
    import copy

    convs = sorted({r["conv_id"] for r in records})
    if len(convs) < 2:
        raise DataError(f"cross-validation over conversations needs >= 2, got {convs}")
    oof: dict[int, dict[str, list[float]]] = {e: {} for e in range(1, cfg.max_epochs + 1)}
    folds, snapshots = {}, {}
    bottom = None
    for c in convs:
        started = time.perf_counter()
        held = [r for r in records if r["conv_id"] == c]
        rest = [r for r in records if r["conv_id"] != c]
        train = pairs(rest, cfg.target, cfg.deep_negatives)
        reader = fresh_reader(cfg)
        bottom = bottom or FrozenBottom(reader, cfg.trainable_layers)  # frozen weights: shared by every fold
        is_final = {r["conv_id"] for r in rest} == train_convs

        def after_epoch(epoch: int, reader: CrossEncoder = reader, held: list = held, is_final: bool = is_final):
            logits = unit_logits(reader, [r["question"] for r in held], [r["router_summaries"] for r in held])
            oof[epoch].update({r["qid"]: row for r, row in zip(held, logits, strict=True)})
            if is_final:
                snapshots[epoch] = copy.deepcopy(reader.model.state_dict())

        losses = train_epochs(reader, train, cfg, bottom, after_epoch)
        folds[c] = {"train_pairs": len(train), "held_questions": len(held), "loss_by_epoch": losses,
                    "wall_s": round(time.perf_counter() - started, 1)}
        log.warning("unit-reader CV fold %s: %d pairs, losses %s, %.0f s", c, len(train), losses,
                    folds[c]["wall_s"])
    labeled = [r for r in records if r["label"] in contract.ACTIONS]
    signals = feature_matrix([r["question"] for r in labeled], [r["router_summaries"] for r in labeled])
    table: dict[str, Any] = {"folds": folds, "signals_only": summary(loco_scores(labeled, signals, 0.0, cfg.l2,
                                                                                  False)), "grid": []}
    for epoch in range(1, cfg.max_epochs + 1):
        logits = [oof[epoch][r["qid"]] for r in labeled]
        for pooling in cfg.poolings:
            x = head_matrix([r["question"] for r in labeled], [r["router_summaries"] for r in labeled], logits,
                            pooling)
            text_alone = [-v for v in x[:, len(FEATURES)]]  # the pooled reader's first feature: high = answered
            for w in cfg.text_weights:
                table["grid"].append({"epochs": epoch, "pooling": pooling, "text_weight": w,
                                      **summary(loco_scores(labeled, x, w, cfg.l2, True)),
                                      "text_alone_auroc": _auroc(text_alone, (escalate(labeled) > 0.5).tolist())})
    return oof, table, snapshots


def choose(table: dict[str, Any]) -> dict[str, Any]:
    """Best mean LOCO AUROC; ties go to fewer epochs, then the smaller text weight, then the grid's order."""
    scored = [g for g in table["grid"] if g["mean"] is not None]
    if not scored:
        raise DataError("cross-validation: no fold had both labels; cannot choose")
    return max(scored, key=lambda g: (g["mean"], -g["epochs"], -g["text_weight"]))


# ---- the stage -----------------------------------------------------------------------------------


def train(cfg: UnitReaderConfig) -> dict[str, Any]:
    from tiermem.models import setup_cpu_threads
    from tiermem.rundir import claimed_output_dir

    with claimed_output_dir(cfg.output_dir, "unit-reader"):
        setup_cpu_threads()
        return _train(cfg)


def _train(cfg: UnitReaderConfig) -> dict[str, Any]:
    started = time.perf_counter()
    by_split = {s: natural_records(cfg.data, s) for s in dict.fromkeys([*cfg.cv_splits, *cfg.eval_splits])}
    cv_records = [r for s in cfg.cv_splits for r in by_split[s]]
    train_convs = {r["conv_id"] for r in by_split[cfg.train_split]}
    oof, table, snapshots = cross_validate(cfg, cv_records, train_convs)
    best = choose(table)
    final_rows = [r for r in by_split[cfg.train_split] if r["label"] in contract.ACTIONS]
    final_pairs = pairs(by_split[cfg.train_split], cfg.target, cfg.deep_negatives)
    reader = fresh_reader(cfg)
    if best["epochs"] in snapshots:
        # the fold that held out every other CV conversation trained on exactly the train split: its weights at
        # the chosen epoch are the model CV measured, so they are the final reader (no second training)
        reader.model.load_state_dict(snapshots[best["epochs"]])
        losses = table["folds"][next(c for c in table["folds"] if c not in train_convs)]["loss_by_epoch"]
    else:
        losses = train_epochs(reader, final_pairs, cfg, FrozenBottom(reader, cfg.trainable_layers),
                              epochs=best["epochs"])
    x = head_matrix([r["question"] for r in final_rows], [r["router_summaries"] for r in final_rows],
                    [oof[best["epochs"]][r["qid"]] for r in final_rows], best["pooling"])
    head = fit_logistic(x, escalate(final_rows), cfg.l2,
                        feature_names=[*FEATURES, *POOLINGS[best["pooling"]]])
    router = UnitReaderRouter(reader, head, best["pooling"], best["text_weight"])
    metrics: dict[str, Any] = {"cv": {k: v for k, v in table.items() if k != "grid"}, "chosen": best}
    for split in cfg.eval_splits:
        rows = [r for r in by_split[split] if r["label"] in contract.ACTIONS]
        if rows:
            scores = router.score([r["question"] for r in rows], [r["router_summaries"] for r in rows])
            metrics[split] = {"n": len(rows), "auroc": _auroc(scores, (escalate(rows) > 0.5).tolist())}
    data = {"dataset": cfg.data, "train_split": cfg.train_split, "cv_splits": cfg.cv_splits,
            "train_pairs": len(final_pairs), "train_records": len(final_rows),
            "router_input": {"top_k": max((len(r["router_summaries"]) for r in final_rows), default=0)}}
    extra = {"reader_base": cfg.base, "config": asdict(cfg), "final_loss_by_epoch": losses, "cv_grid": table["grid"],
             "wall_s": round(time.perf_counter() - started, 1)}
    router.save(cfg.output_dir, data=data, metrics=metrics, extra=extra)
    return {"output_dir": cfg.output_dir, "chosen": best, "signals_only_cv": table["signals_only"]["mean"],
            "metrics": {k: v for k, v in metrics.items() if k != "cv"}, "wall_s": extra["wall_s"]}


@stage_main("unit-reader")
def main(argv: list[str]) -> int:
    from tiermem.config import parse_cli

    cfg = parse_cli(UnitReaderConfig, argv, default_config="configs/unit_reader/default.yaml")
    print(json.dumps(train(cfg), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
