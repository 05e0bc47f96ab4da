"""`make label push_to_hub=org/name`: a labeled DatasetDict and its card, published to the Hugging Face Hub (the
token is huggingface_hub's business, never read here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from labeling.rules import LABEL_RULE_TEXT
from tiermem.runs.safe_io import write_atomic, write_stream
from tiermem.settings.errors import HubError, MissingFileError
from tiermem.settings.hub_errors import check_repo_id, hub_errors

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


def _augmentation(split: Any) -> list[Any]:
    return split["augmentation"] if "augmentation" in split.column_names else [None] * len(split)


def _pairs_section(dataset: Any, stats: dict[str, Any] | None) -> str:
    """Minimal pairs per kind and label, counted from the train split itself (emitted counts from the run)."""
    kinds = [k for k in dict.fromkeys(_augmentation(dataset["train"])) if k] if "train" in dataset else []
    emitted = ((stats or {}).get("minimal_pairs") or {}).get("kinds") or {}
    if not kinds and not emitted:
        return ""
    train = dataset["train"] if "train" in dataset else None
    pairs = list(zip(_augmentation(train), train["label"], strict=True)) if train is not None else []
    rows = ["| kind | emitted (all splits) | train rows | ANSWER | ESCALATE |", "|---|---|---|---|---|"]
    for kind in list(dict.fromkeys([*emitted, *kinds])):
        labels = [label for k, label in pairs if k == kind]
        rows.append(f"| {kind} | {emitted.get(kind, {}).get('emitted', 'n/a')} | {len(labels)} | "
                    f"{labels.count('ANSWER')} | {labels.count('ESCALATE')} |")
    return f"""## Minimal pairs

The train split also holds minimal pairs: variants of a train question's summary set one unit apart (the unit that
states the answer dropped, an irrelevant unit dropped, a deeper unit that states the answer brought in, or the
answer-bearing unit replaced by a near miss about the same entities), each labeled by the same rule with the
question's own research pages. They carry `augmentation` (the kind) and `augmented_from` (the question's `qid`);
natural rows have both null. Validation and test hold natural retrieval only.

{chr(10).join(rows)}
"""


def _units_section(dataset: Any) -> str:
    """Per-unit targets counted from the splits themselves (router units vs deeper ones, positives)."""
    rows = ["| split | router units | states the answer alone | deeper units (train only) | states it alone |",
            "|---|---|---|---|---|"]
    any_units = False
    for name in dataset:
        split = dataset[name]
        if "unit_targets" not in split.column_names:
            continue
        router = deeper = router_pos = deeper_pos = 0
        for units, shown in zip(split["unit_targets"], split["router_summaries"], strict=True):
            for u in units or []:
                if u["rank"] <= len(shown):
                    router, router_pos = router + 1, router_pos + bool(u["s_ok"])
                else:
                    deeper, deeper_pos = deeper + 1, deeper_pos + bool(u["s_ok"])
        any_units = any_units or bool(router)
        rows.append(f"| {name} | {router} | {router_pos} | {deeper} | {deeper_pos} |")
    if not any_units:
        return ""
    return f"""
## Per-unit targets

Natural rows carry `unit_targets`: for each retrieved unit, its own `answer_recall`, `gold_in_pages` (gold turns in
the pages it links to) and `s_ok` (the evidence rule's verdict for that unit alone), computed by the same rule as
the label over a one-unit summary set. Ranks below the router's top-k appear in the train split only.

{chr(10).join(rows)}
"""


def render_dataset_card(dataset: Any, repo_id: str, label_config: dict[str, Any], stats: dict[str, Any] | None) -> Any:
    """The dataset card: features, label rule, labeling config, counts per split, source license."""
    import yaml
    from huggingface_hub import DatasetCard, DatasetCardData

    splits = list(dataset)
    sources = {s for name in splits for s in dataset[name].unique("source") if s}
    derived, license_notes = _dataset_license(sources, label_config)
    rule = label_config.get("label_rule") or "unknown"
    data = DatasetCardData(
        license=derived, pretty_name=f"tiermem router labels ({repo_id})",
        task_categories=["text-classification"], tags=["tiermem", "agent-memory", "router", "hindsight-labels"],
        configs=[{"config_name": "default",
                  "data_files": [{"split": name, "path": f"data/{name}-*.parquet"} for name in splits]}],
    )
    count_rows = ["| split | rows | ANSWER | ESCALATE | dropped (label null) | of which minimal pairs |",
                  "|---|---|---|---|---|---|"]
    for name in splits:
        labels = dataset[name]["label"]
        count_rows.append(f"| {name} | {len(labels)} | {labels.count('ANSWER')} | {labels.count('ESCALATE')} | "
                          f"{sum(x is None for x in labels)} | {sum(map(bool, _augmentation(dataset[name])))} |")
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
{_pairs_section(dataset, stats)}{_units_section(dataset)}
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

Train a router on it with `tiermem-router sft dataset_dir=...` after `ds.save_to_disk(...)`.
"""
    return DatasetCard(f"---\n{data.to_yaml()}\n---\n\n{body}")


def push_dataset(path: str | Path, repo_id: str, private: bool = True) -> dict[str, Any]:
    """Publish a labeled `dataset/` folder as parquet with a card fed by the run's config.yaml and stats.json."""
    import tempfile

    import yaml
    from datasets import load_from_disk
    from huggingface_hub import HfApi, get_token

    check_repo_id(repo_id)
    path = Path(path)
    if not path.is_dir():
        raise MissingFileError(f"{path}: no saved dataset (make label writes <output_dir>/dataset)")
    dataset = load_from_disk(str(path))
    config_path, stats_path = path.parent / "config.yaml", path.parent / "stats.json"
    label_config = yaml.safe_load(config_path.read_text()) if config_path.is_file() else {}
    stats = json.loads(stats_path.read_text()) if stats_path.is_file() else None
    if get_token() is None:
        raise HubError("no hub token: set HF_TOKEN or run `hf auth login`")
    card = render_dataset_card(dataset, repo_id, label_config or {}, stats)
    api = HfApi()
    with tempfile.TemporaryDirectory(prefix="tiermem-dataset-") as tmp:
        folder = Path(tmp)
        (folder / "data").mkdir()
        for name in dataset:
            write_stream(folder / "data" / f"{name}-00000-of-00001.parquet", dataset[name].to_parquet)
        write_atomic(folder / "README.md", str(card))
        if config_path.is_file():
            write_atomic(folder / "labeling_config.yaml", config_path.read_text())
        with hub_errors(f"dataset push to {repo_id}"):
            repo = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
            info = api.upload_folder(repo_id=repo.repo_id, repo_type="dataset", folder_path=str(folder),
                                     commit_message="Upload tiermem router labels")
    return {"repo_id": repo.repo_id, "commit": info.oid, "commit_url": info.commit_url, "private": private,
            "splits": {name: len(dataset[name]) for name in dataset}}
