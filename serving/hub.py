"""`make push`: publish a router run directory to the Hugging Face Hub (docs/serving.md); `pull` fetches one back.
The token is huggingface_hub's; this module never reads, prints or writes it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serving.model_card import render_card
from serving.portable import portable_adapter_config, portable_meta
from tiermem import contract
from tiermem.models.specs import ADAPTER_CONFIG_FILE, hub_id
from tiermem.runs.run_meta import (
    CARD_FILE,
    RUN_META_FILE,
    SIGNAL_HEAD_FILE,
    RunMeta,
    meta_digest,
    meta_json,
    read_run_meta,
    verify_files,
)
from tiermem.runs.rundir import ROUTER_STAGES, updating_run
from tiermem.settings.config import json_stage
from tiermem.settings.errors import ConfigError, HubError, MissingFileError
from tiermem.settings.hub_errors import check_repo_id, hub_errors

ADAPTER_MODEL_FILE = "adapter_model.safetensors"

# What transformers' tokenizer and generation saving writes next to the weights (those present are pushed).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model")
MODEL_CONFIG_FILES = ("config.json", "generation_config.json")


def push_files(run_dir: Path, meta: RunMeta) -> list[str]:
    """The files a user needs to load the router, by name: an allowlist rather than ignore patterns, so a file a
    trainer adds later is never published by accident."""
    names = list(meta.files or {})
    if meta.router_kind == "local":
        names += [ADAPTER_CONFIG_FILE] if meta.adapter else list(MODEL_CONFIG_FILES)
        names += list(TOKENIZER_FILES)
    if meta.router_kind == "unit-reader":  # the cross-encoder's config and tokenizer beside its weights
        names += [*MODEL_CONFIG_FILES, *TOKENIZER_FILES]
    names += [RUN_META_FILE, CARD_FILE]
    return sorted({n for n in names if (run_dir / n).is_file()})


@dataclass
class PushConfig:
    router: str = "runs/grpo"  # the router run directory to push (any kind: sft, grpo, unit-reader, features)
    repo_id: str = ""  # org/name on the hub (required)
    private: bool = True
    revision: str | None = None  # a branch to push to (created from main if missing); None: main
    create_pr: bool = False  # open a pull request instead of committing to the branch
    commit_message: str = "Upload tiermem router"
    license: str = "apache-2.0"
    datasets: list[str] = field(default_factory=list)  # hub ids of the training data, for the card
    tags: list[str] = field(default_factory=list)
    eval: str = ""  # the eval.json of this router (make eval's output_dir/eval.json): its table goes on the card

    def __post_init__(self) -> None:
        if self.create_pr and self.revision not in (None, "main"):
            raise ConfigError("create_pr opens the PR against main; leave revision unset")


def push(cfg: PushConfig) -> dict[str, Any]:
    check_repo_id(cfg.repo_id)
    # Push renders the router's card into its run (from the current metadata): any trained router run.
    with updating_run(cfg.router, "push", ROUTER_STAGES) as run_dir:
        return _push(cfg, run_dir)


def required_files(meta: RunMeta) -> list[str]:
    """What loading the router needs besides tiermem_router.json, by kind (verify_files checks their digests)."""
    if meta.router_kind == "local":
        return [ADAPTER_MODEL_FILE, ADAPTER_CONFIG_FILE] if meta.adapter else ["config.json"]
    if meta.router_kind == "unit-reader":
        return ["model.safetensors", "config.json", SIGNAL_HEAD_FILE]
    return list(meta.files or {})


def pushed_meta(run_dir: Path, meta: RunMeta) -> RunMeta:
    """The metadata as uploaded, with the uploaded adapter config's sha256 (the pulled router proves its file)."""
    pushed = portable_meta(meta)
    if pushed.files and ADAPTER_CONFIG_FILE in pushed.files:
        digest = hashlib.sha256(_pushed_adapter_config(run_dir, meta)).hexdigest()
        pushed.files = {**pushed.files, ADAPTER_CONFIG_FILE: digest}
    return pushed


def pushed_content(run_dir: Path, meta: RunMeta, name: str, card: str) -> bytes | str:
    """A file as uploaded: the metadata, card and adapter config without local paths; any other file as on disk."""
    if name == RUN_META_FILE:
        return meta_json(pushed_meta(run_dir, meta)).encode()
    if name == CARD_FILE:
        return card.encode()
    if name == ADAPTER_CONFIG_FILE:
        return _pushed_adapter_config(run_dir, meta)
    return str(run_dir / name)


