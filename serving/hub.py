"""`make push`: publish a router run directory to the Hugging Face Hub; `pull` fetches one back.
(Labeled datasets are pushed by labeling.hub, on the floor below.)

Push uploads an explicit allowlist (`push_files`): the weights tiermem_router.json records a sha256 for, the adapter
or model config, the tokenizer, the metadata and the card. Nothing else a run directory holds (training_args.bin, a
pickle; frozen-trunk caches; trainer checkpoints and optimizer states) is ever published. Both push and pull check
the recorded digests first.

The token comes from HF_TOKEN or the `hf auth login` cache, resolved by huggingface_hub itself; this module never
reads, prints or writes it. HF_ENDPOINT points the client at another hub (the tests use a local one).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from serving.model_card import CARD_FILE, check_card, write_model_card
from tiermem import contract
from tiermem.artifacts import (
    ADAPTER_CONFIG_FILE,
    RUN_META_FILE,
    RunMeta,
    make_adapter_portable,
    read_run_meta,
    verify_files,
)
from tiermem.errors import ConfigError, HubError, MissingFileError, UsageError, stage_main
from tiermem.rundir import updating_run

# What transformers' tokenizer and generation saving writes next to the weights (those present are pushed).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model")
MODEL_CONFIG_FILES = ("config.json", "generation_config.json")


def push_files(run_dir: Path, meta: RunMeta) -> list[str]:
    """The files a user needs to load the router, by name: recorded weights (adapter_model.safetensors,
    model*.safetensors, feature_model.json), the adapter or model config, the tokenizer, tiermem_router.json and
    the card. An allowlist rather than ignore patterns, so a file a trainer adds later is never published by
    accident."""
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
    router: str = "runs/grpo"  # the router run directory to push
    repo_id: str = ""  # org/name on the hub (required)
    private: bool = True
    revision: str | None = None  # a branch to push to (created from main if missing); None: main
    create_pr: bool = False  # open a pull request instead of committing to the branch
    commit_message: str = "Upload tiermem router"
    license: str = "apache-2.0"
    datasets: list[str] = field(default_factory=list)  # hub ids of the training data, for the card
    tags: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.create_pr and self.revision not in (None, "main"):
            raise ConfigError("create_pr opens the PR against main; leave revision unset")


def push(cfg: PushConfig) -> dict[str, Any]:
    if cfg.repo_id.count("/") != 1 or not all(cfg.repo_id.split("/")):
        raise UsageError(f"repo_id must be org/name (pass repo_id=...), got {cfg.repo_id!r}")
    # Push writes the router's card and portable adapter config into its run: only a trained LM router run.
    with updating_run(cfg.router, "push", ("sft", "grpo")) as run_dir:
        return _push(cfg, run_dir)


def _push(cfg: PushConfig, run_dir: Path) -> dict[str, Any]:
    from huggingface_hub import HfApi, get_token
    from huggingface_hub.errors import HfHubHTTPError

    meta = read_run_meta(run_dir)
    contract.check_version(meta.contract_version, where=str(run_dir))
    weights = ["adapter_model.safetensors", "adapter_config.json"] if meta.adapter else ["config.json"]
    missing = [f for f in weights if not (run_dir / f).is_file()]
    if missing:
        raise MissingFileError(f"{run_dir}: missing {missing}; not a complete router run")
    verify_files(run_dir, meta)  # never publish weights that differ from the ones training recorded
    if get_token() is None:
        raise HubError("no hub token: set HF_TOKEN or run `hf auth login`")
    if meta.adapter:  # runs saved before adapters were made portable still name this machine's base path
        make_adapter_portable(run_dir, meta.base_model)
    # the card published is always rendered from the metadata published, whatever README.md held before
    write_model_card(run_dir, cfg.repo_id, license=cfg.license, datasets=cfg.datasets, tags=cfg.tags)
    stale = check_card(run_dir, read_run_meta(run_dir))
    if stale:  # the metadata changed under the push (it holds the run's lock: a bug, not the user's input)
        raise RuntimeError(f"internal: {stale}")
    files = push_files(run_dir, meta)
    api = HfApi()
    try:
        repo = api.create_repo(cfg.repo_id, private=cfg.private, exist_ok=True)
        if cfg.revision and cfg.revision != "main":
            api.create_branch(repo.repo_id, branch=cfg.revision, exist_ok=True)
        info = api.upload_folder(repo_id=repo.repo_id, folder_path=str(run_dir), revision=cfg.revision,
                                 create_pr=cfg.create_pr, commit_message=cfg.commit_message,
                                 allow_patterns=files)
    except HfHubHTTPError as exc:
        raise HubError(f"push to {cfg.repo_id} failed: {exc}") from None
    return {"repo_id": repo.repo_id, "commit": info.oid, "commit_url": info.commit_url, "pr_url": info.pr_url,
            "revision": info.pr_revision or cfg.revision or "main", "private": cfg.private, "files": files}


def pull(repo_id: str, revision: str | None = None, cache_dir: str | None = None, verify: bool = True) -> Path:
    """Download a router repo through the hub cache; returns the local snapshot directory, its weights checked
    against the digests its tiermem_router.json records (`verify=False`: the caller checks them itself)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        path = Path(snapshot_download(repo_id, revision=revision, cache_dir=cache_dir))
    except LocalEntryNotFoundError:
        raise HubError(f"router {repo_id!r} (revision {revision or 'main'}) is not in the hub cache and the hub "
                       "cannot be reached (HF_HUB_OFFLINE or no network)") from None
    except HfHubHTTPError as exc:
        raise HubError(f"router {repo_id!r} (revision {revision or 'main'}) could not be downloaded: {exc}") from None
    if verify:
        verify_files(path, read_run_meta(path))
    return path


@stage_main("push")
def main(argv: list[str]) -> int:
    from tiermem.config import parse_cli

    cfg = parse_cli(PushConfig, argv, default_config=None)
    result = push(cfg)
    print(json.dumps({"config": asdict(cfg), **result}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
