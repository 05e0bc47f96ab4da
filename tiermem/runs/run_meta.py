"""`tiermem_router.json` beside every router checkpoint (fields: docs/formats.md), its only reader and writer
(`RunMetaFile`: one read, one write per stage), and the sha256 of every weight file, checked before a load."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tiermem.runs.safe_io import read_json_state, write_atomic
from tiermem.settings.errors import MissingFileError, StoreError, UsageError
from tiermem.settings.ranges import is_number

RUN_META_FILE = "tiermem_router.json"
CARD_FILE = "README.md"  # the model card (serving.model_card)
_REQUIRED = ("contract_version", "base_model")
_TEXT, _OBJECT = (str, "a non-empty string"), (dict, "an object")
_TYPED = {"contract_version": _TEXT, "base_model": _TEXT, "stage": _TEXT, "router_kind": _TEXT,
          "adapter": (bool, "true or false"), "training": _OBJECT, "data": _OBJECT, "metrics": _OBJECT}
FEATURE_MODEL_FILE = "feature_model.json"  # the features router's fitted model (serving/feature_router.py)
SIGNAL_HEAD_FILE = "signal_head.json"  # an LM router's signal head (serving/signals.py), beside its adapter
ADAPTER_CONFIG = "adapter_config.json"  # PEFT's: rank, alpha, target modules and layers of the adapter weights
# What a loader may read as weights: PEFT adapters and config, transformers checkpoints, the feature model; not
# training_args.bin (a trainer pickle no loader reads) nor trunk caches (*.pt: recorded in data.trunk_states).
_WEIGHT_PATTERNS = (re.compile(r".+\.safetensors"), re.compile(r"adapter_model\.bin"),
                    re.compile(r"pytorch_model(-\d+-of-\d+)?\.bin"), re.compile(re.escape(FEATURE_MODEL_FILE)),
                    re.compile(re.escape(SIGNAL_HEAD_FILE)), re.compile(re.escape(ADAPTER_CONFIG)))
_SHA256 = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


class RunMetaError(UsageError):
    """A missing or malformed tiermem_router.json (the message names the file and the field): exit 2."""


class IntegrityError(StoreError):
    """A router file that is missing, unrecorded or differs from the sha256 tiermem_router.json recorded for it."""


@dataclass
class RunMeta:
    contract_version: str
    base_model: str  # model spec for tiermem.models.specs.load_causal_lm (packaged:..., local dir or hub id)
    stage: str = "sft"  # which stage produced the run: sft | grpo | features | top1-score
    adapter: bool = True  # True: a PEFT adapter over base_model; False: merged full weights in the run dir
    training: dict[str, Any] = field(default_factory=dict)  # the recipe's config, as saved
    data: dict[str, Any] = field(default_factory=dict)  # dataset path / hub id, label_rule, split sizes
    metrics: dict[str, Any] = field(default_factory=dict)  # e.g. {"validation": {"accuracy": ..}}
    calibration: dict[str, Any] | None = None  # written by evaluation.calibrate
    files: dict[str, str] | None = None  # weight file name -> sha256 (file_digests); None: saved before digests
    # which router the directory holds: "local" (a LoRA/merged LM), else a serving.router kind (features, top1-score)
    router_kind: str = "local"
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept verbatim


def read_run_meta(run_dir: str | Path) -> RunMeta:
    path = Path(run_dir) / RUN_META_FILE
    if not path.is_file():
        raise MissingFileError(f"{path} not found: not a tiermem router run directory (make sft writes one)")
    return run_meta_from_dict(read_json_state(path, RunMetaError, RUN_META_FILE, "retrain the router"), path)


def run_meta_from_dict(raw: Any, path: str | Path) -> RunMeta:
    """A RunMeta from tiermem_router.json's parsed JSON, every field checked (`path` names it in errors)."""
    if not isinstance(raw, dict):
        raise RunMetaError(f"{path}: top level must be an object")
    missing = [k for k in _REQUIRED if not isinstance(raw.get(k), str) or not raw.get(k)]
    if missing:
        raise RunMetaError(f"{path}: missing or empty field(s) {missing}")
    known = set(RunMeta.__dataclass_fields__) - {"extra"}
    extra = {k: v for k, v in raw.items() if k not in known}
    values = {k: v for k, v in raw.items() if k in known}
    meta = RunMeta(**values, extra=extra)
    validate_run_meta(meta, path)
    return meta


