"""The router's signal head: trained with the adapter in SFT, saved beside it, and scored identically by the
training metrics, eval (serving.router.build), the HTTP server and the remote router (first-token log-probs from
an endpoint + the head)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from fastapi.testclient import TestClient

from router_train.lm import sft
from router_train.lm.decisions import escalation_scores
from router_train.lm.recipe_config import LoraSettings
from serving.routers import RouterSpec, build
from serving.routers.lm_head import action_pieces
from serving.routers.remote import RemoteRouter
from serving.server import ServeConfig, create_app
from serving.signals import FEATURES, SIGNAL_HEAD_FILE, feature_matrix
from tests.helpers.router_fixtures import build_tiny_model_dir, record
from tiermem import contract
from tiermem.models.logistic import read_logistic
from tiermem.runs.run_meta import read_run_meta
from tiermem.stats import auroc


def _varied(i: int, conv: str, s_ok: bool, r_ok: bool) -> dict:
    """A fixture record whose signals differ from row to row (retrieval scores, overlap, question form)."""
    rec = record(i, conv, s_ok, r_ok)
    rec["router_summaries"][0]["score"] = 0.9 - 0.07 * i
    rec["router_summaries"][1]["score"] = 0.2 + 0.03 * i
    if i % 3 == 0:
        rec["question"] = f"How many things did Caroline do, number {i}?"
    return rec


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from datasets import Dataset, DatasetDict

    root = tmp_path_factory.mktemp("signal_head")
    train = [_varied(i, "c1" if i < 4 else "c2", i % 2 == 0, True) for i in range(8)]
    validation = [_varied(i, "c3", i % 2 == 0, True) for i in range(8, 12)]
    DatasetDict({"train": Dataset.from_list(train), "validation": Dataset.from_list(validation)}).save_to_disk(
        str(root / "dataset"))
    base = build_tiny_model_dir(root / "base")
    cfg = sft.SFTRecipeConfig(
        model=str(base), data=str(root / "dataset"), output_dir=str(root / "sft"),
        lora=LoraSettings(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"], top_layers=1),
        loss=sft.LossConfig(kind="decision", signal_head=True), eval_generate_limit=0,
        metrics_train_rows=8, trainer={"max_steps": 3, "per_device_train_batch_size": 4, "learning_rate": 1e-2,
                                       "logging_steps": 1})
    result = sft.train(cfg)
    return SimpleNamespace(result=result, out=result.output_dir, validation=validation)


def test_head_is_trained_saved_and_named_in_the_metadata(run):
    from router_train.lm.objectives import TEXT_WEIGHTS

    meta = read_run_meta(run.out)
    info = meta.data["signal_head"]
    # the LM margin's weight is the validation-AUROC argmax of the grid (ties: the larger weight)
    grid = info["text_weight_validation_auroc"]
    assert set(grid) == {str(w) for w in TEXT_WEIGHTS}
    assert info["text_weight"] == max(TEXT_WEIGHTS, key=lambda w: (grid[str(w)], w))
    # the head saved is the trained one, its bias moved by (1 - weight) x the mean validation margin
    trained = run.result.model.router_signal_head.to_logistic()
    tok = run.result.tokenizer
    prompts = [contract.render_prompt(tok, r["question"], r["router_summaries"]) for r in run.validation]
    mean_margin = float(np.mean(escalation_scores(run.result.model, tok, prompts)))
    saved = read_logistic(run.out / SIGNAL_HEAD_FILE)
    assert saved.weights == pytest.approx(trained.weights)
    assert saved.bias == pytest.approx(trained.bias + (1 - info["text_weight"]) * mean_margin, abs=1e-5)
    assert info["bias_shift"] == pytest.approx(saved.bias - trained.bias)
    assert info["file"] == SIGNAL_HEAD_FILE and info["features"] == list(FEATURES)
    head = read_logistic(run.out / SIGNAL_HEAD_FILE)
    assert head.weights == pytest.approx(list(info["weights"].values()))
    assert head.weights != pytest.approx(list(info["init_weights"].values()), abs=1e-6)  # trained, not just fitted


def test_training_metrics_eval_and_serve_read_one_score(run):
    questions = [r["question"] for r in run.validation]
    summaries = [r["router_summaries"] for r in run.validation]
    router = build(RouterSpec(path=str(run.out)))
    assert router.signal_head is not None and router.summary_fields == ("score",)
    served = router.score(questions, summaries)

    tok = run.result.tokenizer
    prompts = [contract.render_prompt(tok, q, s) for q, s in zip(questions, summaries, strict=True)]
    head = read_logistic(run.out / SIGNAL_HEAD_FILE)
    text_weight = read_run_meta(run.out).data["signal_head"]["text_weight"]
    assert router.text_weight == text_weight
    trained = escalation_scores(run.result.model, tok, prompts, signal_head=head,
                                signals=feature_matrix(questions, summaries), text_weight=text_weight)
    assert trained == pytest.approx(served, abs=1e-4)
    # the head contributes: the LM margin alone is a different number
    lm_only = escalation_scores(run.result.model, tok, prompts)
    assert max(abs(a - b) for a, b in zip(lm_only, served, strict=True)) > 1e-3
    heads = head.log_odds(feature_matrix(questions, summaries))
    assert served == pytest.approx([text_weight * m + h for m, h in zip(lm_only, heads, strict=True)], abs=1e-4)

    val = read_run_meta(run.out).metrics["validation"]
    labels = [r["label"] == "ESCALATE" for r in run.validation]
    assert val["auroc"] == pytest.approx(auroc(served, labels))

    client = TestClient(create_app(router, ServeConfig()))
    body = {"question": questions[0], "summaries": summaries[0]}
    got = client.post("/route", json=body)
    assert got.status_code == 200, got.text
    assert got.json()["p_escalate"] == pytest.approx(1 / (1 + math.exp(-served[0])), abs=1e-6)
    unscored = {"question": questions[0], "summaries": [{k: v for k, v in u.items() if k != "score"}
                                                        for u in summaries[0]]}
    refused = client.post("/route", json=unscored)  # the head needs the retrieval scores: named, before batching
    assert refused.status_code == 422 and "score" in refused.text


def test_scoring_without_signal_rows_is_refused(run):
    router = build(RouterSpec(path=str(run.out)))
    with pytest.raises(ValueError, match="signal head"):
        router.score_prompts(["a prompt"])


class _FakeEndpoint:
    """An OpenAI-compatible chat endpoint answering with the local router's own greedy tokens and log-probs."""

    def __init__(self, local) -> None:
        self.local = local
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, model, messages, max_tokens, temperature, logprobs=False, top_logprobs=0, **_):
        prompt = self.local.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        # The contract's completion starts with OUTPUT_PREFIX: generate from there, as a served adapter would.
        prefix_ids = self.local.tokenizer(contract.OUTPUT_PREFIX, add_special_tokens=False).input_ids
        prefix = [SimpleNamespace(token=self.local.tokenizer.decode([t]), logprob=0.0, top_logprobs=[])
                  for t in prefix_ids]
        gen = self.local.generate([prompt + contract.OUTPUT_PREFIX], max_new_tokens=2, top_logprobs=top_logprobs)[0]
        steps = [SimpleNamespace(token=s["token"], logprob=s["logprob"],
                                 top_logprobs=[SimpleNamespace(**c) for c in s["top_logprobs"]])
                 for s in gen["logprobs"]]
        message = SimpleNamespace(content=contract.OUTPUT_PREFIX + gen["text"])
        return SimpleNamespace(choices=[SimpleNamespace(message=message, logprobs=SimpleNamespace(
            content=prefix + steps))], usage=SimpleNamespace(prompt_tokens=gen["prompt_tokens"]))


