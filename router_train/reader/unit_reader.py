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
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from router_train.reader.finetune import FrozenBottom, train_epochs
from router_train.reader.targets import (
    HEAD_TARGETS,
    TARGET_SOURCES,
    head_targets,
    pairs,
    parse_targets,
    targets_name,
)
from serving.routers.unit_reader import (
    POOLINGS,
    TEXT_SCORES,
    ZERO_SHOT_HEAD_FILE,
    CrossEncoder,
    UnitReaderRouter,
    head_matrix,
    head_parts,
    text_features,
    unit_logits,
)
from serving.signals import FEATURES, LogisticModel, feature_matrix, fit_logistic
from tiermem import contract
from tiermem.settings.errors import ConfigError, DataError, stage_main

log = logging.getLogger(__name__)


@dataclass
class UnitReaderConfig:
    data: str = "runs/label/dataset"  # label DatasetDict with unit_targets (labeling: unit_targets.enabled)
    output_dir: str = "runs/reader"
    # the reader's starting point: the reader-pretrain checkpoint (an answerability cross-encoder), or any encoder
    # (a model spec: packaged:, hub id, directory)
    base: str = "runs/reader_pretrain"
    target: str = "recall"  # recall: the unit's answer recall (soft BCE) | s_ok: its one-unit evidence verdict
    # candidates CV chooses among (router_train/reader/targets.py): lexical (the target above), judged (a careful
    # reading's unit verdict where the label run read judgments, the lexical target elsewhere), both (their mean)
    target_sources: list[str] = field(default_factory=lambda: ["lexical"])
    # candidates: false | true = judged units also train the span head towards their quoted span (or no answer)
    span_targets: list[bool] = field(default_factory=lambda: [False])
    # candidates: label = the head is fitted on the labels | teacher = on the recorded teacher decisions' confidence
    # (a label run with judgments; the label where a row has none). CV scores both against the labels
    head_targets: list[str] = field(default_factory=lambda: ["label"])
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
    # which reader scores the head reads, CV choosing: classifier logit, span margin (best span - no answer), both;
    # the span ones only for a base with a span head (reader-pretrain span_head: true)
    text_scores: list[str] = field(default_factory=lambda: list(TEXT_SCORES))
    l2: float = 1.0  # the head's L2 penalty (standardized features)
    cv_splits: list[str] = field(default_factory=lambda: ["train", "validation"])  # LOCO over their conversations
    train_split: str = "train"  # the final reader and head
    eval_splits: list[str] = field(default_factory=lambda: ["validation"])  # metrics through the serving scorer
    score_batch_size: int = 64  # pairs per forward pass when scoring
    # candidates CV chooses among: 0 = the base as it is (zero-shot), k = its top k encoder layers fine-tuned on the
    # conversations (6 = every layer of MiniLM; the layers below are frozen and their output cached once)
    finetune_layers: list[int] = field(default_factory=lambda: [0, 2])
    seed: int = 0

    def __post_init__(self) -> None:
        if self.target not in ("recall", "s_ok"):
            raise ConfigError(f"target must be recall or s_ok, got {self.target!r}")
        bad = [t for t in self.target_sources if t not in TARGET_SOURCES]
        if bad or not self.target_sources or len(set(self.target_sources)) != len(self.target_sources):
            raise ConfigError(f"target_sources must be distinct names from {TARGET_SOURCES}, got {self.target_sources}")
        if (not self.span_targets or len(set(self.span_targets)) != len(self.span_targets)
                or any(not isinstance(v, bool) for v in self.span_targets)):
            raise ConfigError(f"span_targets must be distinct true/false values, got {self.span_targets}")
        bad = [t for t in self.head_targets if t not in HEAD_TARGETS]
        if bad or not self.head_targets or len(set(self.head_targets)) != len(self.head_targets):
            raise ConfigError(f"head_targets must be distinct names from {HEAD_TARGETS}, got {self.head_targets}")
        bad = [p for p in self.poolings if p not in POOLINGS]
        if bad or not self.poolings:
            raise ConfigError(f"poolings must be names from {sorted(POOLINGS)}, got {self.poolings}")
        bad = [t for t in self.text_scores if t not in TEXT_SCORES]
        if bad or not self.text_scores:
            raise ConfigError(f"text_scores must be names from {sorted(TEXT_SCORES)}, got {self.text_scores}")
        if not self.text_weights or any(w < 0 for w in self.text_weights):
            raise ConfigError(f"text_weights must be numbers >= 0, got {self.text_weights}")
        for name in ("deep_negatives", "max_epochs", "batch_size", "score_batch_size"):
            if getattr(self, name) < (0 if name == "deep_negatives" else 1):
                raise ConfigError(f"{name} must be >= {0 if name == 'deep_negatives' else 1}")
        if not self.finetune_layers or any(isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 24
                                           for k in self.finetune_layers):
            raise ConfigError(f"finetune_layers must be a non-empty list of 0 (zero-shot) .. the encoder's layers, "
                              f"got {self.finetune_layers}")
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


