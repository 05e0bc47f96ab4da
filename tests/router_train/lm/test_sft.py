from __future__ import annotations

import pytest
import torch
from datasets import Dataset, DatasetDict

from labeling.dataset import load_dataset_dict
from router_train.lm import rows as rows_lib
from router_train.lm.sft import SFTRecipeConfig, build_sft_config, load_rows
from tests.helpers.router_fixtures import build_label_dataset, build_tiny_model_dir, record
from tiermem import contract
from tiermem.settings.config import ConfigError, parse_cli


@pytest.fixture(scope="module")
def tokenizer():
    from tiermem.models.specs import DEFAULT_LM, load_tokenizer

    return load_tokenizer(DEFAULT_LM)


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    return build_label_dataset(tmp_path_factory.mktemp("label") / "dataset")


def test_rows_render_through_the_contract_and_skip_unlabeled(dataset_dir, tokenizer):
    data = load_dataset_dict(dataset_dir)
    rows = rows_lib.build_rows(data, "train", tokenizer)
    assert len(rows) == 6  # record 6 has label None
    first = data["train"][0]
    assert rows[0]["prompt"] == contract.render_prompt(tokenizer, first["question"], first["router_summaries"])
    assert rows[0]["completion"] == first["sft_target"] + tokenizer.eos_token
    assert rows_lib.label_counts(rows) == {"ANSWER": 4, "ESCALATE": 2}


def test_reward_rows_carry_reward_columns(dataset_dir, tokenizer):
    rows = rows_lib.build_rows(load_dataset_dict(dataset_dir), "train", tokenizer, with_rewards=True)
    assert rows["s_ok"] == [True, True, True, True, False, False]
    assert rows["cost_research_input_tokens"][3] == 2000


def test_balancing_is_seeded_and_train_only(dataset_dir, tokenizer):
    cfg = SFTRecipeConfig(data=str(dataset_dir), balance="oversample", seed=3)
    train, val, info = load_rows(cfg, tokenizer)
    assert info["train_labels"] == {"ANSWER": 4, "ESCALATE": 2}
    assert rows_lib.label_counts(train) == {"ANSWER": 4, "ESCALATE": 4}
    assert rows_lib.label_counts(val) == {"ANSWER": 1, "ESCALATE": 2}  # validation untouched
    again, _, _ = load_rows(cfg, tokenizer)
    assert train["qid"] == again["qid"]
    with pytest.raises(rows_lib.RecordError, match="balance"):
        rows_lib.balance(train, "smote", seed=1)


def test_bad_records_are_named(tmp_path, tokenizer):
    bad = record(0, "c1", True, True)
    bad["sft_target"] = contract.render_target("ESCALATE", "disagrees with the label")
    DatasetDict({"train": Dataset.from_list([bad])}).save_to_disk(str(tmp_path / "ds"))
    with pytest.raises(rows_lib.RecordError, match=r"record 0 \(qid='c1-q0'\): field 'sft_target'"):
        rows_lib.build_rows(load_dataset_dict(tmp_path / "ds"), "train", tokenizer)
    with pytest.raises(FileNotFoundError, match="make label"):
        load_dataset_dict(tmp_path / "missing")
    with pytest.raises(rows_lib.RecordError, match="no 'validation' split"):
        rows_lib.build_rows(load_dataset_dict(tmp_path / "ds"), "validation", tokenizer)
    Dataset.from_list([{"qid": "x", "label": "ANSWER"}]).save_to_disk(str(tmp_path / "single"))
    with pytest.raises(rows_lib.RecordError, match="single split"):
        load_dataset_dict(tmp_path / "single")
    DatasetDict({"train": Dataset.from_list([{"qid": "x", "label": "ANSWER"}])}).save_to_disk(str(tmp_path / "cols"))
    with pytest.raises(rows_lib.RecordError, match=r"missing column\(s\)"):
        rows_lib.build_rows(load_dataset_dict(tmp_path / "cols"), "train", tokenizer)


