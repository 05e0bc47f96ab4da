"""Reading the labeled dataset back, for every consumer (training rows, eval, calibration, benchmarks): the one
loader of label records, the one error for records that do not fit (RecordError, naming file or record and field),
and the typed field readers the consumers validate with."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tiermem.data.textfile import jsonl_records, read_utf8
from tiermem.settings.config import ConfigError
from tiermem.settings.errors import DataError, MissingFileError
from tiermem.settings.ranges import retrieval_score


class RecordError(DataError):
    """Label data that does not fit a stage: a dataset that is missing or malformed, or a record whose field is
    missing or wrong. The message names the file or the record (index, qid) and the field."""


def field(record: Mapping[str, Any], name: str, where: str) -> Any:
    if name not in record:
        raise RecordError(f"{where}: missing field {name!r}")
    return record[name]


def flag(record: Mapping[str, Any], name: str, where: str, allow_none: bool = False) -> bool | None:
    value = field(record, name, where)
    if not (isinstance(value, bool) or (allow_none and value is None)):
        raise RecordError(f"{where}: field {name!r} must be true/false{'/null' if allow_none else ''}, got {value!r}")
    return value


def amount(record: Mapping[str, Any], name: str, where: str) -> float:
    value = field(record, name, where)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise RecordError(f"{where}: field {name!r} must be a non-negative number, got {value!r}")
    return float(value)


DataSpec = str | list[str]  # one labeled dataset, or several (`data: [a, b]`): their records pooled, domain kept
DOMAIN_FIELD = "source"  # a record's domain: the format its conversations came in (locomo, realmem, ...)


def data_paths(spec: DataSpec | Path, where: str = "data") -> list[str]:
    """The labeled datasets a `data` value names, in order: one path, or a non-empty list of distinct paths."""
    items = [str(spec)] if isinstance(spec, (str, Path)) else spec
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}: give a labeled dataset path or a non-empty list of them, got {spec!r}")
    for i, item in enumerate(items):
        if not isinstance(item, (str, Path)) or not str(item).strip():
            raise ConfigError(f"{where}[{i}]: expected a path, got {item!r}")
    items = [str(i) for i in items]
    repeated = sorted({i for i in items if items.count(i) > 1})
    if repeated:  # its records would be counted twice (and refused as duplicate keys)
        raise ConfigError(f"{where}: {repeated} named more than once")
    return items


def data_label(spec: DataSpec | Path) -> str:
    paths = data_paths(spec)
    return paths[0] if len(paths) == 1 else "[" + ", ".join(paths) + "]"


def same_data(a: Any, b: Any) -> bool:
    try:
        pa, pb = data_paths(a), data_paths(b)
    except ConfigError:
        return False

    def same(x: str, y: str) -> bool:
        try:
            return x == y or Path(x).expanduser().resolve() == Path(y).expanduser().resolve()
        except OSError:
            return False
    return len(pa) == len(pb) and all(same(x, y) for x, y in zip(pa, pb, strict=True))


def domain_of(record: Mapping[str, Any]) -> str:
    return str(record.get(DOMAIN_FIELD) or "unknown")


def load_dataset_dict(spec: DataSpec | Path) -> Any:
    """The whole DatasetDict `make label` saved (training reads every split it needs from it); several datasets:
    one DatasetDict of their records split by split (each split's records pooled, in the order named)."""
    from datasets import Dataset, DatasetDict

    paths = data_paths(spec)
    if len(paths) == 1:
        return _load_one_dataset_dict(paths[0])
    parts = [_load_one_dataset_dict(p) for p in paths]
    check_pool_disjoint({p: {split: part[split]["conv_id"] for split in part} for p, part in zip(paths, parts,
                                                                                                strict=True)})
    out = {}
    for split in dict.fromkeys(name for part in parts for name in part):
        located = [(f"{p} [{split}] record {i}", rec) for p, part in zip(paths, parts, strict=True)
                   if split in part for i, rec in enumerate(part[split].to_list())]
        rows = check_records(located)
        # every field of every dataset (from_list would keep only the first record's): absent is null
        columns = list(dict.fromkeys(k for r in rows for k in r))
        out[split] = Dataset.from_dict({k: [r.get(k) for r in rows] for k in columns})
    return DatasetDict(out)


def _load_one_dataset_dict(path: str | Path) -> Any:
    from datasets import DatasetDict, load_from_disk

    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"label dataset {path} not found: run `make label` first or set data=...")
    try:
        data = load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as exc:
        raise RecordError(f"{path}: not a saved datasets.DatasetDict ({exc})") from None
    except IndexError:  # datasets cannot reload a split that was saved with zero rows
        raise RecordError(f"{path}: a split has no data files (saved empty?); relabel or drop that split") from None
    if not isinstance(data, DatasetDict):
        raise RecordError(f"{path}: expected a DatasetDict with train/validation/test splits, got a single split")
    return data


