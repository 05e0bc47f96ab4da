"""What decides a LoRA router besides its weights is proven with them: adapter_config.json by the sha256 the run
records (rank, alpha, layers, base name), the base model by the digest of its config, and every adapter weight the
config's model needs must be in the weights file (PEFT only warns). Serving, eval and GRPO load through one loader."""

from __future__ import annotations

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from router_train.lm.router_run import load_adapter_run
from serving.routers.local import LocalRouter
from tests.helpers.router_fixtures import make_router_run
from tiermem.runs.run_meta import IntegrityError, RunMetaFile, read_run_meta, sha256_file
from tiermem.settings.errors import RouterLoadError

ADAPTER_CONFIG = "adapter_config.json"


def _copy(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(make_router_run(), run)
    return run


def _edit_config(run, edit, record: bool) -> None:
    config = json.loads((run / ADAPTER_CONFIG).read_text())
    edit(config)
    (run / ADAPTER_CONFIG).write_text(json.dumps(config))
    if record:  # as a re-save would: the files' digests say what is there now
        meta = read_run_meta(run)
        meta.files = {**meta.files, ADAPTER_CONFIG: sha256_file(run / ADAPTER_CONFIG)}
        RunMetaFile.new(run, meta).save()


def _loads(run):
    """Serving's and eval's loader, and GRPO's (`router=`)."""
    return (lambda: LocalRouter.from_pretrained(run), lambda: load_adapter_run(run, trainable=True))


@pytest.mark.parametrize("edit", [
    lambda c: c.update(lora_alpha=c["lora_alpha"] * 50),
    lambda c: c.update(layers_to_transform=[1]),
    lambda c: c.update(base_model_name_or_path="someone/another-base"),
], ids=["lora_alpha", "layers_to_transform", "base_model_name_or_path"])
def test_an_edited_adapter_config_is_refused_by_its_digest(tmp_path, edit):
    run = _copy(tmp_path)
    _edit_config(run, edit, record=False)
    for load in _loads(run):
        with pytest.raises(IntegrityError, match=f"{ADAPTER_CONFIG}: sha256 .* differs"):
            load()


def test_a_config_whose_layers_leave_trained_weights_unread_is_refused(tmp_path):
    run = _copy(tmp_path)
    _edit_config(run, lambda c: c.update(layers_to_transform=[1]), record=True)
    for load in _loads(run):
        with pytest.raises(RouterLoadError, match=r"adapter weights do not fit .* of the file's fit nowhere"):
            load()


def test_a_missing_adapter_weight_is_an_error(tmp_path):
    run = _copy(tmp_path)
    weights = load_file(run / "adapter_model.safetensors")
    dropped = sorted(k for k in weights if "lora_B" in k)[0]
    del weights[dropped]
    save_file(weights, run / "adapter_model.safetensors", metadata={"format": "pt"})
    meta = read_run_meta(run)
    meta.files = {**meta.files, "adapter_model.safetensors": sha256_file(run / "adapter_model.safetensors")}
    RunMetaFile.new(run, meta).save()
    for load in _loads(run):
        with pytest.raises(RouterLoadError, match=r"1 weight\(s\) the config's model needs are not in the weights"):
            load()


def test_a_base_other_than_the_one_trained_on_is_refused(tmp_path):
    run = _copy(tmp_path)
    base = tmp_path / "base"
    shutil.copytree(read_run_meta(run).base_model, base)
    config = json.loads((base / "config.json").read_text())
    config["rms_norm_eps"] = config.get("rms_norm_eps", 1e-6) * 10
    (base / "config.json").write_text(json.dumps(config))
    meta = read_run_meta(run)
    meta.base_model = str(base)
    RunMetaFile.new(run, meta).save()
    for load in _loads(run):
        with pytest.raises(RouterLoadError, match="is not the one it was trained on"):
            load()
    with pytest.raises(RouterLoadError, match="is not the one it was trained on"):
        LocalRouter.from_pretrained(make_router_run(), base_model=str(base))  # router.base_model= likewise
