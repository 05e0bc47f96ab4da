"""What GRPO starts from: the SFT router run's policy (or, when allowed, a fresh adapter on the base), its reward rows
and the trainer's prompts, and whether it reads the SFT run's signal head (refit after training, action prior).
`cfg` is the GRPO config (router_train.lm.grpo.GRPORecipeConfig) throughout."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tiermem import contract
from tiermem.runs.run_meta import RUN_META_FILE
from tiermem.settings.config import ConfigError
from tiermem.settings.errors import MissingFileError

from .router_run import start_model
from .rows import balance_rows, load_label_rows, natural_rows

log = logging.getLogger(__name__)


def load_policy(cfg: Any) -> tuple[Any, Any, str, dict[str, Any] | None, Any]:
    """(model, tokenizer, base spec, SFT run info, peft_config for a fresh adapter or None)."""
    if cfg.router and not (Path(cfg.router) / RUN_META_FILE).is_file():
        raise MissingFileError(f"no SFT router run at {cfg.router} ({RUN_META_FILE} missing): run `make sft` first, "
                               "or point router= at an SFT output directory")
    if not cfg.router and not cfg.allow_no_sft:
        raise ConfigError(
            "GRPO starts from an SFT adapter: set router= to a `make sft` output, or allow_no_sft=true to start "
            "from the bare base model (expect zero reward variance there: no learning signal)"
        )
    if not cfg.router:
        log.warning("=" * 70 + "\nGRPO WITHOUT SFT: fresh LoRA adapter on %s. Expect zero reward variance.\n"
                    + "=" * 70, cfg.model)
    model, tokenizer, base_spec, peft_config, meta = start_model(cfg)
    sft_info = None if meta is None else {
        "sft_dir": cfg.router, "stage": meta.stage, "validation": meta.metrics.get("validation"),
        "signal_head": bool((meta.data.get("signal_head") or {}).get("file"))}
    return model, tokenizer, base_spec, sft_info, peft_config


def load_reward_rows(cfg: Any, tokenizer: Any, eval_rewards: bool,
                     signals: bool) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(balanced train rows, natural train rows, validation rows, data info). Validation keeps every labeled row
    (as SFT's) unless the trainer evaluates rewards on it."""
    dataset, train, val = load_label_rows(cfg, tokenizer, f"no labeled rows with known path outcomes in "
                                          f"{cfg.train_split!r}", train_rewards=True, eval_rewards=eval_rewards,
                                          signals=signals)
    if not cfg.minimal_pairs:
        train = natural_rows(train)
    balanced, info = balance_rows(cfg, dataset, train, val, minimal_pairs=True)
    return balanced, train, val, info


def wants_signal_head(cfg: Any, sft_info: dict[str, Any] | None) -> bool:
    has = bool(sft_info and sft_info.get("signal_head"))
    if cfg.signal_head and not has:
        raise ConfigError(f"signal_head=true but the router run {cfg.router} has no signal head to refit (an SFT "
                          "run with loss.signal_head: true has one); set signal_head=null or false")
    return has if cfg.signal_head is None else bool(cfg.signal_head)


def wants_prior_head(cfg: Any, sft_info: dict[str, Any] | None) -> bool:
    has = bool(sft_info and sft_info.get("signal_head"))
    if cfg.prior_head and not has:
        raise ConfigError(f"prior_head=true but the router run {cfg.router} has no signal head; set prior_head=null "
                          "or false")
    return cfg.completion == "action_token" and (has if cfg.prior_head is None else bool(cfg.prior_head))


def policy_rows(cfg: Any, rows: Any) -> Any:
    """The trainer's prompts: with completion action_token each ends with the contract's output prefix."""
    columns = ["prompt", "label", "s_ok", "r_ok", "cost_research_input_tokens"]
    rows = rows.select_columns(columns)
    if cfg.completion == "action_token":
        rows = rows.map(lambda row: {"prompt": row["prompt"] + contract.OUTPUT_PREFIX})
    return rows


def completion_tokens_needed(cfg: Any, tokenizer: Any, rows: Any) -> dict[str, int]:
    """Tokens each action's completion needs under the format scope: its prefix, or its longest full target."""
    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    if cfg.rewards.format_scope == "action":
        return {a: count(contract.OUTPUT_PREFIX + a + '"') for a in contract.ACTIONS}
    needed: dict[str, int] = {}
    for label, completion in zip(rows["label"], rows["completion"], strict=True):
        needed[label] = max(needed.get(label, 0), count(completion))  # the eos is part of a finished completion
    return needed
