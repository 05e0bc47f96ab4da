"""Label dataset -> prompt/completion rows for SFT and GRPO, rendered through tiermem.contract, and the label rows both
recipes load; class balancing happens inside the train split only."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from datasets import Dataset, DatasetDict

from labeling.dataset import DOMAIN_FIELD, RecordError, action_label, amount, domain_of, flag, summary_units, text
from router_train.lm.recipe_config import RecipeConfig
from serving.signals import feature_matrix
from tiermem import contract

log = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("qid", "conv_id", "question", "router_summaries", "label", "sft_target")
REWARD_COLUMNS = ("s_ok", "r_ok", "cost_research_input_tokens")
BALANCE_MODES = ("none", "oversample")


def _check_row(row: dict[str, Any], where: str, need_rewards: bool) -> None:
    label = action_label(row, where, allow_none=False)
    target = text(row, "sft_target", where)
    parsed = contract.parse(target)
    if not parsed.valid_json or parsed.action != label:
        raise RecordError(f"{where}: field 'sft_target' {target!r} is not the contract JSON for label {label!r} "
                          "(labeling must build it with tiermem.contract.render_target)")
    text(row, "question", where)
    summary_units(row, where)
    if need_rewards:
        amount(row, "cost_research_input_tokens", where)
        for name in ("s_ok", "r_ok"):
            flag(row, name, where, allow_none=True)


def build_rows(
    data: DatasetDict,
    split: str,
    tokenizer: Any,
    *,
    source: str = "label dataset",
    with_rewards: bool = False,
    with_signals: bool = False,
    with_teacher: bool = False,
    limit: int | None = None,
) -> Dataset:
    """Rows with `prompt` (contract.render_prompt) and `completion` (sft_target + eos) for labeled records, plus
    `with_rewards`: REWARD_COLUMNS (rows whose path correctness is unknown have no reward: left out and counted);
    `with_signals`: `signals`, the serve-time features the signal head reads; `with_teacher`: `teacher_agrees`."""
    if split not in data:
        raise RecordError(f"{source}: no {split!r} split (has {sorted(data)})")
    table = data[split]
    needed = REQUIRED_COLUMNS + (REWARD_COLUMNS if with_rewards else ()) + (("teacher_agrees",) if with_teacher else ())
    missing = [c for c in needed if c not in table.column_names]
    if missing:
        raise RecordError(f"{source} split {split!r}: missing column(s) {missing}")
    eos = tokenizer.eos_token
    if not eos:
        raise RecordError("tokenizer has no eos_token: a completion could never end")
    rows: dict[str, list[Any]] = {k: [] for k in ("prompt", "completion", "label", "qid", "conv_id", "domain")}
    if with_rewards:
        rows.update({k: [] for k in REWARD_COLUMNS})
    if with_signals:
        rows["signals"] = []
    if with_teacher:
        rows["teacher_agrees"] = []
    # minimal pairs (labeling/minimal_pairs.py) are flagged: the signal head learns from natural retrieval only
    rows["augmented"] = []
    has_aug = "augmentation" in table.column_names
    domain_column = [DOMAIN_FIELD] if DOMAIN_FIELD in table.column_names else []
    unknown_paths = 0
    for i, row in enumerate(table.select_columns(list(needed) + (["augmentation"] if has_aug else []) + domain_column)):
        if row["label"] is None:
            continue
        where = f"{source} split {split!r} record {i} (qid={row['qid']!r})"
        _check_row(row, where, with_rewards)
        if with_rewards and (row["s_ok"] is None or row["r_ok"] is None):
            unknown_paths += 1
            continue
        rows["prompt"].append(contract.render_prompt(tokenizer, row["question"], row["router_summaries"]))
        rows["completion"].append(row["sft_target"] + eos)
        if with_signals:
            try:
                rows["signals"].append(feature_matrix([row["question"]], [row["router_summaries"]])[0].tolist())
            except ValueError as exc:
                raise RecordError(f"{where}: {exc}") from None
        rows["augmented"].append(bool(row.get("augmentation")))
        rows["domain"].append(domain_of(row))
        if with_teacher:
            rows["teacher_agrees"].append(flag(row, "teacher_agrees", where, allow_none=True))
        for key in rows:
            if key not in ("prompt", "completion", "signals", "augmented", "teacher_agrees", "domain"):
                rows[key].append(row[key])
        if limit is not None and len(rows["prompt"]) >= limit:
            break
    if unknown_paths:
        log.warning("%s split %r: %d labeled record(s) left out: s_ok/r_ok unknown, no reward defined",
                    source, split, unknown_paths)
    return Dataset.from_dict(rows)


def router_input(dataset: DatasetDict, split: str) -> dict[str, Any]:
    """How the router's training prompts were shaped: at most `top_k` summaries (the labeling retrieval's k), under
    the contract's limits. Saved with the router; serving refuses prompts with more summaries than it saw."""
    rows = dataset[split]["router_summaries"] if split in dataset else []
    return {"top_k": max((len(s) for s in rows), default=0), **contract.limits()}