def check_disjoint(data: str, by_split: dict[str, list[dict[str, Any]]]) -> None:
    """Each conversation in one split only: a records file without `split` is every split at once, and training
    and validating on the same rows would report a validation score that means nothing."""
    seen: dict[str, str] = {}
    for split, rows in by_split.items():
        for r in rows:
            conv = str(r["conv_id"])
            if seen.setdefault(conv, split) != split:
                raise DataError(f"{data}: conversation {conv!r} is in split {seen[conv]!r} and in {split!r} (records "
                                "without a `split` field are every split at once); label with a split by "
                                "conversation (labeling: split) so validation is held out")


# ---- fine-tuning ---------------------------------------------------------------------------------


def fresh_reader(cfg: UnitReaderConfig) -> CrossEncoder:
    import torch

    from tiermem.models.model_dir import load_reader

    torch.manual_seed(cfg.seed)  # the classification head's initialization
    # its own tokenizer, a config that fits its weights, readable files (issue 41): else a named error
    return load_reader(cfg.base, "base=", batch_size=cfg.score_batch_size, head_optional=True)


# ---- selection -----------------------------------------------------------------------------------


def _auroc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    from tiermem.stats import auroc

    return auroc(list(scores), list(labels)) if 0 < sum(labels) < len(labels) else None


def escalate(rows: Sequence[dict[str, Any]]) -> np.ndarray:
    return np.array([r["label"] == "ESCALATE" for r in rows], dtype=np.float64)


def loco_scores(rows: list[dict[str, Any]], x: np.ndarray, text_weight: float, l2: float,
                text_columns: bool, fit_y: np.ndarray | None = None) -> dict[str, float | None]:
    """conv -> AUROC (against the labels) of a head fitted on the other conversations' rows (towards `fit_y`,
    default the labels), scoring this one's."""
    y = escalate(rows)
    fit_y = y if fit_y is None else fit_y
    conv = np.array([r["conv_id"] for r in rows])
    out: dict[str, float | None] = {}
    for c in sorted(set(conv)):
        fit_on, held = conv != c, conv == c
        names = [*FEATURES, *[f"text{i}" for i in range(x.shape[1] - len(FEATURES))]]
        head = fit_logistic(x[fit_on], fit_y[fit_on], l2, feature_names=names)
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


def pretraining_of(base: str) -> dict[str, Any] | None:
    """What the base's reading pre-training was (its reader_pretrain.json, without local paths), if it had one."""
    from pathlib import Path

    from tiermem.models.cross_encoder import PRETRAIN_FILE
    from tiermem.models.floors import read_pretrain_meta

    path = Path(base) / PRETRAIN_FILE
    if not path.is_file():
        return None
    meta = read_pretrain_meta(base)  # the one reader of the file: a malformed one is named (issue 41)
    data = str(meta.get("data"))
    return {"base": meta.get("base"), "data": data if data.startswith("hf:") else Path(data).name,
            "data_sha256": meta.get("data_sha256"),
            "train_pairs": meta.get("train_pairs"), "heldout": meta.get("heldout"),
            "chat_data": [f"{c.partition(':')[0]}:{Path(c.partition(':')[2]).name}"
                          for c in (meta.get("config") or {}).get("chat_data") or []],
            "span_head": bool((meta.get("config") or {}).get("span_head")),
            "epochs": (meta.get("config") or {}).get("epochs"), "cache_key": meta.get("cache_key")}


def _key(r: dict[str, Any]) -> tuple[str, str]:
    return (str(r["conv_id"]), str(r["qid"]))  # a qid is unique only within its conversation


