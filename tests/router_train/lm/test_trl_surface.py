"""What GRPO relies on in TRL, pinned: generation through the public `rollout_func`, and the one private method it
still overrides (`_get_per_token_logps_and_entropies`, named in docs/DESIGN.md), with the signature and the call
sites it is written against. A TRL release that moves either fails here, not silently in a run."""

import inspect

from trl import GRPOTrainer

from router_train.lm.grpo_policy import DecisionGRPOTrainer

PINNED = "_get_per_token_logps_and_entropies"


def test_generation_goes_through_trls_public_rollout_func():
    assert "rollout_func" in inspect.signature(GRPOTrainer.__init__).parameters
    source = inspect.getsource(GRPOTrainer._generate)
    assert "self.rollout_func(prompts, self)" in source  # called with the prompts and the trainer
    for key in ("prompt_ids", "completion_ids", "logprobs"):  # the keys sample_actions returns
        assert f'"{key}"' in source
    assert set(inspect.signature(DecisionGRPOTrainer.sample_actions).parameters) == {"self", "prompts", "trainer"}


def test_the_only_private_trl_method_overridden_is_the_pinned_one():
    overridden = {name for name in vars(DecisionGRPOTrainer)
                  if name.startswith("_") and not name.startswith("__") and hasattr(GRPOTrainer, name)}
    assert overridden == {PINNED}


def test_the_pinned_method_keeps_the_signature_and_callers_the_override_is_written_for():
    theirs = inspect.signature(getattr(GRPOTrainer, PINNED)).parameters
    ours = inspect.signature(getattr(DecisionGRPOTrainer, PINNED)).parameters
    assert list(theirs)[:5] == ["self", "model", "input_ids", "attention_mask", "logits_to_keep"]
    assert {"batch_size", "compute_entropy", "compute_aux_loss"} <= set(theirs) & set(ours)
    # the rest (image inputs) reach TRL's own path through **forward
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ours.values())
    # the loss reads the policy's log-probs through it, as (log-probs, entropies, aux loss)
    assert f"per_token_logps, entropies, aux_loss = self.{PINNED}(" in inspect.getsource(GRPOTrainer._compute_loss)