def natural_rows(rows: Dataset) -> Dataset:
    """The rows of natural retrieval: minimal pairs (`augmented`) left out, as the signal head is fitted on."""
    return rows.select([i for i, aug in enumerate(rows["augmented"]) if not aug])


def label_counts(rows: Dataset) -> dict[str, int]:
    counts = Counter(rows["label"]) if len(rows) else Counter()
    return {action: counts.get(action, 0) for action in contract.ACTIONS}


def balance(rows: Dataset, mode: str, seed: int) -> Dataset:
    """Equalize the two labels (train split only) by oversampling the minority."""
    if mode not in BALANCE_MODES:
        raise RecordError(f"balance must be one of {BALANCE_MODES}, got {mode!r}")
    counts = label_counts(rows)
    if mode == "none" or len(rows) == 0 or min(counts.values()) == 0:
        if mode != "none" and len(rows):
            log.warning("balance=%s skipped: only one label present in train (%s)", mode, counts)
        return rows
    import random

    rng = random.Random(seed)
    by_label = {a: [i for i, lab in enumerate(rows["label"]) if lab == a] for a in contract.ACTIONS}
    target = max(counts.values())
    picked: list[int] = []
    for idx in by_label.values():
        picked += idx + [rng.choice(idx) for _ in range(target - len(idx))]
    rng.shuffle(picked)
    return rows.select(picked)


def label_rules(data: DatasetDict) -> list[str]:
    """Which labeling rule(s) produced the labels, as recorded in the dataset."""
    rules: set[str] = set()
    for split in data.values():
        if "label_rule" in split.column_names:
            rules.update(r for r in split["label_rule"] if r)
    return sorted(rules)


def load_label_rows(cfg: RecipeConfig, tokenizer: Any, empty: str, *, train_rewards: bool, eval_rewards: bool,
                    signals: bool = False, teacher: bool = False) -> tuple[Any, Any, Any]:
    """(the label DatasetDict, the train split's rows, the eval split's rows or None without that split), built by
    build_rows; `empty` says why an empty train split is an error."""
    from labeling.dataset import load_dataset_dict

    dataset = load_dataset_dict(cfg.data)
    source = f"label dataset {cfg.data}"
    train = build_rows(dataset, cfg.train_split, tokenizer, source=source, with_rewards=train_rewards,
                       with_signals=signals, with_teacher=teacher, limit=cfg.max_train_rows)
    if len(train) == 0:
        raise RecordError(f"{source}: {empty}")
    val = (build_rows(dataset, cfg.eval_split, tokenizer, source=source, with_rewards=eval_rewards,
                      with_signals=signals, limit=cfg.max_eval_rows) if cfg.eval_split in dataset else None)
    return dataset, train, val


def balance_rows(cfg: RecipeConfig, dataset: Any, train: Any, val: Any,
                 minimal_pairs: bool = False) -> tuple[Any, dict[str, Any]]:
    """The train rows balanced by `cfg.balance`, and what the run's metadata records of the rows (`data`);
    `minimal_pairs`: count the train rows that are minimal pairs too."""
    balanced = balance(train, cfg.balance, cfg.seed)
    info = {
        "data": cfg.data,
        "label_rules": label_rules(dataset),
        "router_input": router_input(dataset, cfg.train_split),
        "train_labels": label_counts(train),
        **({"train_minimal_pairs": int(sum(train["augmented"]))} if minimal_pairs else {}),
        "train_labels_after_balance": label_counts(balanced),
        "validation_labels": label_counts(val) if val is not None else None,
        "balance": cfg.balance,
    }
    return balanced, info
