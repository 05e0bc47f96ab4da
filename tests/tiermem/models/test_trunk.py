"""The frozen trunk: running the cached bottom layers + the top layers equals the full model, adapter included."""

import pytest
import torch

from tiermem.models.torch_state import padded
from tiermem.models.trunk import FrozenTrunk, top_layers_holding
from tiermem.settings.errors import UsageError


def _tiny(num_layers=3, seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=num_layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    return LlamaForCausalLM(config).eval()


@pytest.fixture
def recorded(monkeypatch):
    """Every trunk-state file counts as recorded by the run in its folder (the proof: test_trunk_states_proof.py)."""
    monkeypatch.setattr("tiermem.models.trunk.proof", lambda path, writer: (path.parent.resolve(), "sha256"))


def test_trunk_plus_top_equals_full_model_with_a_top_layer_adapter():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_tiny(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"], layers_to_transform=[2]))
    for name, p in model.named_parameters():  # a non-zero adapter, so the top layer really differs from the base
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)
    ids, mask = padded([[5, 6, 7, 8, 9], [3, 4, 5]], pad=0)
    trunk = FrozenTrunk(model, top_layers=1)
    full = model(input_ids=ids, attention_mask=mask).logits
    via_trunk = trunk.logits(model, ids, mask)
    for b, n in enumerate([5, 3]):  # pads differ (zeros vs pad embeddings); real positions must match
        assert torch.allclose(full[b, :n], via_trunk[b, :n], atol=1e-5)
    assert trunk.misses == 2
    trunk.logits(model, ids, mask)
    assert trunk.misses == 2  # the second pass reuses the cache
    assert len(model.get_base_model().model.layers) == 3  # layers restored after each pass


def test_a_left_padded_batch_reads_each_rows_last_position_as_the_unpadded_row():
    # GRPO's decision token (router_train.lm.grpo_policy) reads left-padded prompts at their last position
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_tiny(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"], layers_to_transform=[2]))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)
    rows = [[5, 6, 7, 8, 9], [3, 4, 5]]
    ids = torch.tensor([[5, 6, 7, 8, 9], [0, 0, 3, 4, 5]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    via_trunk = FrozenTrunk(model, top_layers=1).logits(model, ids, mask, logits_to_keep=1)[:, -1]
    for b, row in enumerate(rows):
        alone = model(input_ids=torch.tensor([row])).logits[0, -1]
        assert torch.allclose(alone, via_trunk[b], atol=1e-5)


def test_gradients_flow_only_through_the_top_layers():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_tiny(), LoraConfig(r=4, target_modules=["q_proj"], layers_to_transform=[2]))
    ids, mask = padded([[1, 2, 3, 4]], pad=0)
    FrozenTrunk(model, top_layers=1).logits(model, ids, mask, logits_to_keep=1).sum().backward()
    grads = [n for n, p in model.named_parameters() if p.grad is not None]
    assert grads and all(".layers.2." in n for n in grads)


def test_unsupported_models_and_bad_splits_are_refused():
    model = _tiny()
    with pytest.raises(ValueError, match="top_layers"):
        FrozenTrunk(model, top_layers=3)
    model.config.model_type = "gemma"
    with pytest.raises(ValueError, match="not supported"):
        FrozenTrunk(model, top_layers=1)


def test_trunk_states_persist_for_the_same_model_only(tmp_path, recorded):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_tiny(), LoraConfig(r=4, target_modules=["q_proj"], layers_to_transform=[2]))
    ids, mask = padded([[5, 6, 7]], pad=0)
    first = FrozenTrunk(model, top_layers=1, cache_file=tmp_path / "t.pt")
    expected = first.logits(model, ids, mask)
    first.save()
    again = FrozenTrunk(model, top_layers=1, cache_file=tmp_path / "t.pt")
    assert torch.allclose(again.logits(model, ids, mask), expected) and again.misses == 0
    other = get_peft_model(_tiny(seed=1), LoraConfig(r=4, target_modules=["q_proj"], layers_to_transform=[2]))
    with pytest.raises(ValueError, match="another model"):
        FrozenTrunk(other, top_layers=1, cache_file=tmp_path / "t.pt")


def test_a_prompt_that_starts_another_runs_row_reads_its_first_states(tmp_path, recorded):
    # GRPO's prompt is the start of SFT's row (prompt + completion): the causal trunk's states of the shorter
    # sequence are the longer one's first positions, read from SFT's file instead of recomputed.
    from tiermem.settings.errors import MissingFileError

    model = _tiny()
    sft = FrozenTrunk(model, top_layers=1, cache_file=tmp_path / "sft.pt")
    sft.hidden(*padded([[5, 6, 7, 8, 9, 10]], pad=0))
    sft.save()
    grpo = FrozenTrunk(model, top_layers=1, prefix_file=tmp_path / "sft.pt")
    ids, mask = padded([[5, 6, 7], [4, 6, 7]], pad=0)  # the first starts SFT's row, the second does not
    fresh = FrozenTrunk(model, top_layers=1).hidden(ids, mask)
    assert torch.allclose(grpo.hidden(ids, mask), fresh, atol=1e-5)
    assert (grpo.reused, grpo.misses) == (1, 1)
    assert torch.allclose(grpo.logits(model, ids, mask), model(input_ids=ids, attention_mask=mask).logits, atol=1e-5)
    with pytest.raises(UsageError, match="another model"):
        FrozenTrunk(_tiny(seed=1), top_layers=1, prefix_file=tmp_path / "sft.pt")
    with pytest.raises(MissingFileError, match="no trunk-state file"):
        FrozenTrunk(model, top_layers=1, prefix_file=tmp_path / "absent.pt")


def test_a_report_on_a_trained_rows_prompt_reads_the_rows_states_and_the_file_keeps_new_ones(tmp_path, recorded):
    model = _tiny()
    trunk = FrozenTrunk(model, top_layers=1, cache_file=tmp_path / "sft.pt")
    trunk.hidden(*padded([[5, 6, 7, 8, 9, 10]], pad=0))  # a row trained on: prompt + completion
    trunk.save()
    ids, mask = padded([[5, 6, 7], [4, 6, 7]], pad=0)  # its prompt, and a validation prompt
    fresh = FrozenTrunk(model, top_layers=1).hidden(ids, mask)
    assert torch.allclose(trunk.hidden(ids, mask), fresh, atol=1e-5)
    assert (trunk.reused, trunk.misses) == (1, 2)
    trunk.save()  # the cache holds sequences the file does not: written again
    stamp = (tmp_path / "sft.pt").stat().st_mtime_ns
    again = FrozenTrunk(model, top_layers=1, cache_file=tmp_path / "sft.pt")
    assert len(again.cache) == 3
    again.hidden(ids, mask)  # all read from the file: nothing new, the file is left alone
    again.save()
    trunk.save()  # nothing new since its last save either
    assert again.misses == 0 and (tmp_path / "sft.pt").stat().st_mtime_ns == stamp


class _Payload:
    """What a planted trunk cache could hold: unpickling it calls `os.makedirs(marker)`."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.makedirs, (self.marker,))


def test_a_planted_pickle_in_the_trunk_cache_never_runs(tmp_path, monkeypatch):
    from tiermem.settings.errors import StoreError

    model = _tiny()
    cache = tmp_path / "trunk_states.pt"
    marker = tmp_path / "payload-ran"
    torch.save({"fingerprint": "x", "states": _Payload(str(marker))}, cache)
    # torch < 2.6 unpickled everything unless told weights_only=True: the loader must say so itself
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    with pytest.raises(StoreError, match="trunk_states.pt: not a trunk-state file"):
        FrozenTrunk(model, top_layers=1, cache_file=cache)
    assert not marker.exists()
    torch.save(["not", "a", "trunk"], cache)  # loads under weights_only, but is no trunk-state file
    with pytest.raises(StoreError, match="expected fingerprint and states"):
        FrozenTrunk(model, top_layers=1, cache_file=cache)


def test_top_layers_holding_reads_trainable_and_lora_parameters():
    from peft import LoraConfig, get_peft_model


    top = get_peft_model(_tiny(4), LoraConfig(r=4, target_modules=["q_proj"], layers_to_transform=[2, 3]))
    assert top_layers_holding(top, "trainable") == top_layers_holding(top, "lora") == 2
    for p in top.parameters():  # a loaded adapter for serving: nothing trains, its LoRA weights still count
        p.requires_grad_(False)
    assert top_layers_holding(top, "trainable") is None and top_layers_holding(top, "lora") == 2
    everywhere = get_peft_model(_tiny(3), LoraConfig(r=4, target_modules=["q_proj"]))  # layer 0 too: no trunk
    assert top_layers_holding(everywhere, "lora") is None
    plain = _tiny(3)
    assert top_layers_holding(plain, "lora") is None
    assert top_layers_holding(plain, "trainable") is None  # every layer and the embeddings train
    with pytest.raises(ValueError, match="params"):
        top_layers_holding(plain, "frozen")
