"""A router behind an OpenAI-compatible endpoint (`vllm serve BASE --enable-lora --lora-modules router=RUN_DIR`)."""

from __future__ import annotations

import math
import os
import time
from typing import Any

from serving.routers.base import (
    DEFAULT_THRESHOLD_LOGIT,
    Decision,
    Router,
    Summaries,
    check_lengths,
    decide,
    decision_from_text,
    error_decision,
    sigmoid,
)
from serving.routers.lm_head import (
    action_pieces,
    check_head_features,
    check_text_weight,
    read_signal_head,
    served_score,
)
from serving.signals import feature_matrix
from tiermem import contract
from tiermem.models.logistic import LogisticModel
from tiermem.runs.run_meta import read_run_meta
from tiermem.settings.errors import RouterLoadError, UsageError


class RemoteRouter(Router):
    """Reads the action tokens' log-probs; else asks for a constrained choice between the two contract prefixes;
    else (the constraint ignored) parses the generated JSON."""

    kind = "remote"
    spec_fields = ("base_url", "model", "api_key_env", "max_tokens", "signal_head")

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY",
                 threshold_logit: float | None = None, max_tokens: int = 64,
                 top_logprobs: int = 10, timeout_s: float = 60.0, max_retries: int = 3,
                 signal_head: LogisticModel | None = None, text_weight: float = 1.0,
                 action_pieces: dict[str, str] | None = None) -> None:
        from openai import OpenAI

        # The served adapter's head: the endpoint returns the LM's first-token log-probs, the head is added here.
        self.signal_head = None if signal_head is None else check_head_features(signal_head)
        self.text_weight = check_text_weight(text_weight)
        # action -> the text of the first token the router's tokenizer gives it after OUTPUT_PREFIX (what the local
        # fast path reads); None: guessed from the returned pieces (the longest one that starts the action)
        self.action_pieces = action_pieces
        self.client = OpenAI(base_url=base_url, api_key=os.environ.get(api_key_env) or "EMPTY",
                             timeout=timeout_s, max_retries=max_retries)
        self.model = model
        self.name = f"remote:{model}@{base_url}"
        self.threshold_logit = DEFAULT_THRESHOLD_LOGIT if threshold_logit is None else threshold_logit
        self.strategy = "auto"  # what this server answers: auto (log-probs first), then choice or generate
        self.max_tokens = max_tokens
        self.top_logprobs = top_logprobs
        self.choices = [contract.OUTPUT_PREFIX + a for a in contract.ACTIONS]
        self.used: dict[str, int] = {"logprobs": 0, "choice": 0, "generate": 0}

    @classmethod
    def check_spec(cls, spec):
        if not (spec.base_url and spec.model):
            raise UsageError("router.kind=remote needs base_url and model (router.base_url, router.model)")

    @classmethod
    def from_spec(cls, spec, trunk_cache=None):
        head, pieces, text_weight = None, None, 1.0
        if spec.signal_head:
            from transformers import AutoTokenizer

            head, text_weight = read_signal_head(spec.signal_head, read_run_meta(spec.signal_head))
            if head is None:
                raise RouterLoadError(f"router.signal_head={spec.signal_head}: that run has no signal head")
            pieces = action_pieces(AutoTokenizer.from_pretrained(spec.signal_head))
        return cls(base_url=spec.base_url, model=spec.model, api_key_env=spec.api_key_env,
                   threshold_logit=spec.threshold_logit, max_tokens=spec.max_tokens,
                   signal_head=head, text_weight=text_weight, action_pieces=pieces)

    def _p_from_logprobs(self, content: Any) -> float | None:
        """Log-odds of ESCALATE over ANSWER from both actions' first tokens among the top log-probs after OUTPUT_PREFIX
        (None when they are not both among the top)."""
        if not content:
            return None
        text = ""
        for tok in content:
            if text.lstrip() == contract.OUTPUT_PREFIX:
                # The action's own first token is the longest piece that starts it ("AN" rather than "A", which
                # begins another spelling): that is the token the local fast path reads.
                best: dict[str, tuple[int, float]] = {}
                for cand in tok.top_logprobs or []:
                    piece = cand.token
                    for action in contract.ACTIONS:
                        if self.action_pieces is not None:
                            if piece == self.action_pieces[action]:
                                best[action] = (len(piece), cand.logprob)
                        elif piece and action.startswith(piece) and (len(piece), cand.logprob) > best.get(
                                action, (0, -math.inf)):
                            best[action] = (len(piece), cand.logprob)
                if len(best) == 2:
                    return best["ESCALATE"][1] - best["ANSWER"][1]  # log-odds over the two actions
                return None
            text += tok.token
            if len(text.lstrip()) > len(contract.OUTPUT_PREFIX):
                return None
        return None

    def _one(self, question: str, summaries: Summaries, threshold_logit: float) -> Decision:
        messages = contract.render_messages(question, summaries)
        started = time.perf_counter()
        strategy = self.strategy
        if strategy == "auto":
            resp = self.client.chat.completions.create(
                model=self.model, messages=messages, max_tokens=self.max_tokens, temperature=0.0,
                logprobs=True, top_logprobs=self.top_logprobs)
            choice = resp.choices[0]
            content = getattr(choice.logprobs, "content", None) if choice.logprobs else None
            margin = self._p_from_logprobs(content)
            dt = time.perf_counter() - started
            tokens = resp.usage.prompt_tokens if resp.usage else 0
            parsed = contract.parse(choice.message.content or "")
            if margin is not None:
                self.used["logprobs"] += 1
                clipped = None
                if self.signal_head is not None:
                    x = feature_matrix([question], [summaries])
                    margin = served_score(margin, float(self.signal_head.log_odds(x)[0]), self.text_weight)
                    clipped = self.signal_head.clipped_features(x)[0]
                action = decide(margin, threshold_logit)
                return Decision(action, sigmoid(margin), parsed.reason, True, dt, tokens, score=margin,
                                clipped=clipped)
            if self.signal_head is not None:  # no margin to add the head to: never a decision without it
                raise RuntimeError("the endpoint returned no log-probs for both actions at the decision position; "
                                   "a router with a signal head needs them (vLLM: logprobs=True, top_logprobs>=2)")
            if content is not None:
                # Log-probs were returned but the action tokens are not among them: the text is all we have.
                self.used["generate"] += 1
                return Decision(parsed.action, None, parsed.reason, parsed.parsed_ok, dt, tokens)
            self.strategy = strategy = "choice"  # this server returns no log-probs: stop asking for them
        if strategy == "choice":
            import openai

            try:
                resp = self.client.chat.completions.create(
                    model=self.model, messages=messages, max_tokens=16, temperature=0.0,
                    extra_body={"structured_outputs": {"choice": self.choices}})
            except (openai.BadRequestError, openai.UnprocessableEntityError):
                # The server rejects the constraint field (e.g. `transformers serve` answers 422): generate instead.
                self.strategy = "generate"
            else:
                text = resp.choices[0].message.content or ""
                dt = time.perf_counter() - started
                tokens = resp.usage.prompt_tokens if resp.usage else 0
                if text.strip() in self.choices:
                    self.used["choice"] += 1
                    return decision_from_text(text, dt, tokens)
                self.strategy = "generate"  # the constraint was ignored: parse free generations from now on
                if len(text) >= 20:  # a long enough free generation is as good as a generate call
                    self.used["generate"] += 1
                    return decision_from_text(text, dt, tokens)
        resp = self.client.chat.completions.create(
            model=self.model, messages=messages, max_tokens=self.max_tokens, temperature=0.0)
        self.used["generate"] += 1
        return decision_from_text(resp.choices[0].message.content or "", time.perf_counter() - started,
                          resp.usage.prompt_tokens if resp.usage else 0)

    def route_batch(self, questions, summaries, threshold_logit=None):
        check_lengths(questions, summaries)
        t = self._threshold_logit(threshold_logit)
        out = []
        for q, s in zip(questions, summaries, strict=True):
            started = time.perf_counter()
            try:
                out.append(self._one(q, s, t))
            except Exception as exc:  # openai already retried with backoff; record, never a silent ANSWER
                out.append(error_decision(exc, time.perf_counter() - started))
        return out


