"""`make push`: publish a router run directory to the Hugging Face Hub; `pull` fetches one back;
`push_dataset` publishes a labeled DatasetDict (`make label push_to_hub=org/name`) with its dataset card.

The token comes from HF_TOKEN or the `hf auth login` cache, resolved by huggingface_hub itself; this module never
reads, prints or writes it. HF_ENDPOINT points the client at another hub (the tests use a local one).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from serving.model_card import write_model_card
from tiermem import contract
from tiermem.artifacts import make_adapter_portable, read_run_meta
from tiermem.errors import UsageError, stage_main

# Never published: trainer checkpoints, optimizer state, half-written files.
IGNORE = ["checkpoint-*/**", "checkpoint-*", "**/optimizer.pt", "**/*.tmp", ".tiermem_router.*", "runs/**"]


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
            raise ValueError("create_pr opens the PR against main; leave revision unset")


class HubError(UsageError):
    """A push or pull that the hub refused or could not serve."""


def push(cfg: PushConfig) -> dict[str, Any]:
    from huggingface_hub import HfApi, get_token
    from huggingface_hub.errors import HfHubHTTPError

    if cfg.repo_id.count("/") != 1 or not all(cfg.repo_id.split("/")):
        raise ValueError(f"repo_id must be org/name (pass repo_id=...), got {cfg.repo_id!r}")
    run_dir = Path(cfg.router)
    meta = read_run_meta(run_dir)
    contract.check_version(meta.contract_version, where=str(run_dir))
    weights = ["adapter_model.safetensors", "adapter_config.json"] if meta.adapter else ["config.json"]
    missing = [f for f in weights if not (run_dir / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{run_dir}: missing {missing}; not a complete router run")
    if get_token() is None:
        raise HubError("no hub token: set HF_TOKEN or run `hf auth login`")
    if meta.adapter:  # runs saved before adapters were made portable still name this machine's base path
        make_adapter_portable(run_dir, meta.base_model)
    write_model_card(run_dir, cfg.repo_id, license=cfg.license, datasets=cfg.datasets, tags=cfg.tags)
    api = HfApi()
    try:
        repo = api.create_repo(cfg.repo_id, private=cfg.private, exist_ok=True)
        if cfg.revision and cfg.revision != "main":
            api.create_branch(repo.repo_id, branch=cfg.revision, exist_ok=True)
        info = api.upload_folder(repo_id=repo.repo_id, folder_path=str(run_dir), revision=cfg.revision,
                                 create_pr=cfg.create_pr, commit_message=cfg.commit_message,
                                 ignore_patterns=IGNORE)
    except HfHubHTTPError as exc:
        raise HubError(f"push to {cfg.repo_id} failed: {exc}") from None
    return {"repo_id": repo.repo_id, "commit": info.oid, "commit_url": info.commit_url, "pr_url": info.pr_url,
            "revision": info.pr_revision or cfg.revision or "main", "private": cfg.private}


def pull(repo_id: str, revision: str | None = None, cache_dir: str | None = None) -> Path:
    """Download a router repo through the hub cache; returns the local snapshot directory."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, revision=revision, cache_dir=cache_dir))
    except LocalEntryNotFoundError:
        raise HubError(f"router {repo_id!r} (revision {revision or 'main'}) is not in the hub cache and the hub "
                       "cannot be reached (HF_HUB_OFFLINE or no network)") from None
    except HfHubHTTPError as exc:
        raise HubError(f"router {repo_id!r} (revision {revision or 'main'}) could not be downloaded: {exc}") from None


# Source benchmark -> the license its derived records keep (the `source` column of every label record).
SOURCE_LICENSES = {
    "locomo": ("cc-by-nc-4.0", "LoCoMo (Maharana et al., 2024) is CC BY-NC 4.0: records derived from it keep that "
                               "license (attribution, non-commercial use only)."),
    "longmemeval": ("mit", "LongMemEval (Wu et al., 2024) is MIT licensed."),
    "tiermem": ("other", "Built from the uploader's own conversations (tiermem format): their license and "
                         "privacy terms apply; check them before making this dataset public."),
}


def _dataset_license(sources: set[str], label_config: dict[str, Any]) -> tuple[str, list[str]]:
    if not label_config.get("data_path") and sources <= {"locomo"}:
        return "apache-2.0", ["The invented sample conversations shipped with tiermem-router (Apache-2.0); not "
                              "LoCoMo data, only its file shape."]
    known = [SOURCE_LICENSES[s] for s in sorted(sources) if s in SOURCE_LICENSES]
    unknown = sorted(sources - set(SOURCE_LICENSES))
    notes = [text for _, text in known] + [f"Source `{s}`: license unknown to tiermem." for s in unknown]
    licenses = {lic for lic, _ in known}
    if "cc-by-nc-4.0" in licenses:  # the most restrictive license of the mix governs the derived data
        return "cc-by-nc-4.0", notes
    return (licenses.pop() if len(licenses) == 1 and not unknown else "other"), notes