def _pushed_adapter_config(run_dir: Path, meta: RunMeta) -> bytes:
    base = hub_id(meta.base_model) or portable_meta(meta).base_model
    return portable_adapter_config((run_dir / ADAPTER_CONFIG_FILE).read_text(encoding="utf-8"), base).encode()


def read_eval(path: str, meta: RunMeta) -> dict[str, Any]:
    """eval.json of the router as it is: the eval records the digest of the router metadata it evaluated."""
    from tiermem.data.textfile import read_json_file

    report = read_json_file(path, ConfigError, "eval report")
    meta_of = report.get("meta") if isinstance(report, dict) else None
    evaluated = meta_of.get("router_meta_sha256") if isinstance(meta_of, dict) else None
    if evaluated != meta_digest(meta):
        raise ConfigError(f"eval={path}: " + ("it records no router metadata digest (not an eval of a router run, "
                                              "or one from before eval recorded it)" if evaluated is None else
                          "it evaluated another router, or this one before its metadata changed (calibrate)")
                          + "; rerun `make eval` on this router, then push")
    return report


def _push(cfg: PushConfig, run_dir: Path) -> dict[str, Any]:
    from huggingface_hub import CommitOperationAdd, HfApi, get_token

    meta = read_run_meta(run_dir)
    contract.check_version(meta.contract_version, where=str(run_dir))
    missing = [f for f in required_files(meta) if not (run_dir / f).is_file()]
    if missing:
        raise MissingFileError(f"{run_dir}: missing {missing}; not a complete {meta.router_kind} router run")
    verify_files(run_dir, meta)  # never publish weights that differ from the ones training recorded
    eval_report = read_eval(cfg.eval, meta) if cfg.eval else None
    if get_token() is None:
        raise HubError("no hub token: set HF_TOKEN or run `hf auth login`")
    card = render_card(pushed_meta(run_dir, meta), cfg.repo_id, eval_report, license=cfg.license,
                       datasets=cfg.datasets, tags=cfg.tags)
    files = sorted({*push_files(run_dir, meta), RUN_META_FILE, CARD_FILE})
    operations = [CommitOperationAdd(path_in_repo=name, path_or_fileobj=pushed_content(run_dir, meta, name, card))
                  for name in files]
    api = HfApi()
    with hub_errors(f"push to {cfg.repo_id}"):
        repo = api.create_repo(cfg.repo_id, private=cfg.private, exist_ok=True)
        if cfg.revision and cfg.revision != "main":
            api.create_branch(repo.repo_id, branch=cfg.revision, exist_ok=True)
        info = api.create_commit(repo_id=repo.repo_id, operations=operations, revision=cfg.revision,
                                 create_pr=cfg.create_pr, commit_message=cfg.commit_message)
    return {"repo_id": repo.repo_id, "commit": info.oid, "commit_url": info.commit_url, "pr_url": info.pr_url,
            "revision": info.pr_revision or cfg.revision or "main", "private": cfg.private, "files": files}


def pull(repo_id: str, revision: str | None = None, cache_dir: str | None = None, verify: bool = True) -> Path:
    """Download a router repo through the hub cache; the snapshot directory, its weights checked (unless `verify`
    is False: the caller checks them)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        with hub_errors(f"router {repo_id!r} (revision {revision or 'main'})"):
            path = Path(snapshot_download(repo_id, revision=revision, cache_dir=cache_dir))
    except LocalEntryNotFoundError:
        local = Path(repo_id).parts[0]
        # `runs/nope` reads as org/name too: say first that no such directory is here (the likelier meaning)
        where = (f"no directory {repo_id!r} here ({local}/ exists, {repo_id} does not), and as a hub id it"
                 if Path(local).is_dir() else "it")
        raise HubError(f"router {repo_id!r}: {where} is not in the hub cache (revision {revision or 'main'}) and the "
                       "hub cannot be reached (HF_HUB_OFFLINE or no network)") from None
    if verify:
        verify_files(path, read_run_meta(path))
    return path


main = json_stage("push", PushConfig, push)


if __name__ == "__main__":
    raise SystemExit(main())
