"""`tiermem-router unit-reader`: train the unit reader router (serving/routers/unit_reader.py; docs/DESIGN.md, "The
unit reader"): CV over conversations, the final reader and head, metrics through the serving scorer."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from serving.routers.unit_reader import POOLINGS, TEXT_SCORES, UnitReaderRouter
from tiermem import contract
from tiermem.settings.config import AT_LEAST_ONE, check_declared
from tiermem.settings.errors import ConfigError, stage_main

from .unit_cv import auroc_or_none, candidates, choose, cross_validate, escalate, point_key
from .unit_fit import final_head, final_reader, out_of_fold_scores, zero_shot_head
from .unit_inputs import load_splits, pretraining_of


@dataclass
class UnitReaderConfig:
    # label DatasetDict with unit_targets (labeling: unit_targets.enabled); several: [a, b], pooled
    data: str | list[str] = "runs/label/dataset"
    output_dir: str = "runs/reader"
    # the reader's starting point: the reader-pretrain checkpoint (an answerability cross-encoder), or any encoder
    # (a model spec: packaged:, hub id, directory)
    base: str = "runs/reader_pretrain"
    # deeper units (rank > top_k, train split) per question kept as negatives, highest-ranked first; every deeper
    # positive is kept
    deep_negatives: int = field(default=3, metadata={"ge": 0})
    # deeper positives (rank > top_k, train split) per question kept, highest target first; null: every one (a long
    # history's restated facts give ~14 a question, most partial)
    deep_positives: int | None = field(default=None, metadata={"ge": 0})
    # epochs per fold; CV picks the number of epochs in 1..max_epochs
    max_epochs: int = field(default=2, metadata=AT_LEAST_ONE)
    learning_rate: float = field(default=1e-4, metadata={"gt": 0})
    weight_decay: float = field(default=0.01, metadata={"ge": 0})
    batch_size: int = field(default=32, metadata=AT_LEAST_ONE)  # pairs per step
    # share of steps with a linear learning-rate warmup
    warmup_share: float = field(default=0.1, metadata={"ge": 0, "lt": 1})
    poolings: list[str] = field(default_factory=lambda: list(POOLINGS))  # candidates CV chooses among
    text_weights: list[float] = field(default_factory=lambda: [0.0, 0.5, 1.0, 1.5])  # the text part's weight grid
    # which reader scores the head reads, CV choosing: classifier logit, span margin (best span - no answer), both;
    # the span ones only for a base with a span head (reader-pretrain span_head: true)
    text_scores: list[str] = field(default_factory=lambda: list(TEXT_SCORES))
    l2: float = field(default=1.0, metadata={"ge": 0})  # the head's L2 penalty (standardized features)
    cv_splits: list[str] = field(default_factory=lambda: ["train", "validation"])  # CV over their conversations
    # the reader's CV folds: 0 = one per conversation; k = the validation conversations as one fold (its reader is
    # the final one: no refit) and the train conversations dealt into k - 1, each domain spread over them
    cv_folds: int = field(default=0, metadata={"ge": 0})
    train_split: str = "train"  # the final reader and head
    eval_splits: list[str] = field(default_factory=lambda: ["validation"])  # metrics through the serving scorer
    score_batch_size: int = field(default=64, metadata=AT_LEAST_ONE)  # pairs per forward pass when scoring
    # candidates CV chooses among: 0 = the base as it is (zero-shot), k = its top k encoder layers fine-tuned on the
    # conversations (6 = every layer of MiniLM; the layers below are frozen and their output cached once)
    finetune_layers: list[int] = field(default_factory=lambda: [0, 2])
    seed: int = 0

    def __post_init__(self) -> None:
        from labeling.dataset import data_paths

        data_paths(self.data)
        check_declared(self)
        for name, names in (("poolings", POOLINGS), ("text_scores", TEXT_SCORES)):
            if not getattr(self, name) or any(x not in names for x in getattr(self, name)):
                raise ConfigError(f"{name} must be names from {sorted(names)}, got {getattr(self, name)}")
        if not self.text_weights or any(w < 0 for w in self.text_weights):
            raise ConfigError(f"text_weights must be numbers >= 0, got {self.text_weights}")
        if self.cv_folds == 1:
            raise ConfigError("cv_folds must be 0 (one fold per conversation) or >= 2")
        if not self.finetune_layers or any(isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 24
                                           for k in self.finetune_layers):
            raise ConfigError(f"finetune_layers must be a non-empty list of 0 (zero-shot) .. the encoder's layers, "
                              f"got {self.finetune_layers}")
        if self.train_split not in self.cv_splits:
            raise ConfigError(f"train_split {self.train_split!r} must be one of cv_splits {self.cv_splits}")


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
    by_split = load_splits(cfg)
    cv_records = [r for s in cfg.cv_splits for r in by_split[s]]
    train_convs = {r["conv_id"] for r in by_split[cfg.train_split]}
    oof, table, snapshots = cross_validate(cfg, cv_records, train_convs)
    best = choose(table)
    final_rows = [r for r in by_split[cfg.train_split] if r["label"] in contract.ACTIONS]
    chosen = point_key(best)
    reader, losses, train_pairs = final_reader(cfg, by_split[cfg.train_split], chosen, snapshots, table, train_convs)
    router = UnitReaderRouter(reader, final_head(cfg, final_rows, oof, best), best["pooling"], best["text_weight"],
                              text_scores=best["text_scores"])
    metrics: dict[str, Any] = {"cv": {k: v for k, v in table.items() if k != "grid"}, "chosen": best,
                               "cv_by_finetuning": candidates(table)}
    for split in cfg.eval_splits:  # through the serving scorer
        rows = [r for r in by_split[split] if r["label"] in contract.ACTIONS]
        if rows:
            scores = router.score([r["question"] for r in rows], [r["router_summaries"] for r in rows])
            metrics[split] = {"n": len(rows), "auroc": auroc_or_none(scores, (escalate(rows) > 0.5).tolist())}
    data = {"dataset": cfg.data, "train_split": cfg.train_split, "cv_splits": cfg.cv_splits,
            "train_pairs": train_pairs, "train_records": len(final_rows),
            "router_input": {"top_k": max((len(r["router_summaries"]) for r in final_rows), default=0)}}
    extra = {"reader_base": cfg.base, "config": asdict(cfg), "final_loss_by_epoch": losses, "cv_grid": table["grid"],
             "wall_s": round(time.perf_counter() - started, 1)}
    pretrained = pretraining_of(cfg.base)
    if pretrained:
        extra["reader_pretrain"] = pretrained
    if chosen != (0, 0, "none"):  # the base reader's own best head beside the chosen one: what fine-tuning adds
        extra.update(zero_shot_head(cfg, table, final_rows, oof))
    extra["oof_scores"] = out_of_fold_scores(cfg, cv_records, oof, best)  # what calibrate picks the threshold on
    router.save(cfg.output_dir, data=data, metrics=metrics, extra=extra)
    return {"output_dir": cfg.output_dir, "chosen": best, "signals_only_cv": table["signals_only"]["mean"],
            "metrics": {k: v for k, v in metrics.items() if k != "cv"}, "wall_s": extra["wall_s"]}


@stage_main("unit-reader")
def main(argv: list[str]) -> int:
    from tiermem.runs.logs import print_result
    from tiermem.settings.config import parse_cli

    return print_result(train(parse_cli(UnitReaderConfig, argv, default_config="configs/unit_reader/default.yaml")))


if __name__ == "__main__":
    raise SystemExit(main())
