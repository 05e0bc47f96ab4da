"""What the unit reader trains on and from: each split's natural records, a fresh copy of the base reader, and
what the base's reading pre-training was."""

from __future__ import annotations

from typing import Any

from tiermem.models.cross_encoder import CrossEncoder
from tiermem.settings.errors import DataError


def natural_records(data: str, split: str) -> list[dict[str, Any]]:
    """The split's natural records, every field training reads checked first: a bad record stops the stage before
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


def load_splits(cfg: Any) -> dict[str, list[dict[str, Any]]]:
    """split -> its natural records for the cv_splits and eval_splits, each conversation in one split only."""
    by_split = {s: natural_records(cfg.data, s) for s in dict.fromkeys([*cfg.cv_splits, *cfg.eval_splits])}
    check_disjoint(cfg.data, by_split)
    return by_split


def question_key(r: dict[str, Any]) -> tuple[str, str]:
    return (str(r["conv_id"]), str(r["qid"]))  # a qid is unique only within its conversation


def fresh_reader(cfg: Any) -> CrossEncoder:
    import torch

    from tiermem.models.model_dir import load_reader

    torch.manual_seed(cfg.seed)  # the classification head's initialization
    # its own tokenizer, a config that fits its weights, readable files: else a named error
    return load_reader(cfg.base, "base=", batch_size=cfg.score_batch_size, head_optional=True)


def pretraining_of(base: str) -> dict[str, Any] | None:
    """What the base's reading pre-training was (its reader_pretrain.json, without local paths), if it had one."""
    from pathlib import Path

    from tiermem.models.cross_encoder import PRETRAIN_FILE
    from tiermem.models.floors import read_pretrain_meta

    path = Path(base) / PRETRAIN_FILE
    if not path.is_file():
        return None
    meta = read_pretrain_meta(base)  # the one reader of the file: a malformed one is named
    data = str(meta.get("data"))
    return {"base": meta.get("base"), "data": data if data.startswith("hf:") else Path(data).name,
            "data_sha256": meta.get("data_sha256"),
            "train_pairs": meta.get("train_pairs"), "heldout": meta.get("heldout"),
            "chat_data": [f"{c.partition(':')[0]}:{Path(c.partition(':')[2]).name}"
                          for c in (meta.get("config") or {}).get("chat_data") or []],
            "span_head": bool((meta.get("config") or {}).get("span_head")),
            "epochs": (meta.get("config") or {}).get("epochs"), "cache_key": meta.get("cache_key")}