def test_trainer_collator_masks_everything_but_the_completion(dataset_dir, tokenizer, tmp_path):
    """Real SFTTrainer preprocessing + collator: loss only on sft_target + eos, prompt tokens all -100."""
    from trl import SFTTrainer

    from tiermem.models.specs import load_causal_lm

    model_dir = build_tiny_model_dir(tmp_path / "tiny")
    model, tok = load_causal_lm(str(model_dir), device="cpu")
    cfg = SFTRecipeConfig(model=str(model_dir), data=str(dataset_dir), output_dir=str(tmp_path / "out"),
                          trainer={"max_steps": 1, "per_device_train_batch_size": 3})
    train, _, _ = load_rows(cfg, tok)
    trainer = SFTTrainer(model=model, args=build_sft_config(cfg),
                         train_dataset=train.select_columns(["prompt", "completion"]), processing_class=tok,
                         peft_config=cfg.lora.to_peft())
    batch = next(iter(trainer.get_train_dataloader()))
    assert batch["input_ids"].shape[0] == 3
    for row in range(3):
        ids, labels, mask = batch["input_ids"][row], batch["labels"][row], batch["attention_mask"][row]
        real = ids[mask.bool()].tolist()
        # the sampler shuffles: find which example this row is
        example = next(ex for ex in train if tok(ex["prompt"] + ex["completion"])["input_ids"] == real)
        prompt_len = len(tok(example["prompt"])["input_ids"])
        kept = labels[labels != -100].tolist()
        assert tok.decode(kept) == example["completion"]
        assert (labels[:prompt_len] == -100).all()
        assert kept[-1] == tok.eos_token_id
        assert contract.parse(tok.decode(kept, skip_special_tokens=True)).valid_json
        assert (labels[~mask.bool()] == -100).all()  # padding never trained either


def test_cpu_defaults_and_user_overrides():
    if torch.cuda.is_available():
        pytest.skip("CPU defaults apply only without a GPU")
    args = build_sft_config(SFTRecipeConfig())
    assert (args.bf16, args.fp16, args.activation_checkpointing) == (False, False, False)
    assert args.completion_only_loss is True
    args = build_sft_config(SFTRecipeConfig(trainer={"gradient_checkpointing": True, "bf16": True}))
    assert args.activation_checkpointing is True and args.bf16 is True  # the user's trainer mapping wins
    args = build_sft_config(SFTRecipeConfig(cpu_defaults=False, trainer={"use_cpu": True}))
    assert args.activation_checkpointing is True and args.bf16 is True  # TRL's own defaults, untouched
    with pytest.raises(ConfigError, match=r"trainer \(SFTConfig\).*not_a_trl_key"):
        build_sft_config(SFTRecipeConfig(trainer={"not_a_trl_key": 1}))


def test_trainer_section_is_type_checked_before_any_model_loads(tmp_path, monkeypatch):
    from router_train.lm import sft

    monkeypatch.setattr("tiermem.models.specs.load_causal_lm", lambda *a, **k: pytest.fail("model loaded"))
    cfg = parse_cli(sft.SFTRecipeConfig, ["trainer.learning_rate='1e-3'", f"output_dir={tmp_path / 'o'}"])
    with pytest.raises(ConfigError, match=r"trainer \(SFTConfig\)\.learning_rate: expected float, got '1e-3'"):
        sft.train(cfg)
    with pytest.raises(ConfigError, match="max_steps: expected int"):
        sft.build_sft_config(parse_cli(sft.SFTRecipeConfig, ["trainer.max_steps=ten"]))
    assert not (tmp_path / "o").exists()


