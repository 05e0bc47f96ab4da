"""reader-pretrain's cache entries (`$TIERMEM_CACHE/readers/<key>`): a hit only for an entry that proves itself."""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tiermem.models.cache import check_entry, publish, seal
from tiermem.models.floors import ReaderFileError, load_floor, read_pretrain_meta
from tiermem.settings.errors import ConfigError

NEEDED = ("data", "data_sha256", "config", "heldout", "heldout_articles", "train_pairs", "seconds")
FORMAT_VERSION = 2  # bump when the pairs or the training change meaning: old cache entries stop matching
# what the cache key leaves out: where things go and how progress is shown change no weight
_NOT_IN_KEY = ("data", "chat_data", "output_dir", "cache", "log_every", "score_batch_size")


def _say(text: str) -> None:
    print(f"reader-pretrain: {text}", file=sys.stderr, flush=True)


def entry_problem(entry: Path) -> str | None:
    """None for an entry that is a hit; else why it is not, in words."""
    why = check_entry(entry, deep=True)
    if why is None:
        try:
            read_pretrain_meta(entry, need=NEEDED)
            load_floor(entry)
        except (ReaderFileError, ConfigError) as exc:
            why = str(exc)
    return why


def lookup(entry: Path | None) -> bool:
    """True for a verified hit; a present entry that fails its check is said to be rebuilt."""
    if entry is None:
        return False
    why = entry_problem(entry)
    if why is not None and (entry.exists() or entry.is_symlink()):
        _say(f"cache entry {entry} failed its check ({why}): a miss, rebuilding it")
    return why is None


def store(tmp: Path, entry: Path) -> None:
    """Seal a fresh build and publish it as `entry`; another run's complete entry published first is taken."""
    seal(tmp)
    if not publish(tmp, entry):
        _say(f"another run stored {entry} first (verified): using its entry")


def weights_digest(model_dir: Path) -> str:
    """sha256 over the weight files of a model directory, in name order."""
    h = hashlib.sha256()
    for name in sorted(p.name for p in model_dir.iterdir() if p.suffix in (".safetensors", ".bin")):
        with open(model_dir / name, "rb") as fh:
            for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def cache_key(cfg: Any, data_sha256: str, base_digest: str) -> str:
    """The entry's name: a digest of the format version, data, base weights and every setting that can change a
    weight."""
    settings = {k: v for k, v in asdict(cfg).items() if k not in _NOT_IN_KEY}
    blob = json.dumps({"version": FORMAT_VERSION, "data_sha256": data_sha256, "base_weights_sha256": base_digest,
                       "settings": settings}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]
