"""1-2 step SFT and GRPO runs through the real recipes on a tiny model: they must change the adapter, save a run
that reloads to identical logits, and refuse a run saved under another contract version.

The SFT tests use a random tiny Llama (seconds). GRPO needs reward variance, so it starts from a tiny base first
trained to emit the contract JSON with a coin-flip action; building that base makes it a slow test."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from datasets import load_from_disk
from safetensors.torch import load_file

from router_train.lm import grpo, sft
from router_train.lm.objectives import LossConfig
from router_train.lm.recipe_config import LoraSettings
from router_train.lm.router_run import load_adapter_run
from tests.helpers.router_fixtures import build_contract_base, build_label_dataset, build_tiny_model_dir
from tiermem import contract
from tiermem.runs.run_meta import RUN_META_FILE, read_run_meta
from tiermem.settings.errors import ConfigError

ADAPTER = "adapter_model.safetensors"
SMALL_LORA = LoraSettings(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"])


def _sft_config(root, base) -> sft.SFTRecipeConfig:
    return sft.SFTRecipeConfig(
        model=str(base), data=str(root / "dataset"), output_dir=str(root / f"sft_{base.name}"),
        lora=SMALL_LORA, eval_generate_limit=2, metrics_train_rows=4,
        trainer={"max_steps": 2, "per_device_train_batch_size": 2, "learning_rate": 1e-3, "logging_steps": 1},
    )


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_smoke")
    build_label_dataset(root / "dataset")
    build_tiny_model_dir(root / "random_base")
    return root


@pytest.fixture(scope="module")
def sft_run(workdir):
    return sft.train(_sft_config(workdir, workdir / "random_base"))


def _logits(model, tokenizer, text: str) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(**tokenizer(text, return_tensors="pt")).logits


def test_sft_changes_adapter_and_saves_a_complete_run(sft_run, workdir):
    out = sft_run.output_dir
    lora_b = {k: v for k, v in load_file(out / ADAPTER).items() if "lora_B" in k}
    assert lora_b and any(v.abs().sum() > 0 for v in lora_b.values())  # lora_B starts at zero
    meta = read_run_meta(out)
    assert (meta.contract_version, meta.stage, meta.base_model) == (contract.CONTRACT_VERSION, "sft",
                                                                    str(workdir / "random_base"))
    assert meta.training["lora"]["r"] == 4 and meta.training["resolved_trainer_args"]["bf16"] is False
    assert meta.data["train_labels"] == {"ANSWER": 4, "ESCALATE": 2}
    # the prompts' shape travels with the router: its training top_k and the contract's limits
    assert meta.data["router_input"] == {"top_k": max(len(r["router_summaries"]) for r in
                                                      load_from_disk(str(workdir / "dataset"))["train"]),
                                         **contract.limits()}
    val = meta.metrics["validation"]
    assert val["n"] == 3 and 0.0 <= val["accuracy"] <= 1.0
    assert val["baseline_always_escalate_accuracy"] == pytest.approx(2 / 3)
    assert val["baseline_majority_label"] == "ANSWER" and val["baseline_majority_accuracy"] == pytest.approx(1 / 3)
    assert meta.metrics["train"]["global_step"] == 2
    assert (out / "tokenizer.json").is_file()


def test_save_then_reload_gives_identical_logits(sft_run, workdir):
    prompt = contract.render_prompt(sft_run.tokenizer, "When did Jon run?", [{"text": "Jon ran.", "date": None}])
    text = prompt + contract.OUTPUT_PREFIX
    trained = _logits(sft_run.model, sft_run.tokenizer, text)
    model, tokenizer, _ = load_adapter_run(sft_run.output_dir, trainable=False)
    assert torch.equal(_logits(model, tokenizer, text), trained)
    with model.disable_adapter():  # the adapter is really part of what was reloaded
        assert not torch.allclose(_logits(model, tokenizer, text), trained)


def test_contract_version_mismatch_is_refused(sft_run, workdir, capsys):
    stale = workdir / "stale_sft"
    shutil.copytree(sft_run.output_dir, stale, dirs_exist_ok=True)
    meta_path = stale / RUN_META_FILE
    meta = json.loads(meta_path.read_text())
    meta["contract_version"] = "tiermem-router-contract/0"
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(contract.ContractVersionError, match="contract/0"):
        load_adapter_run(stale, trainable=False)
    code = grpo.main([f"router={stale}", f"data={workdir / 'dataset'}", f"output_dir={workdir / 'never'}"])
    assert code == 2 and "retrain" in capsys.readouterr().err
    assert not (workdir / "never" / RUN_META_FILE).exists()


def test_grpo_refuses_to_start_without_sft(workdir, capsys):
    args = [f"data={workdir / 'dataset'}", f"output_dir={workdir / 'never'}"]
    assert grpo.main(["router=null", *args]) == 2
    assert "starts from an SFT adapter" in capsys.readouterr().err
    assert grpo.main([f"router={workdir / 'missing'}", *args]) == 2
    assert "make sft" in capsys.readouterr().err
    same = workdir / "same"
    assert grpo.main([f"router={same}", f"output_dir={same}", f"data={workdir / 'dataset'}"]) == 2
    assert "overwrite the SFT adapter" in capsys.readouterr().err


@pytest.mark.slow
def test_grpo_changes_adapter_and_logs_reward_curves(workdir):
    build_contract_base(workdir / "contract_base", workdir / "dataset")
    sft_run = sft.train(_sft_config(workdir, workdir / "contract_base"))
    cfg = grpo.GRPORecipeConfig(
        router=str(sft_run.output_dir), data=str(workdir / "dataset"), output_dir=str(workdir / "grpo"),
        eval_generate_limit=2, metrics_train_rows=4,
        completion="text",
        trainer={"max_steps": 2, "per_device_train_batch_size": 8, "num_generations": 4,
                 "max_completion_length": 12, "learning_rate": 5e-3},
    )
    result = grpo.train(cfg)
    before = load_file(sft_run.output_dir / ADAPTER)
    after = load_file(result.output_dir / ADAPTER)
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    curves = json.loads((result.output_dir / grpo.CURVES_FILE).read_text())
    assert [p["step"] for p in curves] == [1, 2]
    for key in ("reward", "reward_std", "frac_reward_zero_std", "rewards/decision/mean", "rewards/format/mean",
                "reward_parts/waste", "case/unparseable", "decision/escalation_rate", "format/valid_action_rate"):
        assert key in curves[0], key
    assert read_run_meta(result.output_dir).metrics["grpo_signal"]["logged_steps"] == 2
    meta = read_run_meta(result.output_dir)
    assert meta.stage == "grpo" and meta.base_model == str(workdir / "contract_base")
    assert meta.training["sft"]["sft_dir"] == str(sft_run.output_dir)
    assert meta.metrics["warnings"] == [] and meta.metrics["validation"]["n"] == 3
    assert meta.data["cost_scale_tokens"] == 2000  # the train split's largest research input


@pytest.mark.slow
def test_grpo_from_sft_samples_the_action_token_through_the_trunk_and_refits_the_head(workdir):
    """The demo's recipe: GRPO continues an SFT run with a signal head on one-token completions (the action's first
    token after the output prefix), the bottom layer as a frozen trunk, and the head refit on the new margins."""
    from serving.routers.local import LocalRouter
    from serving.signals import SIGNAL_HEAD_FILE

    build_contract_base(workdir / "contract_base", workdir / "dataset")
    base = workdir / "contract_base"
    sft_cfg = _sft_config(workdir, base)
    sft_cfg.output_dir = str(workdir / "sft_head")
    sft_cfg.lora = LoraSettings(r=4, alpha=8, dropout=0.0, top_layers=1, target_modules=["q_proj", "v_proj"])
    sft_cfg.loss = LossConfig(kind="decision", signal_head=True)
    sft_run = sft.train(sft_cfg)
    cfg = grpo.GRPORecipeConfig(
        router=str(sft_run.output_dir), data=str(workdir / "dataset"), output_dir=str(workdir / "grpo_token"),
        eval_generate_limit=2, metrics_train_rows=4,
        trainer={"max_steps": 2, "per_device_train_batch_size": 8, "num_generations": 4, "learning_rate": 5e-2},
    )
    result = grpo.train(cfg)
    before, after = load_file(sft_run.output_dir / ADAPTER), load_file(result.output_dir / ADAPTER)
    meta = read_run_meta(result.output_dir)
    learned = meta.metrics["grpo_signal"]
    assert learned["grad_norm_max"] > 0 and learned["zero_variance_share"] <= 0.5  # the policy explored
    # GRPO keeps the weights of its best validation check: moved, or the SFT adapter kept and the run says so
    moved = any(not torch.equal(before[k], after[k]) for k in before)
    assert moved or (learned["kept_step"] == 0 and learned["verdict"] == "not a refinement")
    assert meta.data["frozen_trunk"] is True and meta.training["completion"] == "action_token"
    assert meta.training["resolved_trainer_args"]["max_completion_length"] == 1
    curves = json.loads((result.output_dir / grpo.CURVES_FILE).read_text())
    assert curves[0]["completions/mean_length"] == 1.0 and "format/valid_action_rate" in curves[0]
    head = meta.data["signal_head"]
    assert head["file"] == SIGNAL_HEAD_FILE and (result.output_dir / SIGNAL_HEAD_FILE).is_file()
    assert head["init"].startswith("refit") and head["refit_rows"] > 0 and head["text_weight"] >= 0
    router = LocalRouter.load(result.output_dir)  # a whole router, as SFT's: margin x text_weight + head
    assert router.signal_head is not None and router.text_weight == head["text_weight"]
    assert meta.metrics["validation"]["n"] == 3 and meta.metrics["validation"]["auroc"] is not None


def test_grpo_action_token_mode_refuses_a_longer_completion(workdir):
    cfg = grpo.GRPORecipeConfig(output_dir=str(workdir / "never"), trainer={"max_completion_length": 8})
    with pytest.raises(ConfigError, match="max_completion_length"):
        grpo.build_grpo_config(cfg)
    with pytest.raises(ConfigError, match="completion"):
        grpo.GRPORecipeConfig(completion="json")