def target_settings(cfg: UnitReaderConfig) -> list[str]:
    """The target settings CV compares (reader_targets.targets_name), lexical first."""
    return [targets_name(source, spans) for source in cfg.target_sources for spans in cfg.span_targets]


def cross_validate(cfg: UnitReaderConfig, records: list[dict[str, Any]], train_convs: set[str]
                   ) -> tuple[dict, dict, dict]:
    """(out-of-fold unit logits: (layers, epochs, targets) -> (conv, qid) -> logits, the CV table, (layers, epochs,
    targets) -> the reader weights of the fold trained on exactly `train_convs`, if there is one). Records: the
    natural ones of cv_splits. Layers 0 is the base as it is (zero-shot: the same logits in every fold, nothing
    fitted on them; its targets "none")."""
    import copy

    convs = sorted({str(r["conv_id"]) for r in records})
    if len(convs) < 2:
        raise DataError(f"cross-validation over conversations needs >= 2, got {convs}")
    oof: dict[tuple[int, int, str], dict[tuple[str, str], list[float]]] = {}
    folds: dict[str, Any] = {}
    snapshots: dict[tuple[int, int, str], Any] = {}
    for layers in cfg.finetune_layers:
        if layers == 0:
            started = time.perf_counter()
            logits = unit_logits(fresh_reader(cfg), [r["question"] for r in records],
                                 [r["router_summaries"] for r in records])
            oof[(0, 0, "none")] = {_key(r): row for r, row in zip(records, logits, strict=True)}
            folds["zero-shot"] = {"scored_questions": len(records), "wall_s": round(time.perf_counter() - started, 1)}
            log.warning("unit-reader CV zero-shot: %d questions scored, %.0f s", len(records),
                        folds["zero-shot"]["wall_s"])
            continue
        bottom = None
        for targets in target_settings(cfg):
            source, spans = parse_targets(targets)
            for e in range(1, cfg.max_epochs + 1):
                oof[(layers, e, targets)] = {}
            for c in convs:
                started = time.perf_counter()
                held = [r for r in records if str(r["conv_id"]) == c]
                rest = [r for r in records if str(r["conv_id"]) != c]
                train = pairs(rest, cfg.target, cfg.deep_negatives, source, spans)
                reader = fresh_reader(cfg)
                bottom = bottom or FrozenBottom(reader, layers)  # frozen weights: shared by every fold
                is_final = {str(r["conv_id"]) for r in rest} == train_convs

                def after_epoch(epoch: int, reader: CrossEncoder = reader, held: list = held,
                                is_final: bool = is_final, key: tuple[int, str] = (layers, targets)):
                    logits = unit_logits(reader, [r["question"] for r in held], [r["router_summaries"] for r in held])
                    oof[(key[0], epoch, key[1])].update({_key(r): row for r, row in zip(held, logits, strict=True)})
                    if is_final:
                        snapshots[(key[0], epoch, key[1])] = copy.deepcopy(
                            (reader.model.state_dict(), reader.span_head.state_dict() if reader.has_spans else None))

                losses = train_epochs(reader, train, cfg, bottom, after_epoch)
                name = f"{layers} layer(s), {targets}, held out {c}"
                folds[name] = {"train_pairs": len(train), "held_questions": len(held), "loss_by_epoch": losses,
                               "wall_s": round(time.perf_counter() - started, 1)}
                log.warning("unit-reader CV %s: %d pairs, losses %s, %.0f s", name, len(train), losses,
                            folds[name]["wall_s"])
    labeled = [r for r in records if r["label"] in contract.ACTIONS]
    signals = feature_matrix([r["question"] for r in labeled], [r["router_summaries"] for r in labeled])
    table: dict[str, Any] = {"folds": folds, "signals_only": summary(loco_scores(labeled, signals, 0.0, cfg.l2,
                                                                                  False)), "grid": []}
    spans_read = any(len(u) > 1 for row in next(iter(oof.values())).values() for u in row)
    scores = [t for t in cfg.text_scores if spans_read or 1 not in TEXT_SCORES[t]]
    if not scores:
        raise DataError(f"text_scores {cfg.text_scores} all read the span margin, and the base {cfg.base!r} has no "
                        "span head")
    fit_targets = {t: np.array(head_targets(labeled, t)) for t in cfg.head_targets}
    for (layers, epoch, targets), by_key in oof.items():
        logits = [by_key[_key(r)] for r in labeled]
        for text_scores in scores:
            for pooling in cfg.poolings:
                x = head_matrix([r["question"] for r in labeled], [r["router_summaries"] for r in labeled], logits,
                                pooling, text_scores)
                text_alone = [-v for v in x[:, len(FEATURES)]]  # the first text feature (a max): high = answered
                for head_target, fit_y in fit_targets.items():
                    for w in cfg.text_weights:
                        table["grid"].append({
                            "finetune_layers": layers, "epochs": epoch, "targets": targets, "head_target": head_target,
                            "text_scores": text_scores, "pooling": pooling, "text_weight": w,
                            **summary(loco_scores(labeled, x, w, cfg.l2, True, fit_y)),
                            "text_alone_auroc": _auroc(text_alone, (escalate(labeled) > 0.5).tolist())})
    return oof, table, snapshots


