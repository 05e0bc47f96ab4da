"""`tiermem-router label-merge`: check a sharded label run's shards and write its one dataset (docs/labeling.md)."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import yaml

from labeling.config import DEFAULT_CONFIG, LabelConfig
from labeling.resume import resume_fingerprint
from labeling.run import dataset_records, dropped_turns, finish, recover_outputs, selected_conversations
from labeling.shards import SHARDS_DIR, found_shards, parse_shard, print_merged, read_state, shard_of
from labeling.split import assign_splits
from labeling.store import read_records
from tiermem.data.conversations import Conversation
from tiermem.data.time_order import time_order_stats
from tiermem.runs.rundir import check_output_dir, claimed_output_dir
from tiermem.runs.safe_io import read_json_state, write_atomic
from tiermem.settings.config import parse_cli, to_dict
from tiermem.settings.errors import DataError, RunError, UsageError, stage_main


def _count(cfg: LabelConfig, out: Path) -> tuple[int, dict[int, Path]]:
    """The shard count and index -> directory; refuses a missing or mixed set."""
    found = found_shards(out)
    if not found:
        raise UsageError(f"{out}: no shards under {out / SHARDS_DIR}; label them first "
                         "(tiermem-router label shard=i/n, for i in 0 .. n-1) or run label without shard=")
    counts = sorted({n for _, n in found})
    if len(counts) > 1:
        raise DataError(f"{out / SHARDS_DIR}: shards of {len(counts)} different counts ("
                        f"{', '.join(p.name for p in found.values())}); every shard of one run has the same n: "
                        "remove the shards of the other count")
    count = counts[0]
    if cfg.shard is not None and parse_shard(cfg.shard)[1] != count:
        raise UsageError(f"shard={cfg.shard}: the shards under {out / SHARDS_DIR} were run with n={count}")
    if cfg.shards is not None and cfg.shards != count:
        raise UsageError(f"shards={cfg.shards}: the shards under {out / SHARDS_DIR} were run with n={count}")
    return count, {i: path for (i, _), path in found.items()}


def _check_shards(cfg: LabelConfig, out: Path, count: int, dirs: dict[int, Path]) -> dict[int, dict[str, Any]]:
    """index -> state of every shard, all finished under this config; else one RunError listing every incomplete one."""
    missing = [i for i in range(count) if i not in dirs]
    problems = [f"shard(s) {', '.join(f'{i}/{count}' for i in missing)} missing (of {count})"] if missing else []
    states: dict[int, dict[str, Any]] = {}
    for index, path in sorted(dirs.items()):
        state, problem = _check_shard(cfg, index, count, path)
        if problem:
            problems.append(f"shard {index}/{count} ({path}): {problem}")
        else:
            states[index] = state
    if problems:
        raise RunError(f"{out / SHARDS_DIR}: {'; '.join(problems)}. Run tiermem-router label shard=<i>/{count} for "
                       "each (a started one resumes where it stopped), then merge again")
    return states


def _check_shard(cfg: LabelConfig, index: int, count: int, path: Path) -> tuple[dict[str, Any], str | None]:
    """(state, None) for a shard finished under this config, (state, what is missing) for an unfinished one; other
    settings or a moved shard raise."""
    name = f"shard {index}/{count} ({path})"
    state = read_state(path)
    if state is None:
        return {}, f"never started (no shard.json); run tiermem-router label shard={index}/{count}"
    saved_path = path / "resume_fingerprint.json"
    if not saved_path.is_file():
        return state, f"no resume_fingerprint.json; rerun tiermem-router label shard={index}/{count}"
    saved = read_json_state(saved_path, DataError, "resume fingerprint", f"relabel shard {index}/{count}")
    current = json.loads(json.dumps(resume_fingerprint(cfg)))
    changed = sorted(k for k in set(saved) | set(current) if saved.get(k) != current.get(k))
    if changed:
        raise UsageError(f"{name}: labeled with other settings than this config ({', '.join(changed)}); merge "
                         "with the config the shards ran with, or relabel that shard in a new output_dir")
    if (state.get("index"), state.get("count")) != (index, count):
        raise DataError(f"{name}: its shard.json says shard {state.get('shard')!r}; the directory was moved or "
                        "copied: rerun that shard")
    if not state["finished"]:
        return state, (f"not finished (killed, failed, or still running); rerun tiermem-router label "
                       f"shard={index}/{count}: it resumes where it stopped")
    return state, None


def _check_records(conversations: list[Conversation], count: int,
                   stores: dict[int, dict[tuple[str, str], dict[str, Any]]]) -> None:
    """Every selected question has its record in the one shard its conversation hashes to, in one split."""
    holders: dict[str, set[int]] = defaultdict(set)
    splits: dict[str, set[str]] = defaultdict(set)
    for index, records in stores.items():
        for (conv_id, _), rec in records.items():
            holders[conv_id].add(index)
            splits[conv_id].add(str(rec.get("split")))
    for conv_id, where in sorted(holders.items()):
        if len(where) > 1:
            raise DataError(f"conversation {conv_id!r} is in shards {', '.join(f'{i}/{count}' for i in sorted(where))}"
                            f"; it belongs to shard {shard_of(conv_id, count)}/{count} alone: remove the copies")
        (index,) = where
        if index != shard_of(conv_id, count):
            raise DataError(f"shard {index}/{count} holds conversation {conv_id!r}, which belongs to shard "
                            f"{shard_of(conv_id, count)}/{count}; its records were copied in: rerun that shard in "
                            "a clean directory")
    for conv_id, names in sorted(splits.items()):
        if len(names) > 1:
            index = shard_of(conv_id, count)
            raise DataError(f"shard {index}/{count}: conversation {conv_id!r} has records in splits "
                            f"{sorted(names)} (a split leak); rerun that shard in a clean directory")
    for conv in conversations:
        index = shard_of(conv.conv_id, count)
        missing = [q.qid for q in conv.questions if (conv.conv_id, q.qid) not in stores[index]]
        if missing:
            raise RunError(f"shard {index}/{count}: {len(missing)} question(s) of conversation {conv.conv_id!r} "
                           f"have no record (first: {missing[0]!r}); rerun tiermem-router label "
                           f"shard={index}/{count} with this config")


def _sum_llm(states: list[dict[str, Any]]) -> dict[str, Any]:
    """Per model, the shards' LLM counts added up (roles as the shards list them)."""
    merged: dict[str, dict[str, Any]] = {}
    for state in states:
        for name, llm in (state.get("llm") or {}).items():
            into = merged.setdefault(name, {"roles": list(llm.get("roles", []))})
            for key, value in llm.items():
                if key != "roles" and isinstance(value, (int, float)):
                    into[key] = into.get(key, 0) + value
    return merged


