"""Router files are checked when a router loads, never on a request: each weight file against the sha256 that
tiermem_router.json recorded at save time, and every metadata and feature-model field by type and range.

Only names the package had before digests existed are imported at module level (errors by kind, exit codes), so
these tests can run against older code and show what it let through."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from serving.routers import RouterSpec, build
from tests.helpers.router_fixtures import make_router_run
from tiermem.runs.run_meta import RUN_META_FILE, RunMetaError
from tiermem.settings.errors import EXIT_STORE, EXIT_USAGE, RouterLoadError, StoreError, exit_code


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _meta(run: Path) -> dict:
    return json.loads((run / RUN_META_FILE).read_text())


def _write_meta(run: Path, meta: dict) -> None:
    (run / RUN_META_FILE).write_text(json.dumps(meta, indent=2))  # NaN / Infinity floats become JSON literals


def _rerecord(run: Path, name: str) -> None:
    """What a save would have recorded for the file as it now is: validation, not the digest, must refuse it."""
    meta = _meta(run)
    meta.setdefault("files", {})
    meta["files"] = {**(meta["files"] or {}), name: _sha256(run / name)}
    _write_meta(run, meta)


@pytest.fixture
def lm_run(tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(make_router_run(), run)
    return run


def _features_run(path: Path) -> Path:
    from serving.routers.features import FeatureRouter
    from serving.signals import FEATURES
    from tiermem.models.logistic import fit_logistic

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, len(FEATURES)))
    y = (x[:, 0] + 0.3 * rng.normal(size=40) > 0).astype(float)
    FeatureRouter(fit_logistic(x, y, FEATURES)).save(path)
    return path


def _load(run: Path):
    return build(RouterSpec(path=str(run)))


def _flip_4kb(path: Path) -> None:
    data = bytearray(path.read_bytes())
    header = 8 + int.from_bytes(data[:8], "little")  # safetensors: u64 header length, JSON header, tensor bytes
    start = header + (len(data) - header) // 3
    assert len(data) - start > 4096
    for i in range(start, start + 4096):
        data[i] ^= 0x01  # low mantissa bits: the file still parses and loads, the weights differ
    path.write_bytes(bytes(data))


# ---- digests --------------------------------------------------------------------------------------------


def test_save_records_a_digest_of_every_weight_file(lm_run, tmp_path):
    from transformers import AutoTokenizer

    from router_train.lm.router_run import save_run
    from serving.routers.top1 import Top1ScoreRouter
    from tiermem.runs.run_meta import read_run_meta

    # the adapter's weights, and its config that decides how they are applied
    recorded = {name: _sha256(lm_run / name) for name in ("adapter_config.json", "adapter_model.safetensors")}
    assert _meta(lm_run)["files"] == recorded
    meta = read_run_meta(lm_run)  # what SFT / GRPO hand to save_run after trainer.save_model
    meta.files = None
    (lm_run / "training_args.bin").write_bytes(b"a trainer pickle")  # never a router file
    save_run(AutoTokenizer.from_pretrained(str(lm_run)), lm_run, meta)
    assert _meta(lm_run)["files"] == {name: _sha256(lm_run / name) for name in recorded}

    feats = _features_run(tmp_path / "features")
    assert _meta(feats)["files"] == {"feature_model.json": _sha256(feats / "feature_model.json")}
    Top1ScoreRouter().save(tmp_path / "top1")
    assert _meta(tmp_path / "top1")["files"] == {}


def test_4kb_flipped_inside_the_adapter_is_refused_at_load(lm_run):
    expected = _sha256(lm_run / "adapter_model.safetensors")
    _flip_4kb(lm_run / "adapter_model.safetensors")
    actual = _sha256(lm_run / "adapter_model.safetensors")
    with pytest.raises(StoreError, match="adapter_model.safetensors") as err:
        _load(lm_run)
    assert expected in str(err.value) and actual in str(err.value)
    assert type(err.value).__name__ == "IntegrityError" and exit_code(err.value) == EXIT_STORE


def test_missing_or_unrecorded_weight_files_are_refused(lm_run):
    shutil.copy(lm_run / "adapter_model.safetensors", lm_run / "model.safetensors")  # not what was saved
    with pytest.raises(StoreError, match=r"model.safetensors'\] are not recorded"):
        _load(lm_run)
    (lm_run / "model.safetensors").unlink()
    (lm_run / "adapter_model.safetensors").unlink()
    with pytest.raises(StoreError, match="adapter_model.safetensors: missing"):
        _load(lm_run)


def test_a_router_saved_without_digests_is_refused_with_the_fix(lm_run, tmp_path):
    meta = _meta(lm_run)
    meta.pop("files", None)
    _write_meta(lm_run, meta)
    with pytest.raises(StoreError, match="are not recorded.*re-save the router"):
        _load(lm_run)
    # a top1-score directory holds no weights: nothing a digest would protect, so an older one still loads
    from serving.routers.top1 import Top1ScoreRouter

    Top1ScoreRouter().save(tmp_path / "top1")
    meta = _meta(tmp_path / "top1")
    meta.pop("files", None)
    _write_meta(tmp_path / "top1", meta)
    assert _load(tmp_path / "top1").threshold_logit == 0.0


def test_a_tampered_feature_model_is_refused_and_calibrate_keeps_the_digests(tmp_path, capsys):
    from evaluation.calibrate import main as calibrate_main
    from tests.helpers.feature_data import _label_dataset

    feats = _features_run(tmp_path / "features")
    data = _label_dataset(tmp_path)
    assert calibrate_main([f"router={feats}", f"data={data}", "criterion=escalation_rate", "value=0.5"]) == 0
    meta = _meta(feats)
    assert meta["calibration"]["threshold_logit"] is not None
    assert meta["files"] == {"feature_model.json": _sha256(feats / "feature_model.json")}
    assert _load(feats).threshold_logit == meta["calibration"]["threshold_logit"]

    model = json.loads((feats / "feature_model.json").read_text())
    model["bias"] += 5.0  # a different router under the same name
    (feats / "feature_model.json").write_text(json.dumps(model))
    capsys.readouterr()
    assert calibrate_main([f"router={feats}", f"data={data}"]) == EXIT_STORE
    assert "feature_model.json: sha256" in capsys.readouterr().err


# ---- metadata fields --------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_threshold_logit_is_refused_at_load(lm_run, value):
    meta = _meta(lm_run)
    meta["calibration"] = {"threshold_logit": value}
    _write_meta(lm_run, meta)
    with pytest.raises(RunMetaError, match=r"tiermem_router.json: field 'calibration.threshold_logit'") as err:
        _load(lm_run)
    assert exit_code(err.value) == EXIT_USAGE


def test_an_uncalibrated_router_still_loads(tmp_path):
    from serving.routers.features import FeatureRouter

    feats = _features_run(tmp_path / "features")
    meta = _meta(feats)
    meta["calibration"] = {"threshold_logit": None}
    _write_meta(feats, meta)
    assert isinstance(_load(feats), FeatureRouter) and _load(feats).threshold_logit == 0.0


@pytest.mark.parametrize(("field", "value", "pattern"), [
    ("top_k", -1, "data.router_input.top_k"),
    ("top_k", "5", "data.router_input.top_k"),
    ("top_k", 2.5, "data.router_input.top_k"),
    ("max_summaries", 0, "data.router_input.max_summaries"),
])
def test_a_nonsensical_top_k_is_refused_at_load(lm_run, field, value, pattern):
    meta = _meta(lm_run)
    meta["data"]["router_input"] = {**(meta["data"].get("router_input") or {}), field: value}
    _write_meta(lm_run, meta)
    with pytest.raises(RunMetaError, match=rf"field '{pattern}'"):
        _load(lm_run)


def test_router_kind_is_a_field_of_the_metadata(lm_run, tmp_path):
    from tiermem.runs.run_meta import RunMeta, RunMetaFile, read_run_meta

    meta = read_run_meta(lm_run)
    assert meta.router_kind == "local" and meta.extra == {}
    top1 = RunMeta(contract_version=meta.contract_version, base_model="none", adapter=False, router_kind="top1-score")
    RunMetaFile.new(tmp_path / "top1", top1).save()
    assert _meta(tmp_path / "top1")["router_kind"] == "top1-score" == read_run_meta(tmp_path / "top1").router_kind
    top1.extra = {"router_kind": "features"}  # a field passed as an unknown key is refused, never written over it
    with pytest.raises(RunMetaError, match=r"field 'extra' holds \['router_kind'\]"):
        RunMetaFile.new(tmp_path / "top1", top1).save()


@pytest.mark.parametrize(("field", "value", "pattern"), [
    ("adapter", "yes", "'adapter'"),
    ("calibration", {"threshold": 0.5}, "'calibration.threshold' is not a field"),  # log-odds only
    ("files", {"../adapter_model.safetensors": "0" * 64}, "'files'"),
    ("files", {"adapter_model.safetensors": "not-a-digest"}, "'files.adapter_model.safetensors'"),
    ("metrics", [], "'metrics'"),
    ("contract_version", 2, "'contract_version'"),
    ("router_kind", "", "'router_kind'"),
    ("router_kind", ["features"], "'router_kind'"),
])
def test_other_metadata_fields_are_typed(lm_run, field, value, pattern):
    meta = _meta(lm_run)
    meta[field] = value
    _write_meta(lm_run, meta)
    with pytest.raises(RunMetaError, match=pattern):
        _load(lm_run)


# ---- feature_model.json -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "pattern"), [
    (lambda m: m["weights"].__setitem__(3, float("nan")), "field 'weights'.*finite"),
    (lambda m: m["weights"].pop(), "field 'weights'.*13 finite numbers"),
    (lambda m: m["mean"].__setitem__(0, float("inf")), "field 'mean'"),
    (lambda m: m["scale"].__setitem__(0, 0.0), "field 'scale'"),
    (lambda m: m.__setitem__("bias", float("nan")), "field 'bias'"),
    (lambda m: m.__setitem__("weights", "0.1"), "field 'weights'"),
    (lambda m: m.__setitem__("n_train", -3), "field 'n_train'"),
])
def test_a_nonsensical_feature_model_is_refused_at_load(tmp_path, change, pattern):
    feats = _features_run(tmp_path / "features")
    model = json.loads((feats / "feature_model.json").read_text())
    change(model)
    (feats / "feature_model.json").write_text(json.dumps(model))
    _rerecord(feats, "feature_model.json")
    with pytest.raises(RouterLoadError, match=rf"feature_model.json: {pattern}") as err:
        _load(feats)
    assert exit_code(err.value) == EXIT_USAGE
