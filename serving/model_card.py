"""The model card (README.md with YAML metadata) of a router run directory, for every router kind.

The card travels with the weights: training writes it next to the adapter (replacing PEFT's empty template), a
score router's stage next to its model, `make calibrate` and `make eval` rewrite it with the metadata they change
(`save_with_card`, `record_eval`), `make push` renders it once more with the hub repo id from the metadata it
uploads (no local path).
The sections, worded per kind, live in serving/card_sections.py; every number and name comes from
tiermem_router.json.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from serving import card_sections as cs
from serving.card_usage import usage_section
from serving.portable import portable_meta, travelling_data_name, without_local_paths
from tiermem.models.specs import PACKAGED_HUB_IDS
from tiermem.runs.eval_summary import EvalSummary
from tiermem.runs.run_meta import CARD_FILE, RUN_META_FILE, RunMeta, RunMetaFile, meta_digest, read_run_meta
from tiermem.runs.safe_io import write_atomic

__all__ = ["PACKAGED_HUB_IDS", "record_eval", "refresh_card", "render_card", "save_with_card",
           "travelling_data_name", "without_local_paths", "write_run_card"]

DIGEST_KEY = "tiermem_router_sha256"  # card metadata: run_meta.meta_digest of the metadata it was rendered from


# ---------------------------------------------------------------------------------------------- the card


def render_card(meta: RunMeta, repo_id: str | None = None, license: str = "apache-2.0",
                datasets: list[str] | None = None, tags: list[str] | None = None, ref: str | None = None) -> Any:
    """The card as a huggingface_hub ModelCard, written for the kind of router the run holds. `repo_id`: the hub
    repo (push): the card is then rendered from `portable_meta(meta)`, the metadata that travels with it, with no
    path of this machine; `ref`: what the usage snippets load when there is no repo yet (the run directory)."""
    from huggingface_hub import ModelCard, ModelCardData

    local = repo_id is None
    meta = meta if local else portable_meta(meta)
    ref = repo_id or ref or "<run directory or org/name>"
    results = cs.eval_results(meta)
    kind = cs.card_metadata(meta)
    data = ModelCardData(
        base_model=kind["base_model"], library_name=kind["library_name"], pipeline_tag=kind["pipeline_tag"],
        license=license, datasets=list(datasets or []) or None,
        tags=sorted({"tiermem", "router", "agent-memory", *kind["tags"], meta.stage, *(tags or [])}),
        model_name=(repo_id or f"tiermem router: {meta.stage}") if results else None, eval_results=results,
        # the metadata this card was rendered from: a card older than tiermem_router.json is detected (check_card)
        **{DIGEST_KEY: meta_digest(meta)},
    )
    body = f"""# {repo_id or "tiermem router: " + meta.stage}

A **sufficiency router** for a two-tier agent memory (tiermem-router). {cs.intro(meta)}

- Weights: {cs.weights_line(meta, local)}
- Training stage: `{meta.stage}`
{cs.contract_line(meta)}

## Training data and label rule

{cs.data_section(meta, local=local)}

## Training configuration

{cs.training_table(meta, local)}
{cs.rewards_section(meta)}
## Training and validation metrics

{cs.table({k: v for k, v in meta.metrics.items() if k not in ("log_history", "reward_curve", "grpo_signal")})}

## Evaluation

{cs.eval_section(meta, local=local)}

## Calibration

{cs.calibration_section(meta, local=local)}

{cs.score_section(meta)}

## How to use

{usage_section(meta, ref, cs.base_hub_id(meta) if cs.is_lm(meta) else None)}
## Limitations

