import shutil

import pytest

from serving.routers import Router, RouterSpec, build
from serving.routers.fixed import AlwaysAnswer, AlwaysEscalate
from serving.routers.local import LocalRouter
from serving.routers.registry import ROUTER_KINDS, router_class
from serving.routers.teacher import TeacherRouter
from tests.helpers.router_fixtures import FIXTURES, edit_run_meta, make_router_run
from tiermem import contract
from tiermem.runs.run_meta import RunMetaFile, read_run_meta

QUESTIONS = [q for q, _, _ in FIXTURES]
SUMMARIES = [s for _, s, _ in FIXTURES]
LABELS = [label for _, _, label in FIXTURES]


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory):
    return make_router_run()


@pytest.fixture(scope="module")
def fast(run_dir):
    return Router.from_pretrained(run_dir)


def test_action_first_tokens_differ_and_follow_the_prefix(fast):
    tok = fast.tokenizer
    assert fast.answer_id != fast.escalate_id
    assert tok.decode([fast.answer_id]) and "ANSWER".startswith(tok.decode([fast.answer_id]))
    assert "ESCALATE".startswith(tok.decode([fast.escalate_id]))


def test_fast_path_equals_generate_path_on_fixtures(run_dir, fast):
    gen = LocalRouter.from_pretrained(run_dir, mode="generate")
    fast_d = fast.route_batch(QUESTIONS, SUMMARIES)
    gen_d = gen.route_batch(QUESTIONS, SUMMARIES)
    assert all(d.parsed_ok for d in gen_d), [d for d in gen_d if not d.parsed_ok]
    assert [d.action for d in fast_d] == [d.action for d in gen_d] == LABELS
    assert all(d.reason for d in gen_d)  # the generate path returns the model's reason
    assert all(0.0 <= d.p_escalate <= 1.0 and d.prompt_tokens > 0 for d in fast_d)
    assert all((d.score >= 0) == (d.action == "ESCALATE") for d in fast_d)  # log-odds vs the default 0


def test_adapter_is_applied(run_dir, fast):
    # The fixture's base model was trained on the flipped labels; only the adapter routes them right.
    from tiermem.models.specs import load_causal_lm

    model, tok = load_causal_lm(read_run_meta(run_dir).base_model)
    base_router = LocalRouter(model, tok)
    assert [d.action for d in base_router.route_batch(QUESTIONS, SUMMARIES)] != LABELS
    assert [d.action for d in fast.route_batch(QUESTIONS, SUMMARIES)] == LABELS


def test_batch_equals_single_and_prefix_cache_changes_nothing(run_dir, fast):
    assert fast._prefix_cache is not None and len(fast.prefix_ids) > 50
    batch = [d.p_escalate for d in fast.route_batch(QUESTIONS, SUMMARIES)]
    single = [fast.route(q, s).p_escalate for q, s in zip(QUESTIONS, SUMMARIES, strict=True)]
    uncached = LocalRouter.load(run_dir, prefix_cache=False)
    plain = [d.p_escalate for d in uncached.route_batch(QUESTIONS, SUMMARIES)]
    assert batch == pytest.approx(single, abs=1e-5)
    assert batch == pytest.approx(plain, abs=1e-5)
    # the batch mixes prompt lengths, so padding really happened
    assert len({d.prompt_tokens for d in fast.route_batch(QUESTIONS, SUMMARIES)}) > 1


def test_threshold_override_and_stored_calibration(run_dir, tmp_path, fast):
    import math


    d = fast.route_batch(QUESTIONS, SUMMARIES)
    m = [x.score for x in d]
    assert fast.threshold_logit == 0.0  # log-odds: the argmax decision
    assert [x.p_escalate for x in d] == pytest.approx([1 / (1 + math.exp(-x)) for x in m])
    everything = fast.route_batch(QUESTIONS, SUMMARIES, threshold_logit=-1e9)
    assert [x.action for x in everything] == ["ESCALATE"] * len(m)
    cut = sorted(m)[1]  # strictly between the two smallest -> only the smallest is ANSWER
    mid = (sorted(m)[0] + cut) / 2
    actions = [x.action for x in fast.route_batch(QUESTIONS, SUMMARIES, threshold_logit=mid)]
    assert actions.count("ANSWER") == 1 and actions[m.index(min(m))] == "ANSWER"
    with pytest.raises(ValueError, match="threshold"):
        fast.route(QUESTIONS[0], SUMMARIES[0], threshold_logit=float("nan"))

    calibrated = tmp_path / "calibrated"
    shutil.copytree(run_dir, calibrated)
    edit_run_meta(calibrated, calibration={"threshold_logit": mid})
    loaded = LocalRouter.from_pretrained(calibrated)
    assert loaded.threshold_logit == mid  # the calibrated threshold applies
    assert [x.action for x in loaded.route_batch(QUESTIONS, SUMMARIES)] == actions
    assert loaded.route(QUESTIONS[0], SUMMARIES[0], threshold_logit=-1e9).action == "ESCALATE"


def test_margins_are_float64_and_never_saturate(run_dir):
    """Scaled-up logits saturate a float32 softmax at exactly 0/1; the log-odds margins stay distinct."""
    import copy

    import torch

    base = Router.from_pretrained(run_dir)
    model = copy.deepcopy(base.model)
    with torch.no_grad():
        model.model.norm.weight.mul_(300.0)  # tied embeddings: every logit grows ~300x
    sharp = LocalRouter(model, base.tokenizer)
    d = sharp.route_batch(QUESTIONS, SUMMARIES)
    scores = [x.score for x in d]
    assert all(isinstance(s, float) for s in scores)
    f32 = torch.softmax(torch.tensor([[0.0, s] for s in scores], dtype=torch.float32), dim=-1)[:, 1].tolist()
    assert len(set(f32)) < len(f32)  # the float32 probabilities tie ...
    assert len(set(scores)) == len(scores)  # ... the margins do not
    assert [x.action for x in d] == ["ESCALATE" if s >= 0 else "ANSWER" for s in scores]