def point_key(g: dict[str, Any]) -> tuple[int, int, str]:
    """A grid point's reader: (layers fine-tuned, epochs, target setting); older grids had lexical targets only."""
    return (g["finetune_layers"], g["epochs"], g.get("targets", "none" if g["finetune_layers"] == 0 else "lexical"))


def choose(table: dict[str, Any]) -> dict[str, Any]:
    """Best mean LOCO AUROC; ties go to fewer layers fine-tuned, fewer epochs, the smaller text weight, then the
    grid's order."""
    scored = [g for g in table["grid"] if g["mean"] is not None]
    if not scored:
        raise DataError("cross-validation: no fold had both labels; cannot choose")
    return max(scored, key=lambda g: (g["mean"], -g["finetune_layers"], -g["epochs"], -g["text_weight"]))


def candidates(table: dict[str, Any]) -> list[dict[str, Any]]:
    """The best grid point of each (layers, epochs, targets, text scores): what each fine-tuning step, target
    setting and each of the reader's scores adds, zero-shot first."""
    best: dict[tuple[int, int, str, str, str], dict[str, Any]] = {}
    for g in table["grid"]:
        k = (*point_key(g), g.get("text_scores", "classifier"), g.get("head_target", "label"))
        if g["mean"] is not None and (k not in best or g["mean"] > best[k]["mean"]):
            best[k] = g
    return [{k: v for k, v in best[key].items() if k != "per_conversation"} for key in sorted(best)]


def out_of_fold_scores(cfg: UnitReaderConfig, records: list[dict[str, Any]], oof: dict,
                       best: dict[str, Any]) -> dict[str, Any]:
    """The chosen settings' out-of-fold router scores over every CV record (each conversation scored by a head
    fitted on the other conversations' labeled records, from their out-of-fold unit logits), written for calibrate
    (router_train/reader/oof_scores.py); returns what the run's metadata keeps of them."""
    from router_train.reader.oof_scores import loco, write_oof_scores

    logits = [oof[point_key(best)][_key(r)] for r in records]
    x = head_matrix([r["question"] for r in records], [r["router_summaries"] for r in records], logits,
                    best["pooling"], best["text_scores"])
    y = np.array(head_targets(records, best.get("head_target", "label")))  # loco fits on labeled rows only
    names = [*FEATURES, *text_features(best["pooling"], best["text_scores"])]

    def score_held(fit: np.ndarray, held: np.ndarray) -> np.ndarray:
        head = fit_logistic(x[fit], y[fit], cfg.l2, feature_names=names)
        return head_parts(head, x[held], best["text_weight"])[0]

    settings = {k: best[k] for k in ("finetune_layers", "epochs", "targets", "head_target", "text_scores", "pooling",
                                     "text_weight")}
    return write_oof_scores(cfg.output_dir, records, loco(records, score_held), {
        "dataset": cfg.data, "splits": list(cfg.cv_splits), "settings": settings,
        "method": "leave-one-conversation-out: out-of-fold unit logits, head fitted on the other conversations"})


# ---- the stage -----------------------------------------------------------------------------------


def train(cfg: UnitReaderConfig) -> dict[str, Any]:
    from tiermem.models.model_dir import refuse_output_over_input
    from tiermem.models.specs import cache_root, setup_cpu_threads
    from tiermem.runs.rundir import check_output_dir, claimed_output_dir

    refuse_output_over_input(cfg.output_dir, "unit-reader", {"base": cfg.base, "data": cfg.data},
                             cache_root() / "readers")
    check_output_dir(cfg.output_dir, "unit-reader")  # first: nothing is read for an output it may not write
    with claimed_output_dir(cfg.output_dir, "unit-reader"):
        setup_cpu_threads()
        return _train(cfg)