{cs.limitations(meta)}
"""
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}")


def write_run_card(run_dir: str | Path, meta: RunMeta | None = None) -> Path:
    """README.md of the run directory, rendered from `meta` (default: the run's tiermem_router.json), the metadata
    left as it is. The card a push uploads is rendered apart (render_card with the repo id), from the metadata it
    uploads."""
    run_dir = Path(run_dir)
    meta = meta or read_run_meta(run_dir)
    path = run_dir / CARD_FILE
    write_atomic(path, str(render_card(meta, ref=str(run_dir))))  # never through a link
    return path


def refresh_card(run_dir: str | Path) -> Path | None:
    """Re-render README.md from the run's current tiermem_router.json. A router given by hub id (no local run
    directory) has no card to refresh: None."""
    run_dir = Path(run_dir)
    if not (run_dir / RUN_META_FILE).is_file():
        return None
    return write_run_card(run_dir)


def save_with_card(record: RunMetaFile) -> Path:
    """An operation's one write: the card rendered from the metadata it changed, then the metadata."""
    return record.save(card=lambda meta: str(render_card(meta, ref=str(record.run_dir))))


MAX_OTHER_EVALS = 10  # the card lists the latest ones; eval.json of each run keeps everything


def trained_on(meta: RunMeta) -> str | list[str] | None:
    """The label data the router was trained from, as its training recorded it (LM routers: data.data; score
    routers: data.dataset): one path or a list of them."""
    value = meta.data.get("data") or meta.data.get("dataset")
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    return value if isinstance(value, str) and value else None


def is_of_record(meta: RunMeta, data: str | Path | list[str] | None, split: str) -> bool:
    """An eval is the router's evaluation of record when it replays the held-out test split of the very data the
    router was trained from (compared as resolved paths, in order; a hub id as written). Any other data or split
    is not."""
    from labeling.dataset import same_data

    source = trained_on(meta)
    if data is None or source is None or split != "test":
        return False
    return same_data(data, source)


def record_eval(run_dir: str | Path | None, summary: EvalSummary,
                data: str | Path | list[str] | None = None) -> Path | None:
    """Store an eval's summary in the run's tiermem_router.json and refresh the card: as the evaluation of record
    (`eval`) when it replays the test split of the router's own training data (`data`: what eval read), else
    among `other_evals` (one per dataset and split, the latest MAX_OTHER_EVALS), leaving the evaluation of record
    as it was. `run_dir` None or not a local run directory (a hub id, an LLM router): nothing to record, None.
    Returns the card's path."""
    if not run_dir or not (Path(run_dir) / RUN_META_FILE).is_file():
        return None
    record = RunMetaFile.open(run_dir)
    meta = record.meta
    if data is None or is_of_record(meta, data, summary.split):
        meta.eval = summary
    else:
        kept = [e for e in meta.other_evals if (e.dataset, e.split) != (summary.dataset, summary.split)]
        meta.other_evals = (kept + [summary])[-MAX_OTHER_EVALS:]
    save_with_card(record)
    return record.run_dir / CARD_FILE


def card_digest(run_dir: str | Path) -> str | None:
    """The metadata digest the run's README.md says it was rendered from; None: no card, or one without it."""
    path = Path(run_dir) / CARD_FILE
    if not path.is_file() or path.is_symlink():
        return None
    match = re.search(rf"^{DIGEST_KEY}: ([0-9a-f]{{64}})$", path.read_text(encoding="utf-8", errors="replace"),
                      re.MULTILINE)
    return match.group(1) if match else None


def check_card(run_dir: str | Path, meta: RunMeta | None = None) -> str | None:
    """None when README.md was rendered from the run's current tiermem_router.json; else why it is stale (a stage
    killed between writing the metadata and the card, or a card edited by hand). The metadata is the truth: the
    router loads from it, and `tiermem-router push` re-renders the card from it."""
    run_dir = Path(run_dir)
    if not (run_dir / CARD_FILE).is_file():
        return None
    meta = meta or read_run_meta(run_dir)
    recorded = card_digest(run_dir)
    if recorded == meta_digest(meta):
        return None
    why = "it records no metadata digest" if recorded is None else "it was rendered from other metadata"
    return (f"{run_dir / CARD_FILE} does not match {run_dir / RUN_META_FILE}: {why} (a stage stopped "
            "between the two writes, or a card edited by hand); the router loads from tiermem_router.json, and "
            "push re-renders the card from it")
