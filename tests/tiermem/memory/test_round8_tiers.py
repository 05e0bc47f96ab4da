"""Round eight (issue 66), the tiers: caches keyed by what made them (a local embedder folder by its content), a
tier directory opened only for the request it was built for, the shared turn-vector cache checked on read (kind,
shape, a few rows embedded again) and a bad entry rebuilt, never copied; an imported unit dated by its latest turn."""

import dataclasses
import hashlib
import json

import numpy as np
import pytest

from tests.helpers.memory_runtime import CFG
from tests.helpers.realmem_fixture import write
from tests.tiermem.memory.test_turn_vector_cache import CountingEmbedder
from tiermem.data.realmem import load_realmem
from tiermem.data.records import ImportedUnit
from tiermem.memory.raw_store import whitespace_tokens
from tiermem.memory.runtime import TURN_VECTOR_CACHE, MemoryRuntime, tier_key
from tiermem.settings.errors import StoreError


def _build(root, conv, counter=None, **cfg):
    cfg = dataclasses.replace(CFG, page_tokens=40, **cfg)
    return MemoryRuntime.open_or_build(root, conv, cfg, share_turn_vectors=True, embedder=counter or
                                       CountingEmbedder(), count_tokens=whitespace_tokens)


def _conv(tmp_path):
    return load_realmem(write(tmp_path / "rm"))[0]


def _entries(root):
    return sorted((root / TURN_VECTOR_CACHE).glob("*.npy"))


def test_a_local_embedder_folder_changed_in_place_builds_new_tiers_and_turn_vectors(tmp_path):
    conv, folder = _conv(tmp_path), tmp_path / "my-embedder"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights v1")
    first = _build(tmp_path / "tiers", conv, embedder=str(folder), summaries="extractive")
    first.close()
    (folder / "model.safetensors").write_bytes(b"weights v2")  # same path, other model
    again = CountingEmbedder()
    second = _build(tmp_path / "tiers", conv, again, embedder=str(folder), summaries="extractive")
    assert second.workdir != first.workdir
    assert again.texts == len(second.memory.summaries.units) + len(second.memory.turns.rows)  # nothing reused
    assert len(_entries(tmp_path / "tiers")) == 2


def test_a_tier_directory_built_for_another_request_is_refused(tmp_path):
    conv = _conv(tmp_path)
    extractive = _build(tmp_path / "tiers", conv, summaries="extractive")
    extractive.close()
    imported_dir = tmp_path / "tiers" / f"Aru_Test-{tier_key(conv, dataclasses.replace(CFG, page_tokens=40))[:16]}"
    extractive.workdir.rename(imported_dir)  # an extractive build where the imported one belongs
    with pytest.raises(StoreError, match="built for another request .*field 'tier_key'"):
        _build(tmp_path / "tiers", conv)
    manifest = json.loads((imported_dir / "manifest.json").read_text())
    manifest["tier_key"] = tier_key(conv, dataclasses.replace(CFG, page_tokens=40))  # the key forged, tier1 not
    (imported_dir / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(StoreError, match="field 'tier1' is 'built', this request's is 'imported'"):
        _build(tmp_path / "tiers", conv)


def test_the_turn_vector_cache_as_a_file_is_no_error(tmp_path):
    conv = _conv(tmp_path)
    (tmp_path / "tiers").mkdir()
    (tmp_path / "tiers" / TURN_VECTOR_CACHE).write_text("not a folder")
    runtime = _build(tmp_path / "tiers", conv, summaries="extractive")
    assert runtime.memory.turns.vectors.shape[0] == len(runtime.memory.turns.rows)


def test_an_entry_that_is_a_folder_is_replaced_by_the_rebuilt_file(tmp_path):
    conv = _conv(tmp_path)
    _build(tmp_path / "tiers", conv, summaries="extractive", keep_ratio=0.4).close()
    entry = _entries(tmp_path / "tiers")[0]
    entry.unlink()
    entry.mkdir()
    (entry / "x").write_text("?")
    runtime = _build(tmp_path / "tiers", conv, summaries="extractive")
    assert entry.is_file() and np.load(entry).shape == runtime.memory.turns.vectors.shape


def _forge(entry, vectors):
    """Vectors written where the entry was, with a digest that matches them (what the digest cannot catch)."""
    np.save(entry, vectors.astype(np.float32), allow_pickle=False)
    entry.with_suffix(".sha256").write_text(hashlib.sha256(entry.read_bytes()).hexdigest())


@pytest.mark.parametrize("tamper", ["wrong width", "scaled", "rows swapped", "float64"])
def test_a_cached_entry_is_checked_by_kind_shape_and_rows_embedded_again_never_copied(tmp_path, tamper):
    conv = _conv(tmp_path)
    fresh = _build(tmp_path / "tiers", conv, summaries="extractive", keep_ratio=0.4)
    want = fresh.memory.turns.vectors.copy()
    fresh.close()
    entry = _entries(tmp_path / "tiers")[0]
    bad = {"wrong width": lambda v: np.hstack([v, v]), "scaled": lambda v: v * 0.5,
           "rows swapped": lambda v: v[::-1].copy(), "float64": lambda v: v}[tamper](np.load(entry))
    if tamper == "float64":
        np.save(entry, bad.astype(np.float64), allow_pickle=False)
        entry.with_suffix(".sha256").write_text(hashlib.sha256(entry.read_bytes()).hexdigest())
    else:
        _forge(entry, bad)
    runtime = _build(tmp_path / "tiers", conv, summaries="extractive")
    assert np.allclose(runtime.memory.turns.vectors, want)  # rebuilt: the tier directory holds the right vectors
    assert np.allclose(np.load(entry), want)  # and the entry was replaced


def test_an_imported_unit_is_dated_by_its_latest_source_turn(tmp_path):
    conv = _conv(tmp_path)
    # listed latest first: S4 (20 January) before S1 (5 January)
    conv.summaries = [ImportedUnit("u1", "The ski pass and the lodge.", ["S4:1", "S1:3"], None)]
    runtime = _build(tmp_path / "tiers", conv)
    assert runtime.memory.summaries.units[0].date == "20 January 2026"


def test_a_unit_linked_to_no_kept_turn_is_a_named_data_error_at_the_tier_build(tmp_path):
    from tiermem.settings.errors import DataError

    conv = _conv(tmp_path)
    conv.summaries = [ImportedUnit("S9:m1", "A point of a session whose turns were all empty.", [], "2026-01-05")]
    with pytest.raises(DataError, match="summary unit 'S9:m1' links to turn"):
        _build(tmp_path / "tiers", conv)
