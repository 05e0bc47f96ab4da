"""What building a conversation's tiers needs beside the runtime: the tier cache key, a memory system's own units as
Tier 1, and the turn vectors, kept by content so a history's tier variants embed its turns once."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from tiermem.data.records import Conversation
from tiermem.llm import LLM
from tiermem.memory.memory_config import MemoryConfig
from tiermem.memory.raw_store import Page
from tiermem.memory.summaries import SummaryUnit, day_of, speakers_of
from tiermem.models.specs import spec_digest
from tiermem.runs.safe_io import write_atomic, write_stream
from tiermem.settings.errors import DataError

# The embedder's training length (all-MiniLM-L6-v2: 128 word pieces): a long turn's vector reads its opening, and a
# long history embeds in half the time. No LoCoMo turn is longer.
TURN_VECTOR_TOKENS = 128
TURN_VECTOR_CACHE = ".turn_vectors"
# Bump when pagination, page rendering or a summarizer changes its output: it is part of the tier cache key.
TIERS_VERSION = "tiers/6"  # 3: tier-1 units carry a sha256 (root hash in the manifest); 4: their speakers;
# 5: the turn vectors research ranks turns with (turns.npy, its sha256 in the manifest); 6: turn vectors read a
# turn's first TURN_VECTOR_TOKENS tokens; imported tier-1 units
log = logging.getLogger(__name__)


def imported_units(conv: Conversation, pages: list[Page]) -> list[SummaryUnit]:
    """The conversation's own units as Tier 1, linked to their source turns' pages; undated ones by the latest."""
    where: dict[str, list[str]] = {}
    turns: dict[str, Any] = {}
    order: dict[str, int] = {}
    for page in pages:
        for turn in page.turns:
            where.setdefault(turn.turn_id, [])
            if page.page_id not in where[turn.turn_id]:
                where[turn.turn_id].append(page.page_id)
            turns[turn.turn_id] = turn
            order.setdefault(turn.turn_id, len(order))
    units = []
    for unit in conv.summaries:
        missing = [t for t in unit.turn_ids if t not in where]
        if missing or not unit.turn_ids:  # bad data (a loader links every unit it keeps to a kept turn): named
            raise DataError(f"conversation {conv.conv_id!r}: summary unit {unit.unit_id!r} links to turn(s) "
                            f"{missing or '(none)'} that no page holds")
        page_ids = list(dict.fromkeys(p for t in unit.turn_ids for p in where[t]))
        date = unit.date or turns[max(unit.turn_ids, key=order.__getitem__)].timestamp
        units.append(SummaryUnit(unit.unit_id, unit.text, page_ids, list(unit.turn_ids), day_of(date), "imported",
                                 speakers_of(turns[t] for t in unit.turn_ids)))
    return units


def save_turn_vectors(path: Path, vectors: np.ndarray) -> str:
    """Write the turn vectors (float32, no pickle) and return the file's sha256."""
    write_stream(path, lambda fh: np.save(fh, np.asarray(vectors, dtype=np.float32), allow_pickle=False))
    return hashlib.sha256(path.read_bytes()).hexdigest()


SPOT_ROWS = 4  # rows of a cached entry embedded again before it is used
SPOT_TOLERANCE = 1e-4  # unit vectors: one turn embedded alone or in a batch agree far closer than this


def cached_turn_vectors(cache: Path | None, embedder: str, texts: list[str],
                        embed: Callable[[list[str]], np.ndarray], tiers_version: str) -> np.ndarray:
    """The turn vectors of `texts` (`embed(texts)`), read from `cache` when an earlier build of the same turns with
    the same embedder (`embedder`: its spec digest) wrote them, else computed and kept there, so a history's tier
    variants embed its turns once. Which entry is used: docs/formats.md, "The turn-vector cache"; anything else is
    rebuilt and replaced, never copied into a tier."""
    if cache is None:
        return embed(texts)
    key = hashlib.sha256(json.dumps([tiers_version, embedder, TURN_VECTOR_TOKENS, texts], ensure_ascii=False)
                         .encode("utf-8")).hexdigest()
    path, digest = cache / f"{key}.npy", cache / f"{key}.sha256"
    found = _read_entry(path, digest, len(texts))
    if isinstance(found, np.ndarray):
        rows = sorted({0, len(texts) - 1, *np.linspace(0, len(texts) - 1, SPOT_ROWS).round().astype(int).tolist()})
        fresh = np.asarray(embed([texts[i] for i in rows]), dtype=np.float32)
        if fresh.shape == (len(rows), found.shape[1]) and np.allclose(found[rows], fresh, rtol=0,
                                                                      atol=SPOT_TOLERANCE):
            return found
        found = "its rows are not this embedder's vectors of these turns (width or values differ)"
    if found is not None:
        log.warning("%s: cached turn vectors not used (%s); computing them again", path, found)
    vectors = embed(texts)
    _store(cache, path, digest, vectors)
    return vectors


