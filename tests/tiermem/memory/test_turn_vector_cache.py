"""A history's tier variants embed its turns once: turn vectors are kept by content in the tiers root; an imported
Tier 1 embeds its turns on demand, each once."""

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


def _build(root, conv, summaries, embedder, keep_ratio=CFG.keep_ratio):
    cfg = dataclasses.replace(CFG, summaries=summaries, page_tokens=40, keep_ratio=keep_ratio)
    return MemoryRuntime.open_or_build(root, conv, cfg, share_turn_vectors=True, embedder=embedder,
                                       count_tokens=whitespace_tokens)


def test_the_second_tier_variant_reads_the_turn_vectors_the_first_wrote(tmp_path):
    conv = load_realmem(write(tmp_path / "rm"))[0]
    first, second = CountingEmbedder(), CountingEmbedder()
    one = _build(tmp_path / "tiers", conv, "extractive", first, keep_ratio=0.4)
    other = _build(tmp_path / "tiers", conv, "extractive", second)
    rows = len(one.memory.turns.rows)
    assert first.texts == len(one.memory.summaries) + rows  # units, then every turn piece
    # its units, and the few rows the cached entry is spot-checked by: the turns came from the cache
    assert rows > SPOT_ROWS and second.texts == len(other.memory.summaries) + SPOT_ROWS
    assert np.array_equal(one.memory.turns.vectors, other.memory.turns.vectors)


def test_an_imported_tier1_embeds_its_turns_on_demand_each_once_as_the_built_one_would(tmp_path):
    conv = load_realmem(write(tmp_path / "rm"))[0]
    counter = CountingEmbedder()
    imported = _build(tmp_path / "tiers", conv, "imported", counter)
    assert counter.texts == len(conv.summaries) and imported.memory.turns.vectors is None  # no turn at the build
    turns = imported.memory.turns
    early = imported.memory.as_of(turns.rows[3][1].turn_id)
    early.search_turns("ski pass", 5)
    assert counter.texts == len(conv.summaries) + 1 + 3  # the query, and only the three turns said before
    imported.memory.search_turns("ski pass", 5)
    imported.memory.search_turns("lodge", 5)
    rows = len(turns.rows)
    assert counter.texts == len(conv.summaries) + 1 + 3 + 1 + (rows - 3) + 1  # every other turn once
    built = _build(tmp_path / "tiers", conv, "extractive", CountingEmbedder())
    assert np.allclose(turns.vectors, built.memory.turns.vectors, atol=1e-6)
    assert [h.turn.turn_id for h in imported.memory.search_turns("lodge", 5)] == [
        h.turn.turn_id for h in built.memory.search_turns("lodge", 5)]


def test_without_sharing_nothing_is_kept_beside_the_tiers(tmp_path):
    conv = load_realmem(write(tmp_path / "rm"))[0]
    cfg = dataclasses.replace(CFG, page_tokens=40)
    MemoryRuntime.open_or_build(tmp_path / "tiers", conv, cfg, embedder=CountingEmbedder(),
                                count_tokens=whitespace_tokens)
    assert not (tmp_path / "tiers" / TURN_VECTOR_CACHE).exists()


def test_a_cached_file_that_does_not_match_its_digest_is_computed_again(tmp_path):
    conv = load_realmem(write(tmp_path / "rm"))[0]
    _build(tmp_path / "tiers", conv, "extractive", CountingEmbedder(), keep_ratio=0.4)
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
