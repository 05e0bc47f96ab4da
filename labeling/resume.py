"""Resuming a labeling run: the outputs that mark it finished, and the settings fingerprint that keeps one
output_dir from mixing records labeled under different settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from labeling.config import LabelConfig
from tiermem.runs.safe_io import read_json_state, write_atomic
from tiermem.settings.config import to_dict
from tiermem.settings.errors import UsageError

FINAL_OUTPUTS = ("dataset", "all_records.jsonl", "stats.json", "report.md")
# Settings that change no committed record: run mechanics (the shard too), the question subset and the split
# (reassigned at the end).
RESUME_IGNORED = {"output_dir", "tiers_dir", "llm_cache", "concurrency", "push_to_hub", "hub_private",
                  "shard", "executor", "shards", "ray_address", "ray_cpus_per_task", "ray_max_retries",
                  "split", "conversations", "max_conversations", "max_questions_per_conversation",
                  "question_sampling", "seed", "verdicts"}
LLM_RESUME_IGNORED = {"max_concurrency", "timeout_s", "max_retries", "cache_path", "batch_size", "base_url"}


def resume_fingerprint(cfg: LabelConfig) -> dict[str, Any]:
    """The settings a committed record depends on, flattened to dotted keys."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, sub in value.items():
                if prefix.startswith("llm.") and key in LLM_RESUME_IGNORED:
                    continue
                walk(f"{prefix}.{key}" if prefix else key, sub)
        else:
            flat[prefix] = value

    walk("", {k: v for k, v in to_dict(cfg).items() if k not in RESUME_IGNORED})
    # the same path with other contents labels otherwise; a live judge's file grows as the run goes (its judge's
    # settings are in the fingerprint instead)
    if cfg.judgments and cfg.llm.coverage is None and Path(cfg.judgments).is_file():
        import hashlib

        flat["judgments_sha256"] = hashlib.sha256(Path(cfg.judgments).read_bytes()).hexdigest()
    return flat


def check_resumable(cfg: LabelConfig, out: Path) -> None:
    """Refuse to mix records made under different settings in one output_dir."""
    out.mkdir(parents=True, exist_ok=True)
    path, current = out / "resume_fingerprint.json", json.loads(json.dumps(resume_fingerprint(cfg)))
    if path.exists() and (out / "records.jsonl").exists():
        saved = read_json_state(path, UsageError, "resume fingerprint", "use a new output_dir or delete the old one")
        changed = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
        if changed:
            raise UsageError(f"{out} holds records labeled with other settings ({', '.join(changed)}); "
                             "use a new output_dir or delete the old one")
    write_atomic(path, json.dumps(current, indent=2, sort_keys=True))