def _plain_file(path: Path) -> bool:
    return not path.is_symlink() and path.is_file()


def _read_entry(path: Path, digest: Path, rows: int) -> np.ndarray | str | None:
    """The entry's vectors, None when there is none, else why it cannot be used."""
    if not path.exists() and not path.is_symlink() and not digest.exists() and not digest.is_symlink():
        return None
    if not _plain_file(path) or not _plain_file(digest):
        return "the entry or its digest is not a plain file"
    try:
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != digest.read_text(encoding="utf-8").strip():
            return "the file does not match its digest"
        vectors = np.load(io.BytesIO(data), allow_pickle=False)
    except (OSError, UnicodeDecodeError, ValueError, EOFError) as exc:
        return f"unreadable ({type(exc).__name__})"
    if vectors.dtype != np.float32 or vectors.ndim != 2 or vectors.shape[0] != rows or not vectors.shape[1] \
            or not np.isfinite(vectors).all():
        return f"float32 rows of one finite vector per turn expected, found {vectors.dtype} {vectors.shape}"
    return vectors


def _store(cache: Path, path: Path, digest: Path, vectors: np.ndarray) -> None:
    """Keep `vectors` as the entry, replacing a bad one in the way; a cache that is no folder keeps nothing (logged)."""
    if cache.is_symlink() or (cache.exists() and not cache.is_dir()):
        log.warning("%s: not a folder; turn vectors are not kept", cache)
        return
    cache.mkdir(parents=True, exist_ok=True)
    for old in (path, digest):
        if old.is_symlink() or (old.exists() and not old.is_file()):  # a folder or link where a file goes
            aside = Path(tempfile.mkdtemp(prefix=f".{old.name}.bad.", dir=cache))
            os.replace(old, aside / "entry")
            shutil.rmtree(aside, ignore_errors=True)
    write_atomic(digest, save_turn_vectors(path, vectors))


def conversation_hash(conv: Conversation) -> str:
    blob = json.dumps([conv.conv_id, [asdict(t) for t in conv.turns]], ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def imports_units(conv: Conversation, cfg: MemoryConfig) -> bool:
    """Whether this conversation's Tier 1 is its own units (memory.summaries=imported and it brings some)."""
    return cfg.summaries == "imported" and bool(conv.summaries)


def tier_key(conv: Conversation, cfg: MemoryConfig, summarizer_llm: LLM | None = None) -> str:
    """Hash of the conversation and every setting that shapes its tiers (the tier cache key)."""
    spec: dict[str, Any] = {"version": TIERS_VERSION, "conversation": conversation_hash(conv),
                            "tiers": cfg.tier_fields()}
    # a local model folder is keyed by what it holds: changed in place, it builds new tiers (packaged: unchanged)
    local = {k: d for k in ("tokenizer", "embedder") if (d := spec_digest(getattr(cfg, k))) != getattr(cfg, k)}
    if local:
        spec["model_digests"] = local
    if imports_units(conv, cfg):  # the summarizer's settings then shape nothing; the units do
        spec["tiers"] = {k: v for k, v in spec["tiers"].items()
                         if k in ("page_tokens", "tokenizer", "summaries", "embedder")}
        spec["imported"] = hashlib.sha256(json.dumps([asdict(u) for u in conv.summaries], ensure_ascii=False)
                                          .encode("utf-8")).hexdigest()
    elif cfg.summarizer == "llm":
        spec["summarizer_llm"] = getattr(summarizer_llm, "name", None)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