def test_remote_router_adds_the_head_to_the_endpoints_first_token_logprobs(run):
    local = build(RouterSpec(path=str(run.out)))
    vocab = len(local.tokenizer)
    head = read_logistic(run.out / SIGNAL_HEAD_FILE)
    pieces = action_pieces(local.tokenizer)  # what build() reads from the run directory's tokenizer
    text_weight = read_run_meta(run.out).data["signal_head"]["text_weight"]
    built = build(RouterSpec(kind="remote", base_url="http://127.0.0.1:9/v1", model="router",
                             signal_head=str(run.out)))
    assert (built.action_pieces, built.text_weight) == (pieces, text_weight)
    remote = RemoteRouter(base_url="http://127.0.0.1:9/v1", model="router", signal_head=head, top_logprobs=vocab,
                          action_pieces=pieces, text_weight=text_weight)
    remote.client = _FakeEndpoint(local)
    q, s = run.validation[0]["question"], run.validation[0]["router_summaries"]
    decision = remote.route(q, s)
    assert decision.error is None and remote.used["logprobs"] == 1
    expected = local.score([q], [s])[0]
    assert decision.score == pytest.approx(expected, abs=1e-4)

    lm_only = RemoteRouter(base_url="http://127.0.0.1:9/v1", model="router", top_logprobs=vocab,
                           action_pieces=pieces)
    lm_only.client = _FakeEndpoint(local)
    margin = lm_only.route(q, s).score
    assert decision.score - text_weight * margin == pytest.approx(
        float(head.log_odds(np.array([feature_matrix([q], [s])[0]]))[0]), abs=1e-6)