def test_the_teacher_filter_keeps_rows_whose_teacher_decision_equals_the_label(tmp_path, tokenizer):
    from tests.helpers.router_fixtures import record

    rows = [record(0, "c1", True, True), record(1, "c1", True, True), record(2, "c2", False, True),
            record(3, "c2", False, True)]
    for r, agrees in zip(rows, [True, False, None, False], strict=True):
        r["teacher_agrees"] = agrees  # None: no teacher decision for that row
    val = [dict(record(7, "c3", True, True), teacher_agrees=False), dict(record(8, "c3", False, True),
                                                                          teacher_agrees=True)]
    DatasetDict({"train": Dataset.from_list(rows), "validation": Dataset.from_list(val)}).save_to_disk(
        str(tmp_path / "ds"))
    train, held, info = load_rows(SFTRecipeConfig(data=str(tmp_path / "ds"), teacher_filter=True), tokenizer)
    assert train["qid"] == [rows[0]["qid"], rows[2]["qid"]]  # a disagreeing teacher drops the row; none keeps it
    assert info["teacher_filter"] == {"rows_before": 4, "kept": 2, "dropped_teacher_disagrees": 2,
                                      "without_teacher_decision": 1}
    assert len(held) == 2  # validation is never filtered
    unfiltered, _, info = load_rows(SFTRecipeConfig(data=str(tmp_path / "ds")), tokenizer)
    assert len(unfiltered) == 4 and "teacher_filter" not in info
    for r in rows:
        r["teacher_agrees"] = False
    DatasetDict({"train": Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "none"))
    with pytest.raises(rows_lib.RecordError, match="teacher_filter left no train row"):
        load_rows(SFTRecipeConfig(data=str(tmp_path / "none"), teacher_filter=True), tokenizer)


def test_minimal_pairs_false_trains_on_the_natural_rows_only(tmp_path, tokenizer):
    from tests.helpers.router_fixtures import record

    rows = [record(0, "c1", True, True), record(1, "c1", False, True), record(2, "c2", True, True)]
    for r, kind in zip(rows, [None, "drop_unit", None], strict=True):  # row 1: a minimal pair of row 0
        r["augmentation"] = kind
    DatasetDict({"train": Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "ds"))
    natural, _, info = load_rows(SFTRecipeConfig(data=str(tmp_path / "ds"), minimal_pairs=False), tokenizer)
    assert natural["qid"] == [rows[0]["qid"], rows[2]["qid"]] and info["train_minimal_pairs"] == 0
    every, _, info = load_rows(SFTRecipeConfig(data=str(tmp_path / "ds")), tokenizer)
    assert len(every) == 3 and info["train_minimal_pairs"] == 1
    DatasetDict({"train": Dataset.from_list(rows[1:2])}).save_to_disk(str(tmp_path / "pairs"))
    with pytest.raises(rows_lib.RecordError, match="minimal_pairs=false left no train row"):
        load_rows(SFTRecipeConfig(data=str(tmp_path / "pairs"), minimal_pairs=False), tokenizer)


def test_epoch_choice_keeps_the_best_validation_epoch(monkeypatch):
    """After each epoch the served score's validation AUROC is read; a later, worse epoch is undone at train end."""
    from types import SimpleNamespace

    from router_train.lm import sft_head

    model = torch.nn.Linear(2, 1)
    trainer = SimpleNamespace(model=model, signal_head=None)
    scores = iter([0.8, 0.6])
    monkeypatch.setattr(sft_head, "text_weight_grid", lambda *a, **k: (None, {"1.0": next(scores)}))
    choice = sft_head.epoch_choice_callback(SFTRecipeConfig(), trainer, None, None)
    with torch.no_grad():
        model.weight.fill_(1.0)
    choice.on_epoch_end(None, SimpleNamespace(epoch=1.0, global_step=3), None)
    with torch.no_grad():
        model.weight.fill_(2.0)
    choice.on_epoch_end(None, SimpleNamespace(epoch=2.0, global_step=6), None)
    choice.on_train_end(None, None, None)
    assert torch.equal(model.weight, torch.ones_like(model.weight))  # epoch 1's weights are back
    assert choice.report() == {"epochs": [{"epoch": 1, "step": 3, "validation_auroc": 0.8},
                                          {"epoch": 2, "step": 6, "validation_auroc": 0.6}], "kept_epoch": 1}