def merge(cfg: LabelConfig) -> dict[str, Any]:
    """Check every shard of `cfg.output_dir` and write the dataset, stats and report there. Returns the stats."""
    started = time.perf_counter()
    out = check_output_dir(cfg.output_dir, "label")  # a foreign or busy directory is refused before any loading
    count, dirs = _count(cfg, out)
    conversations = selected_conversations(cfg)
    assignment = assign_splits([c.conv_id for c in conversations], cfg.split)
    with claimed_output_dir(out, "label"), ExitStack() as held:
        for path in dirs.values():  # a shard still running holds its lock: refused, naming its pid
            held.enter_context(claimed_output_dir(path, "label"))
        states = _check_shards(cfg, out, count, dirs)
        stores = {i: read_records(dirs[i] / "records.jsonl") for i in range(count)}
        _check_records(conversations, count, stores)
        recover_outputs(out)
        write_atomic(out / "config.yaml", yaml.safe_dump(to_dict(cfg), sort_keys=False))
        by_key = {key: rec for records in stores.values() for key, rec in records.items()}
        records = dataset_records(by_key, conversations, assignment)
        ordered = [states[i] for i in range(count)]
        shards = {"count": count, "by_shard": [
            {k: s.get(k) for k in ("shard", "conversations", "records", "errors", "resumed_records", "elapsed_s")}
            for s in ordered]}
        # elapsed: the shards' labeling time added up, plus the merge's own
        elapsed = sum(s.get("elapsed_s") or 0 for s in ordered) + time.perf_counter() - started
        return finish(cfg, records, sum(s.get("resumed_records") or 0 for s in ordered), elapsed,
                      dropped_turns(conversations), llm_judge=any(s.get("llm_judge") for s in ordered),
                      llm_stats=_sum_llm(ordered),
                      extra_stats={"shards": shards, "time_order": time_order_stats(conversations)})


@stage_main("label-merge")
def main(argv: list[str]) -> int:
    cfg = parse_cli(LabelConfig, argv, default_config=DEFAULT_CONFIG)
    stats = merge(cfg)
    print_merged(cfg, stats)
    return 0 if stats["errors"] == 0 else 1