def test_score_parts_sum_to_the_score_and_eval_reports_what_carries_it(run):
    from evaluation.evaluate import score_part_auroc
    from serving.signals import FEATURE_GROUPS

    router = build(RouterSpec(path=str(run.out)))
    questions = [r["question"] for r in run.validation]
    summaries = [r["router_summaries"] for r in run.validation]
    decisions = router.route_batch(questions, summaries)
    head = read_logistic(run.out / SIGNAL_HEAD_FILE)
    for d in decisions:  # parts: the weighted text margin and each signal group's share
        assert set(d.score_parts) == {"text", *(f"signals: {g}" for g in FEATURE_GROUPS)}
        assert sum(d.score_parts.values()) + head.bias == pytest.approx(d.score, abs=1e-9)
    parts = score_part_auroc(run.validation, decisions)
    labels = [r["label"] == "ESCALATE" for r in run.validation]
    assert parts["full"] == pytest.approx(auroc([d.score for d in decisions], labels))
    assert parts["text"]["alone"] == pytest.approx(auroc([d.score_parts["text"] for d in decisions], labels))
    # a router without parts reports none
    assert score_part_auroc(run.validation, [d.__class__(**{**d.__dict__, "score_parts": None}) for d in decisions]) \
        is None


@pytest.mark.parametrize("bad", [-1.0, "0.5", float("nan"), True])
def test_a_nonsensical_text_weight_is_refused_at_load(run, tmp_path, bad):
    import json
    import shutil

    from tiermem.settings.errors import RouterLoadError

    copy = tmp_path / "copy"
    shutil.copytree(run.out, copy)
    meta_path = copy / "tiermem_router.json"
    meta = json.loads(meta_path.read_text())
    meta["data"]["signal_head"]["text_weight"] = bad
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(RouterLoadError, match="text_weight"):
        build(RouterSpec(path=str(copy)))


def test_a_zero_text_weight_routes_by_the_head_without_running_the_lm(run, tmp_path):
    import json
    import shutil

    copy = tmp_path / "zero"
    shutil.copytree(run.out, copy)
    meta_path = copy / "tiermem_router.json"
    meta = json.loads(meta_path.read_text())
    meta["data"]["signal_head"]["text_weight"] = 0.0
    meta_path.write_text(json.dumps(meta))
    router = build(RouterSpec(path=str(copy)))
    router._score = None  # any LM forward pass would fail
    questions = [r["question"] for r in run.validation]
    summaries = [r["router_summaries"] for r in run.validation]
    head = read_logistic(copy / SIGNAL_HEAD_FILE)
    decisions = router.route_batch(questions, summaries)
    assert [d.score for d in decisions] == pytest.approx(head.log_odds(feature_matrix(questions, summaries)).tolist())
    assert all(d.prompt_tokens == 0 and d.score_parts["text"] == 0.0 for d in decisions)


def test_continuing_a_head_router_starts_from_the_head_as_trained(run):
    from router_train.lm.sft_head import initial_signal_head

    meta = read_run_meta(run.out)
    cfg = sft.SFTRecipeConfig(loss=sft.LossConfig(kind="decision", signal_head=True))
    head, centre = initial_signal_head(cfg, None, meta, str(run.out))
    assert not centre
    assert head.bias == pytest.approx(run.result.model.router_signal_head.to_logistic().bias, abs=1e-6)


def test_a_bias_shift_read_back_is_checked_like_input(tmp_path):
    """The shift undone to get the head as SFT trained it comes from tiermem_router.json: a non-finite one is a
    named load error, never a NaN bias in GRPO's prior."""
    from types import SimpleNamespace

    import numpy as np

    from serving.routers.lm_head import head_as_trained
    from tiermem.models.logistic import fit_logistic, save_logistic
    from tiermem.settings.errors import RouterLoadError

    x = np.random.default_rng(0).normal(size=(20, len(FEATURES)))
    save_logistic(tmp_path / SIGNAL_HEAD_FILE, fit_logistic(x, np.arange(20) % 2, FEATURES))
    meta = SimpleNamespace(data={"signal_head": {"file": SIGNAL_HEAD_FILE, "text_weight": 0.5, "bias_shift": 0.25}})
    trained, served, weight = head_as_trained(tmp_path, meta)
    assert weight == 0.5 and trained.bias == pytest.approx(served.bias - 0.25)
    meta.data["signal_head"]["bias_shift"] = float("nan")
    with pytest.raises(RouterLoadError, match=r"data.signal_head.bias_shift"):
        head_as_trained(tmp_path, meta)