def _train(cfg: UnitReaderConfig) -> dict[str, Any]:
    started = time.perf_counter()
    by_split = {s: natural_records(cfg.data, s) for s in dict.fromkeys([*cfg.cv_splits, *cfg.eval_splits])}
    check_disjoint(cfg.data, by_split)
    cv_records = [r for s in cfg.cv_splits for r in by_split[s]]
    train_convs = {r["conv_id"] for r in by_split[cfg.train_split]}
    oof, table, snapshots = cross_validate(cfg, cv_records, train_convs)
    best = choose(table)
    final_rows = [r for r in by_split[cfg.train_split] if r["label"] in contract.ACTIONS]
    chosen = point_key(best)
    source, spans = parse_targets(chosen[2]) if chosen[0] > 0 else ("lexical", False)
    final_pairs = pairs(by_split[cfg.train_split], cfg.target, cfg.deep_negatives, source, spans)
    reader = fresh_reader(cfg)
    losses: list[float] = []
    if chosen in snapshots:
        # the fold that held out every other CV conversation trained on exactly the train split: its weights at
        # the chosen epoch are the model CV measured, so they are the final reader (no second training)
        model_state, span_state = snapshots[chosen]
        reader.model.load_state_dict(model_state)
        if span_state is not None:
            reader.span_head.load_state_dict(span_state)
        held_out = next(c for c in table["folds"] if c.startswith(f"{chosen[0]} layer(s), {chosen[2]},")
                        and c.rsplit(" ", 1)[-1] not in train_convs)
        losses = table["folds"][held_out]["loss_by_epoch"]
    elif chosen[0] > 0:
        losses = train_epochs(reader, final_pairs, cfg, FrozenBottom(reader, chosen[0]), epochs=chosen[1])

    def fitted_head(point: dict[str, Any]) -> LogisticModel:
        x = head_matrix([r["question"] for r in final_rows], [r["router_summaries"] for r in final_rows],
                        [oof[point_key(point)][_key(r)] for r in final_rows],
                        point["pooling"], point["text_scores"])
        return fit_logistic(x, np.array(head_targets(final_rows, point.get("head_target", "label"))), cfg.l2,
                            feature_names=[*FEATURES, *text_features(point["pooling"], point["text_scores"])])

    head = fitted_head(best)
    router = UnitReaderRouter(reader, head, best["pooling"], best["text_weight"], text_scores=best["text_scores"])
    metrics: dict[str, Any] = {"cv": {k: v for k, v in table.items() if k != "grid"}, "chosen": best,
                               "cv_by_finetuning": candidates(table)}
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
    pretrained = pretraining_of(cfg.base)
    if pretrained:
        extra["reader_pretrain"] = pretrained
    zero_shot = [g for g in table["grid"] if g["finetune_layers"] == 0 and g["mean"] is not None]
    if zero_shot and chosen != (0, 0, "none"):
        # the base reader's own best head, kept beside the chosen one so eval shows what fine-tuning adds
        point = choose({"grid": zero_shot})
        extra["zero_shot"] = {"head": ZERO_SHOT_HEAD_FILE, "pooling": point["pooling"],
                              "text_weight": point["text_weight"], "text_scores": point["text_scores"],
                              "cv_mean": point["mean"]}
        extra["zero_shot_head"] = fitted_head(point)
    extra["oof_scores"] = out_of_fold_scores(cfg, cv_records, oof, best)  # what calibrate picks the threshold on
    router.save(cfg.output_dir, data=data, metrics=metrics, extra=extra)
    return {"output_dir": cfg.output_dir, "chosen": best, "signals_only_cv": table["signals_only"]["mean"],
            "metrics": {k: v for k, v in metrics.items() if k != "cv"}, "wall_s": extra["wall_s"]}


@stage_main("unit-reader")
def main(argv: list[str]) -> int:
    from tiermem.settings.config import parse_cli

    cfg = parse_cli(UnitReaderConfig, argv, default_config="configs/unit_reader/default.yaml")
    print(json.dumps(train(cfg), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