def load_split(dataset: DataSpec | Path, split: str) -> list[dict[str, Any]]:
    """Records of one split from a saved DatasetDict directory or a labeling JSONL (records without a `split` field:
    the file is one split, returned whole), or from several of them (pooled in the order named)."""
    paths = data_paths(dataset)
    if len(paths) > 1:
        check_pool_disjoint({p: _conversations_by_split(p) for p in paths})
        return check_records([(f"{p} [{split}] record {i}", rec) for p in paths
                              for i, rec in enumerate(_load_one_split(p, split))])
    return _load_one_split(paths[0], split)


def check_pool_disjoint(pool: dict[str, dict[str | None, Any]]) -> None:
    """Several datasets pooled (`data: [a, b]`): a conversation in one split of one dataset and another split of
    another would put what the router is tested or validated on in its training data. `pool`: dataset -> split ->
    its records' conv_ids (split None: a JSONL whose records carry none, every split at once, which two such files
    may share as one file does). A conversation in two splits across datasets is a RecordError naming both datasets,
    the splits and the conversation."""
    seen: dict[str, tuple[str, str | None]] = {}
    for path, splits in pool.items():
        for split, conv_ids in splits.items():
            for conv in dict.fromkeys(str(c) for c in conv_ids):
                first = seen.setdefault(conv, (path, split))
                if first[0] != path and first[1] != split:
                    raise RecordError(
                        f"data: conversation {conv!r} is in split {first[1] or '(every split)'!r} of {first[0]} and in "
                        f"split {split or '(every split)'!r} of {path}; pooled datasets must keep each conversation "
                        "in one split (label them with one split by conversation), else the test leaks into training")


def _conversations_by_split(dataset: str | Path) -> dict[str | None, list[Any]]:
    """split -> the conv_ids of its records, for one dataset (a saved DatasetDict or a label-records JSONL)."""
    path = Path(dataset)
    if path.is_dir() and (path / "dataset_dict.json").is_file():
        from datasets import Dataset

        splits = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
        return {s: Dataset.load_from_disk(str(path / s))["conv_id"] for s in splits
                if any((path / s).glob("*.arrow"))}
    if not path.is_file():
        return {}  # the split reader names what is wrong with it
    out: dict[str | None, list[Any]] = {}
    for _, rec in jsonl_label_records(path):
        out.setdefault(rec.get("split"), []).append(rec.get("conv_id"))
    return out


def _load_one_split(dataset: str | Path, split: str) -> list[dict[str, Any]]:
    path = Path(dataset)
    if not path.exists():
        raise MissingFileError(
            f"label data not found: {path} (label dataset not found: run `make label` first, or point the stage at one)"
        )
    if path.is_dir():
        from datasets import Dataset

        index = path / "dataset_dict.json"
        if not index.is_file():
            raise ConfigError(f"{path}: not a saved DatasetDict (no dataset_dict.json)")
        splits = json.loads(index.read_text()).get("splits", [])
        if split not in splits:
            raise ConfigError(f"{path}: no split {split!r}; splits: {sorted(splits)}")
        # Load only the split asked for: datasets 5.2 cannot reload an empty split (no arrow file),
        # which would make a whole DatasetDict unloadable for want of, say, an empty test split.
        if not any((path / split).glob("*.arrow")):
            return []
        rows = Dataset.load_from_disk(str(path / split)).to_list()
        return check_records([(f"{path} [{split}] record {i}", rec) for i, rec in enumerate(rows)])
    return check_records([(where, rec) for where, rec in jsonl_label_records(path) if rec.get("split", split) == split])


