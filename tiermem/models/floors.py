"""The reader's files the package writes and reads back (`reader_pretrain.json`, `answer_floor.json`): one reader
per file, a ReaderFileError naming the file and how to rebuild it, and a floor used only when bound to its weights."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

from tiermem.models.cross_encoder import PRETRAIN_FILE  # a reader-pretrain checkpoint's metadata
from tiermem.runs.run_meta import sha256_file
from tiermem.runs.safe_io import read_json_state
from tiermem.settings.errors import ConfigError, StoreError

FLOOR_FILE = "answer_floor.json"  # router_train.reader.answer_floor writes it
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # a reader's weights, in the order transformers loads them
CALIBRATE = "tiermem-router answer-floor reader={path}"  # router_train.reader.chat_floor: calibrated on conversations
REBUILD_PRETRAIN = "rebuild the checkpoint: tiermem-router reader-pretrain output_dir={path} (or a new output_dir)"


class ReaderFileError(StoreError):
    """A reader's metadata file that is unreadable or not of its shape (the message says how to rebuild it)."""


def _rebuild(path: Path) -> str:
    if path.name == FLOOR_FILE:
        return "calibrate it again: " + CALIBRATE.format(path=path.parent)
    return REBUILD_PRETRAIN.format(path=path.parent)


def read_json_object(path: str | Path) -> dict[str, Any]:
    """The JSON object in `path`; anything else is a ReaderFileError naming the file and how to rebuild it."""
    return read_json_state(path, ReaderFileError, "reader file", _rebuild(Path(path)))


def _bad(path: Path, field: str, want: str, got: Any) -> ReaderFileError:
    return ReaderFileError(f"{path}: field {field!r} must be {want}, got {json.dumps(got)[:80]}; {_rebuild(path)}")


def floor_number(value: Any, path: Path, field: str) -> float:
    """A floor as stored: a finite JSON number, never a bool or a string."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(path, field, "a finite number", value)
    return float(value)


_PRETRAIN_FIELDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "data": (str, "a string"), "data_sha256": (str, "a string"), "config": (dict, "an object"),
    "heldout": (dict, "an object"), "heldout_articles": (list, "a list of article titles"),
    "train_pairs": (int, "a whole number"), "seconds": ((int, float), "a number"),
}


def read_pretrain_meta(directory: str | Path, need: tuple[str, ...] = ()) -> dict[str, Any]:
    """`directory/reader_pretrain.json`, every field it has of the right type and every field in `need` present."""
    path = Path(directory) / PRETRAIN_FILE
    meta = read_json_object(path)
    for field, (kind, want) in _PRETRAIN_FIELDS.items():
        if field not in meta:
            if field in need:
                raise ReaderFileError(f"{path}: missing field {field!r}; {_rebuild(path)}")
            continue
        value = meta[field]
        if isinstance(value, bool) or not isinstance(value, kind):
            raise _bad(path, field, want, value)
    if not all(isinstance(t, str) for t in meta.get("heldout_articles", [])):
        raise _bad(path, "heldout_articles", "a list of article titles", meta["heldout_articles"])
    stored = meta.get("heldout", {}).get("answer_floor")
    if stored is not None:
        if not isinstance(stored, dict):
            raise _bad(path, "heldout.answer_floor", "an object", stored)
        floor_number(stored.get("floor"), path, "heldout.answer_floor.floor")
    return meta


def weights_file(directory: str | Path) -> Path:
    """The file a reader's weights are in (what a floor is bound to)."""
    for name in WEIGHT_FILES:
        if (Path(directory) / name).is_file():
            return Path(directory) / name
    raise ConfigError(f"{directory}: no reader weights ({' or '.join(WEIGHT_FILES)}); a reader directory is a "
                      "reader-pretrain checkpoint or a unit-reader run")


def weights_sha256(directory: str | Path) -> str:
    return sha256_file(weights_file(directory))


def _bound_floor(stored: dict[str, Any], path: Path, field: str, digest: str) -> float:
    floor = floor_number(stored.get("floor"), path, f"{field}floor")
    bound = stored.get("reader_weights_sha256")
    if bound is None:  # (a pretrain checkpoint from before floors were bound to their weights)
        raise ConfigError(f"{path}: its {field}floor names no weights it was calibrated for (reader_weights_sha256); "
                          f"calibrate again: {CALIBRATE.format(path=path.parent)}")
    if bound != digest:
        raise ConfigError(f"{path}: its floor was calibrated for other weights than {weights_file(path.parent)}; "
                          f"calibrate again: {CALIBRATE.format(path=path.parent)}")
    return floor


def load_floor(path: str | Path) -> float:
    """The calibrated floor of the reader in `path`: `answer_floor.json`, else `reader_pretrain.json`'s
    `heldout.answer_floor`, each used only when bound to the digest of the weights in `path`. Read once per state
    of the directory's files (a router's reader is looked up on every question)."""
    path = Path(path)
    state = tuple((f.stat().st_mtime_ns, f.stat().st_size) if f.is_file() else None
                  for f in (path / FLOOR_FILE, path / PRETRAIN_FILE, *(path / w for w in WEIGHT_FILES)))
    return _load_floor(path, state)


@functools.lru_cache(maxsize=8)
def _load_floor(path: Path, state: tuple[Any, ...]) -> float:
    floor_file, pretrain = path / FLOOR_FILE, path / PRETRAIN_FILE
    digest = weights_sha256(path)
    if floor_file.is_file():
        return _bound_floor(read_json_object(floor_file), floor_file, "", digest)
    if pretrain.is_file():
        stored = read_pretrain_meta(path).get("heldout", {}).get("answer_floor")
        if stored is not None:
            return _bound_floor(stored, pretrain, "heldout.answer_floor.", digest)
    raise ConfigError(f"{path}: the reader has no calibrated answer floor (no {FLOOR_FILE}, no heldout.answer_floor "
                      f"in {PRETRAIN_FILE}); calibrate it: {CALIBRATE.format(path=path)}"
                      + ("" if pretrain.is_file() else " pretrain=runs/reader_pretrain"))
