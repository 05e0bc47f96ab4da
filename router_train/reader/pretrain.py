"""`tiermem-router reader-pretrain`: teach the reader's base to read (an answerability cross-encoder on public
reading data, whole articles held out) before it meets a conversation; cached by its key (docs/DESIGN.md)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tiermem.models.cross_encoder import PRETRAIN_FILE
from tiermem.settings.config import AT_LEAST_ONE, check_declared
from tiermem.settings.errors import ConfigError, stage_main


@dataclass
class ReaderPretrainConfig:
    data: str = "../shared/data/squad2_dev_half.json"  # SQuAD 2.0 JSON file, or hf:<name> (e.g. hf:rajpurkar/squad_v2)
    # chat reading data, each in its published shape: molweni:<file> | friendsqa:<file> (reader/chat_reading.py)
    chat_data: list[str] = field(default_factory=list)
    span_head: bool = True  # train the extractive span head (start/end + no-answer) beside the classifier
    span_weight: float = field(default=1.0, metadata={"ge": 0})  # the span loss's weight beside the classifier's BCE
    # unanswerable questions: the units sharing most words with the question (a plausible answer's first); 0 = all
    unanswerable_units: int = field(default=0, metadata={"ge": 0})
    erased_negatives: bool = False  # each gold unit with its answer cut out, target no-answer (the attribute gone)
    # whole dialogues per chat source kept out of training (held-out AUROC per source)
    heldout_dialogues: int = field(default=10, metadata=AT_LEAST_ONE)
    hub_split: str = "validation"  # the split loaded for hf:<name>
    base: str = "packaged:all-minilm-l6-v2"  # the encoder fine-tuned (a model spec: packaged:, hub id, directory)
    output_dir: str = "runs/reader_pretrain"  # the checkpoint: unit-reader's `base`
    cache: bool = True  # reuse and store the checkpoint under $TIERMEM_CACHE/readers (keyed by data + settings)
    # answerable questions: the paragraph's sentences sharing most words, target 0
    negatives_per_question: int = field(default=3, metadata={"ge": 0})
    # whole articles kept out of training for the held-out answerability AUROC
    heldout_articles: int = field(default=2, metadata=AT_LEAST_ONE)
    # 0: every pair; N: a seeded sample of N (quick runs, tests)
    max_train_pairs: int = field(default=0, metadata={"ge": 0})
    # word pieces per (question, sentence) pair (the encoder has 512 positions); the reader serves at 128
    max_length: int = field(default=128, metadata={"ge": 16, "le": 512})
    epochs: int = field(default=1, metadata=AT_LEAST_ONE)
    learning_rate: float = field(default=1e-4, metadata={"gt": 0})
    weight_decay: float = field(default=0.01, metadata={"ge": 0})
    batch_size: int = field(default=32, metadata=AT_LEAST_ONE)  # pairs per step
    # share of steps with a linear learning-rate warmup
    warmup_share: float = field(default=0.1, metadata={"ge": 0, "lt": 1})
    # pairs per forward pass when scoring the held-out articles
    score_batch_size: int = field(default=64, metadata=AT_LEAST_ONE)
    log_every: int = field(default=50, metadata={"ge": 0})  # steps between progress lines (0: none)
    seed: int = 0

    def __post_init__(self) -> None:
        check_declared(self)
        if not self.data:
            raise ConfigError("data must name a SQuAD 2.0 JSON file or hf:<dataset name>")
        from router_train.reader.chat_reading import check_sources

        check_sources(self.chat_data)


def _train(cfg: ReaderPretrainConfig, questions: list, target: Path, meta: dict[str, Any]) -> None:
    """Fine-tune the base on the training articles' pairs and save the checkpoint with its metadata in `target`."""
    import random

    import torch

    from router_train.reader.checks import check_heldout
    from router_train.reader.finetune import fit_reader
    from router_train.reader.pretrain_heldout import heldout_metrics, split_sources
    from router_train.reader.reading_data import all_pairs
    from tiermem.models.floors import weights_sha256
    from tiermem.models.model_dir import load_reader
    from tiermem.runs import safe_io

    train_q, held_q, held_titles = split_sources(cfg, questions)
    check_heldout([q for q in held_q if q.source == "squad"], held_titles["squad"], cfg.data)  # before training
    pairs = all_pairs(train_q, cfg.negatives_per_question, cfg.unanswerable_units, cfg.erased_negatives)
    if cfg.max_train_pairs and len(pairs) > cfg.max_train_pairs:
        pairs = random.Random(cfg.seed).sample(pairs, cfg.max_train_pairs)
    by_source = {s: sum(q.source == s for q in train_q) for s in sorted({q.source for q in train_q})}
    print(f"reader-pretrain: {len(pairs)} pairs ({sum(p[2] > 0.5 for p in pairs)} positive) from "
          f"{len(train_q)} questions {by_source}; held out: {len(held_q)} questions of {held_titles}",
          file=sys.stderr, flush=True)
    torch.manual_seed(cfg.seed)  # the classification and span heads' initialization
    reader = load_reader(cfg.base, "base=", batch_size=cfg.score_batch_size, head_optional=True,
                         span_head=cfg.span_head)
    if not cfg.span_head:
        reader.span_head = None  # a classifier-only reader, even from a base that has a span head
    started = time.perf_counter()
    losses = fit_reader(reader, pairs, epochs=cfg.epochs, learning_rate=cfg.learning_rate,
                        weight_decay=cfg.weight_decay, batch_size=cfg.batch_size, warmup_share=cfg.warmup_share,
                        seed=cfg.seed, max_length=cfg.max_length, log_every=cfg.log_every, label="reader-pretrain",
                        span_weight=cfg.span_weight)
    train_s = time.perf_counter() - started
    heldout = heldout_metrics(reader, held_q)
    meta.update({"train_pairs": len(pairs), "train_positive": int(sum(p[2] > 0.5 for p in pairs)),
                 "train_questions": len(train_q), "train_questions_by_source": by_source,
                 "heldout_articles": held_titles.get("squad", []), "heldout_by_source": held_titles,
                 "loss_by_epoch": losses, "heldout": heldout, "train_seconds": round(train_s, 1),
                 "seconds": round(time.perf_counter() - started, 1)})
    reader.save(target)
    if "answer_floor" in heldout:
        heldout["answer_floor"]["reader_weights_sha256"] = weights_sha256(target)  # the floor bound to these weights
    safe_io.write_atomic(target / PRETRAIN_FILE, json.dumps(meta, indent=2))