def render_dataset_card(dataset: Any, repo_id: str, label_config: dict[str, Any], stats: dict[str, Any] | None,
                        license: str | None = None) -> Any:
    """The dataset card: features, label rule, labeling config, counts per split, source license."""
    import yaml
    from huggingface_hub import DatasetCard, DatasetCardData

    from serving.model_card import LABEL_RULE_TEXT

    splits = list(dataset)
    sources = {s for name in splits for s in dataset[name].unique("source") if s}
    derived, license_notes = _dataset_license(sources, label_config)
    rule = label_config.get("label_rule") or "unknown"
    data = DatasetCardData(
        license=license or derived, pretty_name=f"tiermem router labels ({repo_id})",
        task_categories=["text-classification"], tags=["tiermem", "agent-memory", "router", "hindsight-labels"],
        configs=[{"config_name": "default",
                  "data_files": [{"split": name, "path": f"data/{name}-*.parquet"} for name in splits]}],
    )
    count_rows = ["| split | rows | ANSWER | ESCALATE | dropped (label null) |", "|---|---|---|---|---|"]
    for name in splits:
        labels = dataset[name]["label"]
        count_rows.append(f"| {name} | {len(labels)} | {labels.count('ANSWER')} | {labels.count('ESCALATE')} | "
                          f"{sum(x is None for x in labels)} |")
    feature_rows = ["| column | type |", "|---|---|"]
    first = dataset[splits[0]]
    feature_rows += [f"| `{name}` | `{feature}` |" for name, feature in first.features.items()]
    stats_line = ""
    if stats:
        stats_line = (f"\nThe labeling run: {stats.get('records')} questions, {stats.get('errors')} error records "
                      f"(kept out of the dataset), {stats.get('elapsed_s')} s.\n")
    body = f"""# {repo_id}

Hindsight labels for training a tiermem **sufficiency router**: for each question over a two-tier agent memory,
the top-k Tier-1 summaries the router sees (`router_summaries`, verbatim and in rank order), the answers of the
summary-only path and of the research path over the linked raw pages, how each was judged, and the label:
ANSWER (the summaries sufficed), ESCALATE (only reading the raw pages answered it) or null (dropped, with
`drop_reason`). Splits are by conversation (no conversation appears in two splits).

## Label rule

This dataset's `label` column follows the `{rule}` rule: a path counts as right according to
{LABEL_RULE_TEXT.get(rule, "an unknown rule")}. Both rules are always recorded (`label_outcome`,
`label_evidence` and their `s_ok_*` / `r_ok_*` signals), so the other one is a column away.

## Counts per split

{chr(10).join(count_rows)}
{stats_line}
## Source and license

{chr(10).join("- " + note for note in license_notes) or "- Unknown source."}

## Features

{chr(10).join(feature_rows)}

`judges`, `sufficiency` and `teacher` are JSON strings; `cost_summary_*` / `cost_research_*` are each path's
input/output tokens, LLM calls, wall time, pages read and research rounds.

## Labeling config

```yaml
{yaml.safe_dump(label_config, sort_keys=False).strip()}
```

## Use

```python
from datasets import load_dataset
ds = load_dataset("{repo_id}")
```

Train a router on it with `tiermem-router sft data=...` after `ds.save_to_disk(...)`.
"""
    return DatasetCard(f"---\n{data.to_yaml()}\n---\n\n{body}")


def push_dataset(path: str | Path, repo_id: str, private: bool = True, license: str | None = None,
                 commit_message: str = "Upload tiermem router labels") -> dict[str, Any]:
    """Publish a labeled DatasetDict saved by `make label` (its `dataset/` folder) as parquet files with a
    dataset card. The labeling run's config.yaml and stats.json, next to the dataset folder, feed the card."""
    import tempfile

    import yaml
    from datasets import load_from_disk
    from huggingface_hub import HfApi, get_token
    from huggingface_hub.errors import HfHubHTTPError

    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ValueError(f"dataset repo id must be org/name, got {repo_id!r}")
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no saved dataset (make label writes <output_dir>/dataset)")
    dataset = load_from_disk(str(path))
    config_path, stats_path = path.parent / "config.yaml", path.parent / "stats.json"
    label_config = yaml.safe_load(config_path.read_text()) if config_path.is_file() else {}
    stats = json.loads(stats_path.read_text()) if stats_path.is_file() else None
    if get_token() is None:
        raise HubError("no hub token: set HF_TOKEN or run `hf auth login`")
    card = render_dataset_card(dataset, repo_id, label_config or {}, stats, license)
    api = HfApi()
    with tempfile.TemporaryDirectory(prefix="tiermem-dataset-") as tmp:
        folder = Path(tmp)
        (folder / "data").mkdir()
        for name in dataset:
            dataset[name].to_parquet(str(folder / "data" / f"{name}-00000-of-00001.parquet"))
        card.save(folder / "README.md")
        if config_path.is_file():
            (folder / "labeling_config.yaml").write_text(config_path.read_text())
        try:
            repo = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
            info = api.upload_folder(repo_id=repo.repo_id, repo_type="dataset", folder_path=str(folder),
                                     commit_message=commit_message)
        except HfHubHTTPError as exc:
            raise HubError(f"dataset push to {repo_id} failed: {exc}") from None
    return {"repo_id": repo.repo_id, "commit": info.oid, "commit_url": info.commit_url, "private": private,
            "splits": {name: len(dataset[name]) for name in dataset}}


@stage_main("push")
def main(argv: list[str]) -> int:
    from tiermem.config import parse_cli

    cfg = parse_cli(PushConfig, argv, default_config=None)
    result = push(cfg)
    print(json.dumps({"config": asdict(cfg), **result}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