def meta_digest(meta: RunMeta) -> str:
    """sha256 of the metadata as RunMetaFile.save writes it: eval.json records the digest of the router it evaluated,
    so push puts on the card only an evaluation of the router as it is."""
    data = asdict(meta)
    data.update(data.pop("extra"))
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _is_count(value: Any, minimum: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def validate_run_meta(meta: RunMeta, where: str | Path = RUN_META_FILE) -> None:
    """Every field a loader reads, checked (RunMetaError names file and field); `metrics`, `training`: type only."""

    def bad(field_name: str, problem: str) -> RunMetaError:
        return RunMetaError(f"{where}: field {field_name!r} {problem}")

    for name, (kind, what) in _TYPED.items():
        value = getattr(meta, name)
        if not isinstance(value, kind) or (kind is str and not value):
            raise bad(name, f"must be {what}, got {value!r}")
    router_input = meta.data.get("router_input")
    if router_input is not None:
        if not isinstance(router_input, dict):
            raise bad("data.router_input", f"must be an object, got {router_input!r}")
        # top_k 0 is what training records for a split without summaries; loaders read it as "no limit"
        if "top_k" in router_input and not _is_count(router_input["top_k"]):
            raise bad("data.router_input.top_k", f"must be a non-negative integer, got {router_input['top_k']!r}")
        for key in ("max_summaries", "max_summary_chars"):
            if key in router_input and not _is_count(router_input[key], 1):
                raise bad(f"data.router_input.{key}", f"must be a positive integer, got {router_input[key]!r}")
    cal = meta.calibration
    if cal is not None:
        if not isinstance(cal, dict):
            raise bad("calibration", f"must be an object or null, got {cal!r}")
        logit = cal.get("threshold_logit")
        if logit is not None and not (is_number(logit) and math.isfinite(logit)):
            raise bad("calibration.threshold_logit", f"must be a finite log-odds number or null, got {logit!r}")
        if "threshold" in cal:
            raise bad("calibration.threshold", "is not a field: the stored threshold is calibration.threshold_logit "
                                               "(log-odds); recalibrate")
    clash = sorted(set(meta.extra) & set(RunMeta.__dataclass_fields__))
    if clash:
        raise bad("extra", f"holds {clash}, which are fields of RunMeta: set them as fields")
    model_file = meta.extra.get("feature_model")
    if model_file is not None and model_file != FEATURE_MODEL_FILE:
        raise bad("feature_model", f"must be {FEATURE_MODEL_FILE!r}, got {model_file!r}")
    if meta.files is not None:
        if not isinstance(meta.files, dict):
            raise bad("files", f"must be an object of file name -> sha256, got {type(meta.files).__name__}")
        for name, digest in meta.files.items():
            if not _is_weight_name(name):
                raise bad("files", f"names {name!r}, which is not a weight file of the run directory")
            if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
                raise bad(f"files.{name}", f"must be a lowercase hex sha256, got {digest!r}")


def _is_weight_name(name: Any) -> bool:
    # top-level names only: a recorded name never reaches outside the run directory
    return (isinstance(name, str) and "/" not in name and "\\" not in name and name not in (".", "..")
            and any(p.fullmatch(name) for p in _WEIGHT_PATTERNS))


def weight_files(run_dir: str | Path) -> list[str]:
    """The files of a run directory that a router loader reads as weights or a fitted model, sorted."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    return sorted(p.name for p in run_dir.iterdir() if p.is_file() and _is_weight_name(p.name))


def sha256_file(path: str | Path) -> str:
    """Streamed in 1 MiB chunks: a merged checkpoint is never read into memory whole."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_digests(run_dir: str | Path) -> dict[str, str]:
    """The `files` field: sha256 of every weight file in the run directory (empty for a router without one)."""
    return {name: sha256_file(Path(run_dir) / name) for name in weight_files(run_dir)}


def verify_files(run_dir: str | Path, meta: RunMeta) -> None:
    """Check every recorded digest before a loader opens the files; raise IntegrityError naming the file. A weight
    file with no recorded digest (`files` absent: saved before digests) is refused: nothing says training wrote it."""
    run_dir = Path(run_dir)
    recorded = meta.files or {}
    for name, expected in recorded.items():
        path = run_dir / name
        if not path.is_file():
            raise IntegrityError(f"{path}: missing, but {RUN_META_FILE} records it (sha256 {expected}); the run "
                                 "directory is incomplete")
        actual = sha256_file(path)
        if actual != expected:
            raise IntegrityError(f"{path}: sha256 {actual} differs from the {expected} recorded in {RUN_META_FILE}: "
                                 "the file changed after the router was saved; restore it or retrain")
    unrecorded = [name for name in weight_files(run_dir) if name not in recorded]
    if unrecorded:
        raise IntegrityError(f"{run_dir}: weight file(s) {unrecorded} are not recorded in {RUN_META_FILE} files; "
                             "remove them or re-save the router (retrain, or rerun fit-features)")


def meta_json(meta: RunMeta) -> str:
    """tiermem_router.json's text for `meta` (what RunMetaFile.save writes and push uploads)."""
    data = asdict(meta)
    data.update(data.pop("extra"))
    return json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"


class RunMetaChanged(StoreError):
    """tiermem_router.json changed on disk after this operation read it: writing ours would lose that change."""


def _stamp(path: Path) -> tuple[int, int, int] | None:
    # every write is write-then-rename, so a rewrite changes the inode even within one mtime tick
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class RunMetaFile:
    """One operation's hold on a run's tiermem_router.json: read and checked once (`open`), changed in memory
    (`.meta`), written once with the run's card (`save`), so no helper reads the file back or writes it apart."""

    def __init__(self, run_dir: str | Path, meta: RunMeta, seen: tuple[int, int, int] | None) -> None:
        self.run_dir, self.meta, self._seen = Path(run_dir), meta, seen

    @property
    def path(self) -> Path:
        return self.run_dir / RUN_META_FILE

    @classmethod
    def open(cls, run_dir: str | Path) -> RunMetaFile:
        path = Path(run_dir) / RUN_META_FILE
        seen = _stamp(path)  # before reading: a write that lands while we read is noticed at save
        return cls(run_dir, read_run_meta(run_dir), seen)

    @classmethod
    def new(cls, run_dir: str | Path, meta: RunMeta) -> RunMetaFile:
        """Metadata a stage made for the run directory it claimed (training, fit-features); replaces the file."""
        return cls(run_dir, meta, _stamp(Path(run_dir) / RUN_META_FILE))

    def save(self, card: Callable[[RunMeta], str] | None = None) -> Path:
        """Check, then write the card rendered from the metadata (`card`), then the metadata: written last, as
        it marks the run; a stage stopped between the two leaves a card whose digest the loader finds stale."""
        validate_run_meta(self.meta, self.path)
        if _stamp(self.path) != self._seen:
            raise RunMetaChanged(f"{self.path} changed on disk since this stage read it (another stage wrote it): "
                                 "not overwritten, so that change is kept; rerun this stage")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if card is not None:
            write_atomic(self.run_dir / CARD_FILE, card(self.meta))
        write_atomic(self.path, meta_json(self.meta))
        self._seen = _stamp(self.path)
        return self.path
