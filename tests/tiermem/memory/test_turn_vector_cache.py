"""A history's tier variants embed its turns once: turn vectors are kept by content in the tiers root."""

import dataclasses

import numpy as np

from tests.helpers.memory_runtime import CFG
from tests.helpers.realmem_fixture import write
from tiermem.data.realmem import load_realmem
from tiermem.memory.raw_store import whitespace_tokens
from tiermem.memory.runtime import TURN_VECTOR_CACHE, MemoryRuntime
from tiermem.memory.summaries import HashingEmbedder
from tiermem.memory.tier_build import SPOT_ROWS


class CountingEmbedder(HashingEmbedder):
    def __init__(self):
        super().__init__()
        self.texts = 0

    def encode(self, sentences, **kwargs):
        self.texts += len(sentences)
        return super().encode(sentences, **kwargs)


def _build(root, conv, summaries, embedder):
    cfg = dataclasses.replace(CFG, summaries=summaries, page_tokens=40)
    return MemoryRuntime.open_or_build(root, conv, cfg, share_turn_vectors=True, embedder=embedder,
                                       count_tokens=whitespace_tokens)


def test_the_second_tier_variant_reads_the_turn_vectors_the_first_wrote(tmp_path):
    conv = load_realmem(write(tmp_path / "rm"))[0]
    first, second = CountingEmbedder(), CountingEmbedder()
    imported = _build(tmp_path / "tiers", conv, "imported", first)
    extractive = _build(tmp_path / "tiers", conv, "extractive", second)
    rows = len(imported.memory.turns.rows)
    assert first.texts == len(conv.summaries) + rows  # units, then every turn piece
    # its units, and the few rows the cached entry is spot-checked by: the turns came from the cache
    assert rows > SPOT_ROWS and second.texts == len(extractive.memory.summaries) + SPOT_ROWS
    assert np.array_equal(imported.memory.turns.vectors, extractive.memory.turns.vectors)


def test_without_sharing_nothing_is_kept_beside_the_tiers(tmp_path):
    conv = load_realmem(write(tmp_path / "rm"))[0]
    cfg = dataclasses.replace(CFG, page_tokens=40)
    MemoryRuntime.open_or_build(tmp_path / "tiers", conv, cfg, embedder=CountingEmbedder(),
                                count_tokens=whitespace_tokens)
    assert not (tmp_path / "tiers" / TURN_VECTOR_CACHE).exists()


def test_a_cached_file_that_does_not_match_its_digest_is_computed_again(tmp_path):
    conv = load_realmem(write(tmp_path / "rm"))[0]
    _build(tmp_path / "tiers", conv, "imported", CountingEmbedder())
    for path in (tmp_path / "tiers" / TURN_VECTOR_CACHE).glob("*.npy"):
        data = bytearray(path.read_bytes())
        data[-4:] = b"\x00\x00\xc0\x7f"  # a NaN where a coordinate was, digest left as it was
        path.write_bytes(bytes(data))
    again = CountingEmbedder()
    runtime = _build(tmp_path / "tiers", conv, "extractive", again)
    assert again.texts == len(runtime.memory.summaries) + len(runtime.memory.turns.rows)
    assert np.isfinite(runtime.memory.turns.vectors).all()


def test_a_manifest_naming_no_tier1_source_is_refused(tmp_path):
    import json

    import pytest

    from tiermem.memory.runtime import MANIFEST
    from tiermem.settings.errors import StoreError

    conv = load_realmem(write(tmp_path / "rm"))[0]
    runtime = _build(tmp_path / "tiers", conv, "imported", CountingEmbedder())
    runtime.close()
    path = runtime.workdir / MANIFEST
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "tier1": "made up"}))
    with pytest.raises(StoreError, match="field 'tier1'"):
        _build(tmp_path / "tiers", conv, "imported", CountingEmbedder())
