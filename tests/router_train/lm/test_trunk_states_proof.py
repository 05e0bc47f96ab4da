"""Frozen-trunk state files proven like weights: the run that writes one records its sha256, a stage that reads one
checks it against that record and checks every state against the model, and a file of a model whose config
changed is another model's. A stale or tampered file is refused (a cache no run records is recomputed, said so)."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch

from router_train.lm import grpo, sft
from router_train.lm.objectives import LossConfig
from router_train.lm.recipe_config import LoraSettings
from tests.helpers.router_fixtures import build_label_dataset, build_tiny_model_dir
from tiermem.models.torch_state import padded
from tiermem.models.trunk import FrozenTrunk, TrunkCacheError
from tiermem.runs.run_meta import RUN_META_FILE, read_run_meta, sha256_file
from tiermem.settings.errors import UsageError

LORA = LoraSettings(r=4, alpha=8, dropout=0.0, top_layers=1, target_modules=["q_proj", "v_proj"])
TRUNK = "trunk_states.pt"


def _sft(root, name, base, trunk_cache) -> sft.SFTRecipeConfig:
    return sft.SFTRecipeConfig(
        model=str(base), data=str(root / "dataset"), output_dir=str(root / name), lora=LORA,
        loss=LossConfig(kind="decision", trunk_cache=str(trunk_cache)), eval_generate_limit=0, metrics_train_rows=2,
        epoch_choice=False, trainer={"max_steps": 1, "per_device_train_batch_size": 2, "logging_steps": 1})


def _grpo(root, name, router, trunk_from, **trainer) -> grpo.GRPORecipeConfig:
    return grpo.GRPORecipeConfig(
        router=str(router), data=str(root / "dataset"), output_dir=str(root / name), trunk_from=str(trunk_from),
        eval_generate_limit=0, metrics_train_rows=2, check_steps=0, minimal_pairs=False,
        trainer={"max_steps": 1, "per_device_train_batch_size": 4, "num_generations": 2, "logging_steps": 1,
                 **trainer})


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("trunk_proof")
    build_label_dataset(root / "dataset")
    build_tiny_model_dir(root / "base")
    out = root / "sft"
    sft.train(_sft(root, "sft", root / "base", out / TRUNK))
    return root, out


def _tampered_copy(root, sft_dir, name, edit):
    """A copy of the SFT run whose trunk file's states are edited, its fingerprint and header kept."""
    copy = root / name
    shutil.copytree(sft_dir, copy)
    saved = torch.load(copy / TRUNK, weights_only=True)
    saved["states"] = {k: edit(v) for k, v in saved["states"].items()}
    torch.save(saved, copy / TRUNK)
    return copy


def test_sft_records_the_sha256_of_the_trunk_file_it_wrote(sft_run):
    _, out = sft_run
    record = read_run_meta(out).data["trunk_states"]
    assert record["file"] == TRUNK and record["written"] is True
    assert record["sha256"] == sha256_file(out / TRUNK) and record["sequences"] > 0


def test_a_trunk_file_of_a_base_whose_config_changed_is_refused(sft_run):
    root, out = sft_run
    changed = root / "base_rope"
    shutil.copytree(root / "base", changed)
    config = json.loads((changed / "config.json").read_text())
    rope = config.get("rope_parameters") or {}
    if "rope_theta" in rope:
        rope["rope_theta"] *= 10
    else:
        config["rope_theta"] = config.get("rope_theta", 10000.0) * 10
    (changed / "config.json").write_text(json.dumps(config))
    with pytest.raises(UsageError, match="trunk states of another model"):
        sft.train(_sft(root, "sft_rope", changed, out / TRUNK))
    assert not (root / "sft_rope" / RUN_META_FILE).exists()  # refused before any training


@pytest.mark.parametrize("edit", [torch.zeros_like, lambda v: v * 3], ids=["zeroed", "tripled"])
def test_a_tampered_trunk_file_is_refused_by_grpo_and_sft(sft_run, edit):
    root, out = sft_run
    name = f"tampered_{edit is torch.zeros_like}"
    copy = _tampered_copy(root, out, name, edit)
    with pytest.raises(TrunkCacheError, match="differs from the .* recorded"):
        grpo.train(_grpo(root, f"grpo_{name}", copy, copy / TRUNK))
    with pytest.raises(TrunkCacheError, match="differs from the .* recorded"):
        sft.train(_sft(root, f"sft_{name}", root / "base", copy / TRUNK))


def test_a_trunk_file_no_run_records_is_refused_by_grpo_and_recomputed_by_sft(sft_run, caplog):
    root, out = sft_run
    loose = root / "loose"
    loose.mkdir()
    shutil.copy(out / TRUNK, loose / TRUNK)
    (root / "elsewhere").mkdir()
    saved = torch.load(loose / TRUNK, weights_only=True)
    saved["writer"] = str(root / "elsewhere")  # names a directory that records nothing
    torch.save(saved, loose / TRUNK)
    with pytest.raises(TrunkCacheError, match="no run records this trunk-state file"):
        grpo.train(_grpo(root, "grpo_loose", out, loose / TRUNK))
    with caplog.at_level(logging.WARNING, logger="router_train.lm.objectives"):
        run = sft.train(_sft(root, "sft_loose", root / "base", loose / TRUNK))
    assert any("states are recomputed" in r.getMessage() for r in caplog.records)
    record = read_run_meta(run.output_dir).data["trunk_states"]
    assert record["written"] is True and record["sha256"] == sha256_file(loose / TRUNK)
    assert "recomputed" in record["notes"][0]


def test_a_second_run_reads_a_file_another_run_recorded_and_leaves_it_as_recorded(sft_run):
    root, out = sft_run
    before = sha256_file(out / TRUNK)
    run = sft.train(_sft(root, "sft_again", root / "base", out / TRUNK))
    assert sha256_file(out / TRUNK) == before == read_run_meta(out).data["trunk_states"]["sha256"]
    record = read_run_meta(run.output_dir).data["trunk_states"]
    assert record["written"] is False and record["sha256"] == before
    result = grpo.train(_grpo(root, "grpo", out, out / TRUNK))  # the SFT run's file, as it recorded it
    read = read_run_meta(result.output_dir).data["trunk_states"]
    assert read["from_trunk_from"] > 0 and read["sha256"] == before and read["written"] is False


def _tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                        num_attention_heads=4, num_key_value_heads=2)).eval()


@pytest.mark.parametrize("edit, needle", [
    (lambda k, v: (k, v[:-1]), "has shape"),
    (lambda k, v: (k, v.double()), "has dtype torch.float64"),
    (lambda k, v: (k, torch.full_like(v, float("nan"))), "holds NaN or infinite values"),
    (lambda k, v: ((500, *k[1:]), v), "holds a token id outside the model's vocabulary"),
])
def test_every_state_is_checked_against_the_model_when_read(tmp_path, edit, needle):
    model = _tiny()
    trunk = FrozenTrunk(model, top_layers=1, cache_file=tmp_path / TRUNK)
    trunk.hidden(*padded([[5, 6, 7], [8, 9]], pad=0))
    trunk.save()
    saved = torch.load(tmp_path / TRUNK, weights_only=True)
    first = next(iter(saved["states"]))
    key, value = edit(first, saved["states"].pop(first))
    saved["states"][key] = value
    torch.save(saved, tmp_path / TRUNK)
    with pytest.raises(TrunkCacheError, match=f"{TRUNK}: state 1 {needle}"):
        FrozenTrunk(model, top_layers=1, cache_file=tmp_path / TRUNK)
