"""What building a conversation's tiers needs beside the runtime: a memory system's own units as Tier 1, and the
turn vectors, kept by content so a history's tier variants embed its turns once."""

from __future__ import annotations

import hashlib
import io
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from tiermem.data.records import Conversation
from tiermem.memory.raw_store import Page
from tiermem.memory.summaries import SummaryUnit, day_of, speakers_of
from tiermem.runs.safe_io import write_atomic, write_stream

# The embedder's training length (all-MiniLM-L6-v2: 128 word pieces): a long turn's vector reads its opening, and a
# long history embeds in half the time. No LoCoMo turn is longer.
TURN_VECTOR_TOKENS = 128
TURN_VECTOR_CACHE = ".turn_vectors"
log = logging.getLogger(__name__)


def imported_units(conv: Conversation, pages: list[Page]) -> list[SummaryUnit]:
    """The conversation's own units as Tier 1, each linked to the pages holding its source turns."""
    where: dict[str, list[str]] = {}
    turns: dict[str, Any] = {}
    for page in pages:
        for turn in page.turns:
            where.setdefault(turn.turn_id, [])
            if page.page_id not in where[turn.turn_id]:
                where[turn.turn_id].append(page.page_id)
            turns[turn.turn_id] = turn
    units = []
    for unit in conv.summaries:
        missing = [t for t in unit.turn_ids if t not in where]
        if missing or not unit.turn_ids:
            raise ValueError(f"conversation {conv.conv_id!r}: summary unit {unit.unit_id!r} links to turn(s) "
                             f"{missing or '(none)'} that no page holds")
        page_ids = list(dict.fromkeys(p for t in unit.turn_ids for p in where[t]))
        date = unit.date or turns[unit.turn_ids[-1]].timestamp
        units.append(SummaryUnit(unit.unit_id, unit.text, page_ids, list(unit.turn_ids), day_of(date), "imported",
                                 speakers_of(turns[t] for t in unit.turn_ids)))
    return units


def save_turn_vectors(path: Path, vectors: np.ndarray) -> str:
    """Write the turn vectors (float32, no pickle) and return the file's sha256."""
    write_stream(path, lambda fh: np.save(fh, np.asarray(vectors, dtype=np.float32), allow_pickle=False))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cached_turn_vectors(cache: Path | None, embedder: str, texts: list[str], compute: Any,
                        tiers_version: str) -> np.ndarray:
    """The turn vectors of `texts`, read from `cache` when an earlier build of the same turns with the same embedder
    wrote them (checked by digest, shape and finiteness; anything else is recomputed), else computed and kept there.
    A history's tier variants (imported or extractive Tier 1, other summarizer settings) then embed its turns once."""
    if cache is None:
        return compute()
    key = hashlib.sha256(json.dumps([tiers_version, embedder, TURN_VECTOR_TOKENS, texts], ensure_ascii=False)
                         .encode("utf-8")).hexdigest()
    path, digest = cache / f"{key}.npy", cache / f"{key}.sha256"
    if path.is_file() and digest.is_file():
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() == digest.read_text(encoding="utf-8").strip():
            vectors = np.load(io.BytesIO(data), allow_pickle=False)
            if vectors.ndim == 2 and vectors.shape[0] == len(texts) and np.isfinite(vectors).all():
                return vectors
        log.warning("%s: cached turn vectors do not match their digest or shape; computing them again", path)
    vectors = compute()
    cache.mkdir(parents=True, exist_ok=True)
    write_atomic(digest, save_turn_vectors(path, vectors))
    return vectors