def jsonl_label_records(path: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """(where, record) for every line of a label-records JSONL, `where` naming the file and line: the one reader
    of such files (eval, calibrate, training, audit, unit-reader)."""
    located = []
    for n, rec in jsonl_records(read_utf8(path, RecordError), path, RecordError):
        if not isinstance(rec, dict):
            raise RecordError(f"{path}: line {n}: a label record must be a JSON object, got {type(rec).__name__}")
        located.append((f"{path}: line {n}", rec))
    return located


def text(record: Mapping[str, Any], name: str, where: str, allow_none: bool = False) -> str | None:
    value = field(record, name, where)
    if not (isinstance(value, str) or (allow_none and value is None)):
        raise RecordError(f"{where}: field {name!r} must be a string{' or null' if allow_none else ''}, got {value!r}")
    return value


def record_key(record: Mapping[str, Any], where: str) -> tuple[str, str]:
    """(conv_id, qid), both strings: an id given as a number in one record and a string in another would make two
    keys of one question, or one key of two."""
    return text(record, "conv_id", where), text(record, "qid", where)  # type: ignore[return-value]


def action_label(record: Mapping[str, Any], where: str, allow_none: bool = True) -> str | None:
    value = field(record, "label", where)
    if value not in ("ANSWER", "ESCALATE") and not (allow_none and value is None):
        raise RecordError(f"{where}: field 'label' must be ANSWER or ESCALATE{' or null' if allow_none else ''}, "
                          f"got {value!r}")
    return value


def summary_units(record: Mapping[str, Any], where: str, name: str = "router_summaries") -> list[dict[str, Any]]:
    units = field(record, name, where)
    if not isinstance(units, list):
        raise RecordError(f"{where}: field {name!r} must be a list of summary objects, got {type(units).__name__}")
    for j, unit in enumerate(units):
        if not isinstance(unit, dict):
            raise RecordError(f"{where}: field '{name}[{j}]' must be an object, got {unit!r}")
        text(unit, "text", f"{where}: field '{name}[{j}]'")
        if not isinstance(unit.get("date"), str | None):
            raise RecordError(f"{where}: field '{name}[{j}].date' must be a string or null, got {unit['date']!r}")
    return units


def check_records(located: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The records of (where, record) pairs, after the checks every consumer relies on, each failure naming the
    file and line (or split and record) and the field:

    - (conv_id, qid) is a record's key, unique in a split: a key seen twice is refused with both places named
      (which copy's verdicts to keep is not ours to guess; docs/formats.md, "Label record");
    - `question` and `label` are present and `router_summaries` is a list (what every router reads);
    - each `router_summaries[j].score` is absent/null or a retrieval score in its range (tiermem.settings.ranges: a NaN,
      an infinity or a 1e308 would otherwise decide a score router's output alone).
    """
    seen: dict[tuple[Any, Any], str] = {}
    for where, rec in located:
        if "conv_id" in rec and "qid" in rec:
            key = (rec["conv_id"], rec["qid"])
            if key in seen:
                raise RecordError(f"{where}: duplicate record (conv_id={key[0]!r}, qid={key[1]!r}); first at "
                                  f"{seen[key]}")
            seen[key] = where
        field(rec, "question", where)
        summaries = field(rec, "router_summaries", where)
        if not isinstance(summaries, list):
            raise RecordError(f"{where}: field 'router_summaries' must be a list, got {type(summaries).__name__}")
        field(rec, "label", where)
        for j, unit in enumerate(summaries):
            if isinstance(unit, Mapping) and unit.get("score") is not None:
                retrieval_score(unit["score"], f"{where}: field 'router_summaries[{j}].score'", RecordError)
    return [rec for _, rec in located]
