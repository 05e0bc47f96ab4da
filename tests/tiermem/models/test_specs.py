"""Model specs: the packaged model converts once and loads from the cache after; bad specs fail clearly."""

import pytest

from tiermem.models import specs
from tiermem.models.specs import ModelSpecError, resolve_model


def test_packaged_lm_converts_once_then_comes_from_the_cache(monkeypatch):
    first = resolve_model(specs.DEFAULT_LM)  # converts on a fresh machine, else already cached
    assert (first / "model.safetensors").is_file() and (first / "tiermem_conversion.json").is_file()
    stamp = (first / "model.safetensors").stat().st_mtime_ns

    def no_second_conversion(target):
        raise AssertionError("converted again although the cache holds the model")

    monkeypatch.setattr(specs, "_convert_smollm", no_second_conversion)
    assert resolve_model(specs.DEFAULT_LM) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp


def test_conversion_is_verified_against_the_gguf():
    import json

    info = json.loads((resolve_model(specs.DEFAULT_LM) / "tiermem_conversion.json").read_text())
    assert info["max_abs_logit_diff"] <= 1e-4


def test_packaged_embedder_is_found_without_network():
    assert (resolve_model(specs.DEFAULT_EMBEDDER) / "modules.json").is_file()


def test_unknown_packaged_model():
    with pytest.raises(ModelSpecError, match="unknown packaged model"):
        resolve_model("packaged:gpt-5")


def test_missing_local_directory():
    with pytest.raises(ModelSpecError, match="no such directory"):
        resolve_model("./no/such/model")


def test_uncached_hub_id_offline_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelSpecError, match="not in the local hub cache.*download"):
        resolve_model("acme/not-cached-router")


def test_cli_reports_a_bad_model_spec_in_one_line(capsys, tmp_path):
    from tiermem_cli.cli import main

    out = tmp_path / "sft"
    out.mkdir()
    (out / ".tiermem-run.json").write_text('{"stage": "sft"}')
    (out / "tiermem_router.json").write_text("{}")  # a finished earlier run
    assert main(["sft", "model=./no/such/model", "data=./no/such/dataset", f"output_dir={out}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error:" in err[0] and "./no/such/model" in err[0]
    assert (out / "tiermem_router.json").is_file()  # a run that failed on its inputs keeps the earlier one