def _copy_into(src: Path, out: Path) -> None:
    """Every file of the checkpoint into the claimed output directory, never through a link planted there."""
    from tiermem.runs.safe_io import write_atomic

    for path in sorted(src.iterdir()):
        if path.is_file() and not path.name.startswith("."):
            write_atomic(out / path.name, path.read_bytes())


def pretrain(cfg: ReaderPretrainConfig) -> dict[str, Any]:
    from router_train.reader import pretrain_cache
    from router_train.reader.chat_reading import load_chat_sources
    from router_train.reader.checks import check_reading_questions
    from router_train.reader.reading_data import load_reading_data
    from tiermem.models.cache import copy_verified
    from tiermem.models.floors import read_pretrain_meta
    from tiermem.models.model_dir import check_model_dir, refuse_output_over_input
    from tiermem.models.specs import cache_root, setup_cpu_threads
    from tiermem.runs.rundir import check_output_dir, claim_cache_dir, claimed_output_dir

    refuse_output_over_input(cfg.output_dir, "reader-pretrain", {"base": cfg.base, "data": cfg.data},
                             cache_root() / "readers")
    check_output_dir(cfg.output_dir, "reader-pretrain")  # first: nothing is read for an output it may not write
    base = check_model_dir(cfg.base, "base=", head_optional=True)  # its files, tokenizer and config, before the claim
    with claimed_output_dir(cfg.output_dir, "reader-pretrain") as out:
        questions, data_sha = load_reading_data(cfg.data, cfg.hub_split)
        check_reading_questions(questions, cfg.data)
        chat, chat_shas = load_chat_sources(cfg.chat_data)  # each checked as SQuAD's are, before any training
        questions, shas = questions + chat, [data_sha, *chat_shas]
        if len(shas) > 1:  # every source's bytes in the key
            data_sha = hashlib.sha256("\n".join(shas).encode()).hexdigest()
        key = pretrain_cache.cache_key(cfg, data_sha, pretrain_cache.weights_digest(base))
        cache_dir = claim_cache_dir(cache_root() / "readers", "reader-pretrain") if cfg.cache else None
        entry = cache_dir / key if cache_dir else None
        hit = pretrain_cache.lookup(entry)  # verified: every file's digest, no links, the floor bound to the weights
        if hit:
            print(f"reader-pretrain: cache hit {entry} (data sha256 {data_sha[:12]}, same base and settings, "
                  "verified): no training", file=sys.stderr, flush=True)
        else:
            setup_cpu_threads()
            meta = {"stage": "reader-pretrain", "cache_key": key, "data": cfg.data, "data_sha256": data_sha,
                    "base": cfg.base, "config": asdict(cfg)}
            parent = cache_dir if cache_dir is not None else out
            tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=parent))
            try:
                _train(cfg, questions, tmp, meta)
                if entry is not None:
                    pretrain_cache.store(tmp, entry)  # sealed, then atomic; a race lost takes the winner's entry
                else:
                    _copy_into(tmp, out)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        if entry is not None:
            copy_verified(entry, out)  # each file checked against its digest as it is copied
    meta = read_pretrain_meta(cfg.output_dir, need=pretrain_cache.NEEDED)
    return {"output_dir": cfg.output_dir, "cache_hit": hit,
            "cache_key": key, "heldout": meta["heldout"], "train_pairs": meta["train_pairs"],
            "seconds": meta["seconds"]}


@stage_main("reader-pretrain")
def main(argv: list[str]) -> int:
    from tiermem.runs.logs import print_result
    from tiermem.settings.config import parse_cli

    return print_result(pretrain(parse_cli(ReaderPretrainConfig, argv,
                                           default_config="configs/reader_pretrain/default.yaml")))


if __name__ == "__main__":
    raise SystemExit(main())