class _BosTokenizer:
    """The fixture tokenizer, except that add_special_tokens=True (the default) prepends BOS."""

    def __init__(self, inner):
        self.__dict__["inner"] = inner

    def __call__(self, text, add_special_tokens=True, **kw):
        out = self.inner(text, add_special_tokens=False, **kw)
        if add_special_tokens:
            out["input_ids"] = [self.inner.bos_token_id, *out["input_ids"]]
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __setattr__(self, name, value):
        setattr(self.inner, name, value)


def test_score_prompts_equals_score_with_a_bos_adding_tokenizer(fast):
    tok = _BosTokenizer(fast.tokenizer)
    assert tok("hi").input_ids[0] == fast.tokenizer.bos_token_id != tok("hi", add_special_tokens=False).input_ids[0]
    router = LocalRouter(fast.model, tok)
    prompts = [contract.render_prompt(tok, q, s) for q, s in zip(QUESTIONS, SUMMARIES, strict=True)]
    from_prompts = router.score_prompts(prompts)
    assert from_prompts == pytest.approx(router.score(QUESTIONS, SUMMARIES), abs=1e-9)
    assert from_prompts == pytest.approx(fast.score(QUESTIONS, SUMMARIES), abs=1e-5)
    uncached = LocalRouter(fast.model, tok, prefix_cache=False)
    assert uncached.score_prompts(prompts) == pytest.approx(from_prompts, abs=1e-5)


def test_contract_version_mismatch_is_refused(run_dir, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    meta = read_run_meta(old)
    meta.contract_version = "tiermem-router-contract/0"
    RunMetaFile.new(old, meta).save()
    with pytest.raises(contract.ContractVersionError, match="contract/0.*retrain"):
        Router.from_pretrained(old)


def test_missing_run_files_fail_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="tiermem_router.json"):
        Router.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such directory"):
        Router.from_pretrained(tmp_path / "nope")


def test_fixed_routers_and_registry():
    assert {"local", "remote", "teacher", "always-answer", "always-escalate", "top1-score", "features"} <= set(
        ROUTER_KINDS)
    assert all(router_class(kind).kind == kind for kind in ROUTER_KINDS)  # every entry imports and names itself
    assert isinstance(build("always-answer"), AlwaysAnswer)
    a = AlwaysAnswer().route_batch(QUESTIONS, SUMMARIES)
    e = AlwaysEscalate().route("q", [])
    assert {d.action for d in a} == {"ANSWER"} and e.action == "ESCALATE" and e.p_escalate == 1.0
    with pytest.raises(ValueError, match="unknown router kind"):
        build(RouterSpec(kind="nope", path=None))


def test_teacher_router_parses_and_records_errors():
    from tiermem.llm import ScriptedLLM

    replies = ['{"action": "ANSWER", "reason": "stated"}', "I think we should answer", RuntimeError("down")]
    teacher = TeacherRouter(ScriptedLLM(replies))
    d = teacher.route_batch(["a", "b", "c"], [[], [], []])
    assert (d[0].action, d[0].reason, d[0].parsed_ok) == ("ANSWER", "stated", True)
    assert (d[1].action, d[1].parsed_ok, d[1].error) == ("ESCALATE", False, None)  # unparseable -> ESCALATE, flagged
    assert d[2].action == "ESCALATE" and d[2].error and "down" in d[2].error
    assert teacher.llm.calls[0] == contract.render_messages("a", [])


def test_memory_runtime_answers_with_a_loaded_router(tmp_path, fast):
    """The runtime takes the loaded router as is: its decision on the runtime's own retrieved units (objects with
    .text/.date) picks the path."""
    from tests.helpers.memory_runtime import answer_llm, build
    from tiermem.data import load_conversations

    conv = load_conversations(None)[1]
    rt = build(tmp_path, conv)
    rt.llm = answer_llm()
    question = conv.questions[0]
    out = rt.answer(question, fast)
    direct = fast.route(question.question, out.retrieved)
    assert out.decided_by == "router" and out.router_parsed_ok and out.router_error is None
    assert out.action == direct.action
    assert (out.research is not None) == (direct.action == "ESCALATE")


def test_training_metrics_and_serving_share_one_scorer_with_a_bos_adding_tokenizer(fast):
    """Train/serve skew guard: router_train.lm.decisions (validation metrics during training) and the serving
    router read identical scores and action tokens even when the tokenizer adds BOS by default."""
    from router_train.lm.decisions import escalation_scores
    from serving.routers.lm_head import action_token_ids

    tok = _BosTokenizer(fast.tokenizer)
    prompts = [contract.render_prompt(tok, q, s) for q, s in zip(QUESTIONS, SUMMARIES, strict=True)]
    served = LocalRouter(fast.model, tok).score(QUESTIONS, SUMMARIES)
    fast.model.train()
    trained = escalation_scores(fast.model, tok, prompts)
    assert fast.model.training  # the scorer restores train mode
    fast.model.eval()
    assert trained == pytest.approx(served, abs=1e-5)
    assert action_token_ids(tok, prompts[0]) == (fast.answer_id, fast.escalate_id)
