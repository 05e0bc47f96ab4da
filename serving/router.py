"""The router inference wrapper: a tiny RouteLLM-style interface with a registry of implementations.

`Router.from_pretrained(path_or_hub_id)` loads a trained router (base + LoRA adapter, or merged weights)
and checks its contract version. Modes:
- fast (default): one forward pass over the prompt + contract.OUTPUT_PREFIX; the score is the log-odds margin
  logit(ESCALATE) - logit(ANSWER) of the two actions' first tokens, computed in float64 so that no two distinct
  margins tie (a float32 softmax saturates at 1.0); the decision is score >= threshold, the threshold being in
  log-odds too (p_escalate = sigmoid(score) is kept for display). No generation.
- generate: greedy generation of the full JSON, parsed by the contract (audits, reasons).
Other routers: `RemoteRouter` (an OpenAI-compatible endpoint serving the adapter, e.g. vLLM --enable-lora),
`TeacherRouter` (any tiermem LLM prompted with the contract), `AlwaysAnswer`, `AlwaysEscalate`, and the
serve-time baselines of serving/feature_router.py (`top1-score`, `features`), which need no language model.

Every router with a `score()` returns log-odds of ESCALATE (higher = escalate), so calibration, sweeps and
evaluation treat them alike. `load_router(path)` / `Router.from_pretrained(path)` read tiermem_router.json and
build the router kind it names (a LoRA/merged LM unless `router_kind` says otherwise).
"""

from __future__ import annotations

import copy
import math
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from serving.signals import FEATURES, LogisticModel, feature_matrix, read_logistic
from tiermem import contract
from tiermem.artifacts import RunMeta, read_run_meta, verify_files
from tiermem.errors import RouterLoadError, UsageError
from tiermem.llm.base import LLMConfig
from tiermem.trunk import FrozenTrunk, decoder_of, right_padded, supports_trunk

DEFAULT_THRESHOLD = 0.0  # log-odds: p_escalate = 0.5, the argmax decision
ESCALATE_ALL = -1.0e9  # a log-odds threshold below any model margin: every question escalates (JSON-safe -inf)
Summaries = Sequence[Any]  # dicts / objects with text and date, see contract.as_view


@dataclass
class Decision:
    action: str  # one of contract.ACTIONS
    p_escalate: float | None  # None when the router has no probability (fixed, parsed-only routers)
    reason: str
    parsed_ok: bool  # False: the output could not be read and the decision fell back to ESCALATE
    latency_s: float  # wall time of the call that produced it, divided by the batch size
    prompt_tokens: int
    error: str | None = None  # an LLM/endpoint error after retries; the action is then ESCALATE, flagged
    score: float | None = None  # log-odds of ESCALATE (float64 margin); None when the router has no score
    # what the score is made of, when it has parts (an LM router with a signal head: "text" is the LM's margin,
    # "signals: <group>" each feature group's share of the head; they sum to score minus the head's bias)
    score_parts: dict[str, float] | None = None


def sigmoid(x: float) -> float:
    """Numerically stable logistic function (no overflow for large |x|)."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def logit(p: float) -> float:
    """Inverse of sigmoid for a probability threshold; 0 and 1 map to -inf / +inf."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"probability must be in [0, 1], got {p}")
    if p == 0.0:
        return -math.inf
    if p == 1.0:
        return math.inf
    return math.log(p) - math.log1p(-p)


def calibrated_threshold(calibration: dict[str, Any] | None) -> float | None:
    """The log-odds threshold stored by evaluation.calibrate: `threshold_logit`, or (older runs) the probability
    `threshold`, converted."""
    if not calibration:
        return None
    if calibration.get("threshold_logit") is not None:
        return float(calibration["threshold_logit"])
    if calibration.get("threshold") is not None:
        return logit(float(calibration["threshold"]))
    return None




def open_run_dir(run_dir: str | Path, where: str | None = None) -> RunMeta:
    """What every loader does before it opens a router's files: tiermem_router.json read with every field
    checked, the contract version and prompt limits it was trained under, and each weight file's sha256."""
    run_dir = Path(run_dir)
    meta = read_run_meta(run_dir)
    where = where or f"router {run_dir}"
    contract.check_version(meta.contract_version, where=where)
    contract.check_limits(meta.data.get("router_input"), where=where)
    verify_files(run_dir, meta)
    return meta


ROUTERS: dict[str, type[Router]] = {}


def register(name: str) -> Callable[[type[Router]], type[Router]]:
    def deco(cls: type[Router]) -> type[Router]:
        ROUTERS[name] = cls
        cls.kind = name
        return cls

    return deco


def build_router(kind: str, **kwargs: Any) -> Router:
    """`build_router("local", path=...)`, `build_router("remote", base_url=..., model=...)`,
    `build_router("features", path=...)`, `build_router("top1-score", threshold=...)`, ..."""
    if kind not in ROUTERS:
        raise ValueError(f"unknown router kind {kind!r}; known: {sorted(ROUTERS)}")
    if kind == "local":
        if "path" in kwargs:
            kwargs["path_or_hub_id"] = kwargs.pop("path")
        return LocalRouter.from_pretrained(**kwargs)
    return ROUTERS[kind](**kwargs)


def router_kind_of(run_dir: str | Path) -> str:
    """The router kind a run directory holds: tiermem_router.json's `router_kind`, else a LoRA/merged LM."""
    path = Path(run_dir).expanduser()
    if not path.is_dir():
        return "local"  # a hub id: LM routers are what the hub holds
    return str(read_run_meta(path).extra.get("router_kind") or "local")


def load_router(path_or_hub_id: str | Path, **kwargs: Any) -> Router:
    """Load any saved router (LM, features, top1-score) by what its tiermem_router.json says.

    Keyword arguments a kind does not use (mode, revision, batch_size, ...) are dropped for the non-LM kinds."""
    kind = router_kind_of(path_or_hub_id)
    if kind == "local":
        return LocalRouter.from_pretrained(path_or_hub_id, **kwargs)
    if kind not in ROUTERS or not hasattr(ROUTERS[kind], "load"):
        raise RouterLoadError(f"{path_or_hub_id}: tiermem_router.json names router_kind {kind!r}, which cannot be "
                              f"loaded from a directory; known: {sorted(ROUTERS)}")
    return ROUTERS[kind].load(path_or_hub_id, threshold=kwargs.get("threshold"))


# "none": no router (eval then reports the baselines only)
SPEC_KINDS = ("auto", "local", "remote", "teacher", "features", "top1-score", "always-answer", "always-escalate",
              "none")


@dataclass
class RouterSpec:
    """What every stage that uses a router (eval, calibrate, serve, bench) reads from its config: `router:` is
    this mapping, or a plain path / hub id / fixed kind as shorthand (`router: runs/grpo`)."""

    path: str | None = "runs/grpo"  # run directory or hub id (LM, features or top1-score router)
    kind: str = "auto"  # auto: what the directory's tiermem_router.json names; or one of SPEC_KINDS
    name: str | None = None  # display name (eval's compare rows)
    revision: str | None = None  # hub revision
    mode: str = "fast"  # LM routers: fast (log-odds of the action tokens) | generate (parsed JSON)
    threshold: float | None = None  # log-odds; None: the calibrated threshold saved with the router
    batch_size: int = 8
    llm: LLMConfig = field(default_factory=LLMConfig)  # teacher: the chat model prompted with the contract
    max_tokens: int = 64  # teacher / remote: the action comes first, so short completions suffice
    base_url: str | None = None  # remote: OpenAI-compatible endpoint serving the router adapter (vLLM, ...)
    model: str | None = None  # remote: the model name the endpoint serves the adapter under
    api_key_env: str = "OPENAI_API_KEY"  # remote
    strategy: str = "auto"  # remote: auto | logprobs | choice | generate
    # remote: the run directory of the adapter the endpoint serves, when it has a signal head (added to the margin)
    signal_head: str | None = None

    @classmethod
    def from_shorthand(cls, value: str) -> RouterSpec:
        if value in ("always-answer", "always-escalate"):
            return cls(path=None, kind=value)
        return cls(path=value)

    def __post_init__(self) -> None:
        self.kind = {"trained": "local", "llm": "teacher"}.get(self.kind, self.kind)  # names of older configs
        if self.kind not in SPEC_KINDS:
            raise ValueError(f"router.kind must be one of {SPEC_KINDS}, got {self.kind!r}")
        if self.mode not in ("fast", "generate"):
            raise ValueError(f"router.mode must be fast or generate, got {self.mode!r}")
        if self.threshold is not None and not math.isfinite(self.threshold):
            raise ValueError(f"router.threshold must be a finite log-odds number or null, got {self.threshold!r}")
        if self.kind == "remote" and not (self.base_url and self.model):
            raise ValueError("router.kind=remote needs base_url and model")
        if self.kind in ("auto", "local") and not self.path:
            raise ValueError(f"router.kind={self.kind} needs router.path (a run directory or hub id)")


def as_router_spec(value: RouterSpec | str) -> RouterSpec:
    """Configs built in Python may name the router by its path, as YAML and overrides may."""
    return RouterSpec.from_shorthand(value) if isinstance(value, str) else value


def build(spec: RouterSpec, shared_trunk: bool = False) -> tuple[Router, str]:
    """The one router factory every stage uses; returns (router, display name). `shared_trunk`: LM routers of
    one base share the frozen trunk's states (offline scoring of the same records)."""
    kind = spec.kind
    if kind == "none":
        raise ValueError("router.kind=none builds no router")
    if kind == "auto":
        kind = router_kind_of(spec.path)
    if kind == "local":
        router = LocalRouter.from_pretrained(spec.path, revision=spec.revision, mode=spec.mode,
                                             threshold=spec.threshold, batch_size=spec.batch_size,
                                             shared_trunk=shared_trunk and spec.mode == "fast")
        return router, f"local:{spec.path} ({spec.mode})"
    if kind == "teacher":
        from tiermem.llm import build_llm

        llm = build_llm(spec.llm)
        return build_router("teacher", llm=llm, max_tokens=spec.max_tokens), f"llm-prompt:{llm.name}"
    if kind == "remote":
        head, pieces, text_weight = None, None, 1.0
        if spec.signal_head:
            from transformers import AutoTokenizer

            meta = read_run_meta(spec.signal_head)
            head_file = (meta.data.get("signal_head") or {}).get("file")
            if not head_file:
                raise RouterLoadError(f"router.signal_head={spec.signal_head}: that run has no signal head")
            head = read_logistic(Path(spec.signal_head) / head_file)
            text_weight = meta.data["signal_head"].get("text_weight", 1.0)
            pieces = action_pieces(AutoTokenizer.from_pretrained(spec.signal_head))
        router = build_router("remote", base_url=spec.base_url, model=spec.model, api_key_env=spec.api_key_env,
                              strategy=spec.strategy, max_tokens=spec.max_tokens, signal_head=head,
                              text_weight=text_weight, action_pieces=pieces)
        return router, f"remote:{spec.model}@{spec.base_url}"
    if kind in ("features", "top1-score"):
        if spec.path:
            return load_router(spec.path, threshold=spec.threshold), f"{kind}:{spec.path}"
        return build_router(kind), kind
    return build_router(kind), kind


class Router(ABC):
    kind: ClassVar[str] = "base"
    threshold: float = DEFAULT_THRESHOLD
    # Optional summary fields this router cannot decide without (the server refuses a request lacking one, 422).
    summary_fields: ClassVar[tuple[str, ...]] = ()

    def route(self, question: str, summaries: Summaries, threshold: float | None = None) -> Decision:
        return self.route_batch([question], [summaries], threshold)[0]

    @abstractmethod
    def route_batch(
        self, questions: Sequence[str], summaries: Sequence[Summaries], threshold: float | None = None
    ) -> list[Decision]:
        """One Decision per question, in order."""

    def _threshold(self, override: float | None) -> float:
        """The decision threshold in log-odds (escalate when score >= threshold)."""
        value = self.threshold if override is None else override
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise ValueError(f"threshold must be a log-odds number, got {value!r}")
        return float(value)

    def score(self, questions: Sequence[str], summaries: Sequence[Summaries]) -> list[float]:
        """Log-odds of ESCALATE per question (what calibration and sweeps order by). Fixed policies and routers
        that only emit parsed decisions (teacher, remote in generate mode) have no score to order by: asking one
        for it is a usage error (e.g. `calibrate router=always-escalate`), reported as one line."""
        raise UsageError(f"router kind {self.kind!r} gives no score (log-odds of ESCALATE), so it has no threshold "
                         "to calibrate or sweep; use an LM, features or top1-score router")

    @staticmethod
    def from_pretrained(path_or_hub_id: str | Path, revision: str | None = None, mode: str = "fast",
                        **kwargs: Any) -> Router:
        """Any saved router: an LM run directory or hub id, or a features / top1-score directory."""
        if router_kind_of(path_or_hub_id) != "local":
            return load_router(path_or_hub_id, **kwargs)
        return LocalRouter.from_pretrained(path_or_hub_id, revision=revision, mode=mode, **kwargs)


def _check_lengths(questions: Sequence[str], summaries: Sequence[Summaries]) -> None:
    if len(questions) != len(summaries):
        raise ValueError(f"{len(questions)} questions but {len(summaries)} summary lists")


class _FixedRouter(Router):
    action: ClassVar[str]

    def __init__(self, **_: Any) -> None:
        pass

    def route_batch(self, questions, summaries, threshold=None):
        _check_lengths(questions, summaries)
        p = 1.0 if self.action == "ESCALATE" else 0.0
        return [Decision(self.action, p, f"fixed policy: always {self.action}", True, 0.0, 0) for _ in questions]


@register("always-answer")
class AlwaysAnswer(_FixedRouter):
    action = "ANSWER"


@register("always-escalate")
class AlwaysEscalate(_FixedRouter):
    action = "ESCALATE"


def _from_text(text: str, latency_s: float, prompt_tokens: int, p_escalate: float | None = None) -> Decision:
    parsed = contract.parse(text)
    return Decision(parsed.action, p_escalate, parsed.reason, parsed.parsed_ok, latency_s, prompt_tokens)


def _error_decision(exc: BaseException, latency_s: float) -> Decision:
    return Decision("ESCALATE", None, "", False, latency_s, 0, error=f"{type(exc).__name__}: {exc}")


@register("teacher")
class TeacherRouter(Router):
    """Any tiermem LLM (OpenAI, vLLM, local) prompted with the contract's messages; output parsed by it."""

    def __init__(self, llm: Any, max_tokens: int = 128) -> None:
        self.llm = llm
        self.max_tokens = max_tokens

    def route_batch(self, questions, summaries, threshold=None):
        _check_lengths(questions, summaries)
        batch = [contract.render_messages(q, s) for q, s in zip(questions, summaries, strict=True)]
        results = self.llm.chat_many(batch, max_tokens=self.max_tokens, temperature=0.0)
        out = []
        for res in results:
            if isinstance(res, BaseException):
                out.append(_error_decision(res, 0.0))
            else:
                out.append(_from_text(res.text, res.latency_s, res.input_tokens))
        return out


@register("remote")
class RemoteRouter(Router):
    """A router served by an OpenAI-compatible endpoint, selected by model name.

    e.g. `vllm serve BASE --enable-lora --lora-modules router=RUN_DIR` and model="router".
    strategy "auto" reads the action tokens' log-probs when the server returns them; a server without
    log-probs is asked for a constrained choice between the two contract prefixes; a server that ignores the
    constraint (its output is not one of the choices) falls back to parsing the generated JSON.
    """

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", threshold: float | None = None,
                 strategy: str = "auto", max_tokens: int = 64, top_logprobs: int = 10, timeout_s: float = 60.0,
                 max_retries: int = 3, signal_head: LogisticModel | None = None, text_weight: float = 1.0,
                 action_pieces: dict[str, str] | None = None) -> None:
        from openai import OpenAI

        if signal_head is not None and strategy not in ("auto", "logprobs"):
            raise ValueError("a router with a signal head adds it to the log-odds margin: strategy must be auto or "
                             f"logprobs, got {strategy!r}")
        # The served adapter's head: the endpoint returns the LM's first-token log-probs, the head is added here.
        self.signal_head = signal_head
        self.text_weight = check_text_weight(text_weight)
        # action -> the text of the first token the router's tokenizer gives it after OUTPUT_PREFIX (what the local
        # fast path reads); None: guessed from the returned pieces (the longest one that starts the action)
        self.action_pieces = action_pieces

        if strategy not in ("auto", "logprobs", "choice", "generate"):
            raise ValueError(f"strategy must be auto|logprobs|choice|generate, got {strategy!r}")
        self.client = OpenAI(base_url=base_url, api_key=os.environ.get(api_key_env) or "EMPTY",
                             timeout=timeout_s, max_retries=max_retries)
        self.model = model
        self.threshold = DEFAULT_THRESHOLD if threshold is None else threshold
        self.strategy = strategy
        self.max_tokens = max_tokens
        self.top_logprobs = top_logprobs
        self.choices = [contract.OUTPUT_PREFIX + a for a in contract.ACTIONS]
        self.used: dict[str, int] = {"logprobs": 0, "choice": 0, "generate": 0}

    def _p_from_logprobs(self, content: Any) -> float | None:
        """Walk the generated tokens up to OUTPUT_PREFIX; read both actions' first tokens among the top log-probs.
        Returns the log-odds margin of ESCALATE over ANSWER (None when they are not both among the top)."""
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

    def _one(self, question: str, summaries: Summaries, threshold: float) -> Decision:
        messages = contract.render_messages(question, summaries)
        started = time.perf_counter()
        strategy = self.strategy
        if strategy in ("auto", "logprobs"):
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
                if self.signal_head is not None:
                    margin = self.text_weight * margin + float(
                        self.signal_head.log_odds(feature_matrix([question], [summaries]))[0])
                action = "ESCALATE" if margin >= threshold else "ANSWER"
                return Decision(action, sigmoid(margin), parsed.reason, True, dt, tokens, score=margin)
            if self.signal_head is not None:  # no margin to add the head to: never a decision without it
                raise RuntimeError("the endpoint returned no log-probs for both actions at the decision position; "
                                   "a router with a signal head needs them (vLLM: logprobs=True, top_logprobs>=2)")
            if strategy == "logprobs" or content is not None:
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
                resp = None
                self.strategy = strategy = "generate"
        if strategy == "choice":
            text = resp.choices[0].message.content or ""
            dt = time.perf_counter() - started
            tokens = resp.usage.prompt_tokens if resp.usage else 0
            if text.strip() in self.choices:
                self.used["choice"] += 1
                return _from_text(text, dt, tokens)
            self.strategy = "generate"  # the constraint was ignored: parse free generations from now on
            if len(text) >= 20:  # a long enough free generation is as good as a generate call
                self.used["generate"] += 1
                return _from_text(text, dt, tokens)
        resp = self.client.chat.completions.create(
            model=self.model, messages=messages, max_tokens=self.max_tokens, temperature=0.0)
        self.used["generate"] += 1
        return _from_text(resp.choices[0].message.content or "", time.perf_counter() - started,
                          resp.usage.prompt_tokens if resp.usage else 0)

    def route_batch(self, questions, summaries, threshold=None):
        _check_lengths(questions, summaries)
        t = self._threshold(threshold)
        out = []
        for q, s in zip(questions, summaries, strict=True):
            started = time.perf_counter()
            try:
                out.append(self._one(q, s, t))
            except Exception as exc:  # openai already retried with backoff; record, never a silent ANSWER
                out.append(_error_decision(exc, time.perf_counter() - started))
        return out


def check_text_weight(value: Any) -> float:
    """The LM margin's weight beside a signal head: a finite number >= 0 (named error at load, never per request)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise RouterLoadError(f"signal head: text_weight must be a finite number >= 0, got {value!r}")
    return float(value)


def action_token_ids(tokenizer: Any) -> tuple[int, int]:
    """The first token of ANSWER and of ESCALATE right after the prompt + OUTPUT_PREFIX: the fast path's logits."""
    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False).input_ids

    head = contract.render_prompt(tokenizer, "q", []) + contract.OUTPUT_PREFIX
    head_ids = encode(head)
    ids = []
    for action in contract.ACTIONS:
        full = encode(head + action)
        if full[: len(head_ids)] != head_ids or len(full) <= len(head_ids):
            raise RouterLoadError(f"tokenizer merges {action!r} into the output prefix; fast path impossible")
        ids.append(full[len(head_ids)])
    if ids[0] == ids[1]:
        raise RouterLoadError(f"ANSWER and ESCALATE share their first token {ids[0]}; use mode='generate'")
    return ids[0], ids[1]


def action_pieces(tokenizer: Any) -> dict[str, str]:
    """action -> the text of its first token (action_token_ids), as an endpoint's log-probs name it."""
    return {a: tokenizer.decode([t]) for a, t in zip(contract.ACTIONS, action_token_ids(tokenizer), strict=True)}


_SHARED_TRUNK_STATES: dict[str, dict] = {}  # trunk fingerprint -> states, shared by the routers of one process


def adapter_top_layers(model: Any) -> int | None:
    """N when a PEFT model's LoRA weights sit only in its top N decoder layers (else None: no shared trunk)."""
    import re

    try:
        n = len(decoder_of(model).layers)
    except ValueError:
        return None
    layers = {int(m.group(1)) for name, _ in model.named_parameters() if "lora_" in name
              for m in [re.search(r"\.layers\.(\d+)\.", name)] if m}
    if not layers or any("lora_" in name and ".layers." not in name for name, _ in model.named_parameters()):
        return None
    return n - min(layers) if 0 < min(layers) else None


@register("local")
class LocalRouter(Router):
    """An in-process router model (base + LoRA adapter, or merged weights).

    `threshold` is in log-odds (0.0 = the argmax decision). __init__ puts the model in eval mode and, with
    `prefix_cache=True`, caches the KV of the shared instruction prefix computed with the weights of that moment:
    a training loop that scores with a LocalRouter must build it with `prefix_cache=False` (or call
    `refresh_prefix_cache()` after each update) and restore `model.train()` itself afterwards.
    """

    def __init__(self, model: Any, tokenizer: Any, meta: RunMeta | None = None, mode: str = "fast",
                 threshold: float | None = None, prefix_cache: bool = True, batch_size: int = 8,
                 max_new_tokens: int = 64, trunk_layers: int | None = None,
                 signal_head: LogisticModel | None = None, text_weight: float = 1.0) -> None:
        import torch

        if mode not in ("fast", "generate"):
            raise ValueError(f"mode must be 'fast' or 'generate', got {mode!r}")
        self.torch = torch
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.meta = meta
        self.mode = mode
        calibrated = calibrated_threshold(meta.calibration) if meta else None
        self.threshold = threshold if threshold is not None else (
            calibrated if calibrated is not None else DEFAULT_THRESHOLD)
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        # Learned jointly with the adapter: log-odds over the serve-time signals, added to the LM's margin.
        self.signal_head = signal_head
        # the weight of the LM's margin beside the head (chosen on validation by SFT; 1.0 without a head)
        self.text_weight = check_text_weight(text_weight)
        self.summary_fields = ("score",) if signal_head is not None else ()  # the head reads the retrieval scores
        if signal_head is not None and list(signal_head.feature_names) != list(FEATURES):
            raise RouterLoadError(f"signal head reads features {signal_head.feature_names}, this version computes "
                                  f"{list(FEATURES)}: retrain the router")
        # the most summaries a training prompt held; None for routers saved before it was recorded
        self.top_k = ((meta.data.get("router_input") or {}).get("top_k") or None) if meta else None
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.device = next(model.parameters()).device
        self.answer_id, self.escalate_id = self._action_token_ids()
        self.prefix_ids, self._prefix_cache = self._fixed_prefix() if prefix_cache else ([], None)
        # Offline stages that score the same records with several routers of one base (eval, calibrate) share
        # the frozen bottom layers' output: the adapters only differ in the top `trunk_layers` layers.
        self.trunk = None
        if trunk_layers and supports_trunk(model):
            self.trunk = FrozenTrunk(model, trunk_layers, batch_size=batch_size)
            self.trunk.cache = _SHARED_TRUNK_STATES.setdefault(self.trunk.fingerprint, {})

    # -- loading -----------------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path_or_hub_id: str | Path, revision: str | None = None, mode: str = "fast",
                        threshold: float | None = None, device: str | None = None, dtype: Any = None,
                        merge: bool = True, cache_dir: str | None = None, **kwargs: Any) -> LocalRouter:
        from transformers import AutoTokenizer

        from tiermem.models import load_causal_lm

        run_dir = Path(path_or_hub_id).expanduser()
        if not run_dir.exists():
            if str(path_or_hub_id).startswith((".", "/", "~")) or str(path_or_hub_id).count("/") != 1:
                raise FileNotFoundError(f"router {path_or_hub_id!r}: no such directory, and not a hub id org/name")
            from serving.hub import pull

            run_dir = pull(str(path_or_hub_id), revision=revision, cache_dir=cache_dir, verify=False)
        shared_trunk = bool(kwargs.pop("shared_trunk", False))
        meta = read_run_meta(run_dir)
        kind = meta.extra.get("router_kind")
        if kind not in (None, "local"):
            raise RouterLoadError(f"{run_dir} holds a {kind!r} router, not a language model: load it with "
                                  f"kind={kind} (or serving.router.load_router / Router.from_pretrained)")
        meta = open_run_dir(run_dir, where=f"router {path_or_hub_id}")
        if (run_dir / "adapter_config.json").is_file():
            from peft import PeftModel

            model, tokenizer = load_causal_lm(meta.base_model, dtype=dtype, device=device)
            model = PeftModel.from_pretrained(model, str(run_dir))
            if shared_trunk:
                kwargs["trunk_layers"] = adapter_top_layers(model)
            if merge:  # one set of weights: no LoRA matmuls per layer at inference
                model = model.merge_and_unload()
        elif (run_dir / "config.json").is_file():
            model, tokenizer = load_causal_lm(str(run_dir), dtype=dtype, device=device)
        else:
            raise RouterLoadError(f"{run_dir}: neither adapter_config.json (LoRA) nor config.json (merged model)")
        if (run_dir / "tokenizer_config.json").is_file():
            tokenizer = AutoTokenizer.from_pretrained(str(run_dir))  # the chat template training rendered with
        head_file = (meta.data.get("signal_head") or {}).get("file")
        if head_file:
            kwargs["text_weight"] = (meta.data.get("signal_head") or {}).get("text_weight", 1.0)
            try:
                kwargs["signal_head"] = read_logistic(run_dir / head_file)
            except (OSError, ValueError) as exc:
                raise RouterLoadError(f"{run_dir}: tiermem_router.json names a signal head it cannot read: "
                                      f"{exc}") from None
        return cls(model, tokenizer, meta=meta, mode=mode, threshold=threshold, **kwargs)

    def head_log_odds(self, signals: Any) -> list[float]:
        """The signal head's log-odds for raw feature rows ([n, len(FEATURES)]); zeros without a head."""
        if self.signal_head is None:
            return [0.0] * len(signals)
        return [float(v) for v in self.signal_head.log_odds(np.asarray(signals, dtype=np.float64).reshape(
            len(signals), len(FEATURES)))]

    # -- tokens ------------------------------------------------------------------------------------
    def _encode(self, text: str) -> list[int]:
        # The chat template already carries the special tokens; adding BOS again would shift the prompt.
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def _action_token_ids(self) -> tuple[int, int]:
        return action_token_ids(self.tokenizer)

    def refresh_prefix_cache(self) -> None:
        """Recompute the cached prefix KV (after the weights changed)."""
        self.prefix_ids, self._prefix_cache = self._fixed_prefix()

    def _fixed_prefix(self) -> tuple[list[int], Any]:
        """Token ids and KV cache of the prompt part every request shares (system prompt, chat markup)."""
        a = self._encode(contract.render_prompt(self.tokenizer, "first question", []))
        b = self._encode(contract.render_prompt(self.tokenizer, "another one", [{"text": "x", "date": None}]))
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        n -= 1  # the last shared token may merge differently with what follows; keep a safe margin
        if n <= 0:
            return [], None
        ids = a[:n]
        with self.torch.inference_mode():
            out = self.model(input_ids=self.torch.tensor([ids], device=self.device), use_cache=True)
        return ids, out.cache if hasattr(out, "cache") else out.past_key_values

    # -- fast path ---------------------------------------------------------------------------------
    def _score(self, rows: list[list[int]]) -> list[float]:
        """Log-odds margin logit(ESCALATE) - logit(ANSWER) per row. Rows are right-padded after the (optional)
        cached prefix and read at their last real token; pads never sit between the prefix and a row, so no
        position shifts are needed."""
        torch = self.torch
        if self.trunk is not None:
            ids, mask = right_padded(rows, self.tokenizer.pad_token_id)
            last = (mask.sum(dim=1) - 1).to(self.device)
            with torch.inference_mode():
                logits = self.trunk.logits(self.model, ids.to(self.device), mask.to(self.device),
                                           logits_to_keep=last[:, None])
            picked = logits[:, 0, [self.answer_id, self.escalate_id]].double()
            return (picked[:, 1] - picked[:, 0]).tolist()
        p_len = len(self.prefix_ids)
        use_cache = self._prefix_cache is not None and all(r[:p_len] == self.prefix_ids for r in rows)
        start = p_len if use_cache else 0
        tails = [r[start:] for r in rows]
        width = max(len(t) for t in tails)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([t + [pad] * (width - len(t)) for t in tails], device=self.device)
        mask = torch.tensor([[1] * (start + len(t)) + [0] * (width - len(t)) for t in tails], device=self.device)
        positions = (torch.arange(width, device=self.device) + start).unsqueeze(0).expand(len(rows), -1)
        kwargs: dict[str, Any] = {}
        if use_cache:
            cache = copy.deepcopy(self._prefix_cache)
            if len(rows) > 1:
                cache.batch_repeat_interleave(len(rows))
            kwargs["cache"] = cache
        with torch.inference_mode():
            logits = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                                use_cache=use_cache, **kwargs).logits
        last = torch.tensor([len(t) - 1 for t in tails], device=self.device)
        picked = logits[torch.arange(len(rows), device=self.device), last][:, [self.answer_id, self.escalate_id]]
        # The margin in float64: a float32 softmax saturates at exactly 1.0 for large margins, which ties
        # distinct decisions and collapses sweeps and quantile thresholds.
        picked = picked.double()
        return (picked[:, 1] - picked[:, 0]).tolist()

    def score(self, questions: Sequence[str], summaries: Sequence[Summaries]) -> list[float]:
        """Log-odds of ESCALATE for each (question, summaries), batched; what calibration and evaluation sweep
        over."""
        self._check_top_k(summaries)
        return [d.score for d in self._fast(questions, summaries, self.threshold)]  # type: ignore[misc]

    def _check_top_k(self, summaries: Sequence[Summaries]) -> None:
        """A prompt with more summaries than any training prompt is one the router never learned to read."""
        most = max((len(s) for s in summaries), default=0)
        if self.top_k and most > self.top_k:
            raise ValueError(f"this router was trained on prompts with at most {self.top_k} summaries, got {most}: "
                             f"retrieve top_k={self.top_k} (saved in tiermem_router.json data.router_input)")

    def score_prompts(self, prompts: Sequence[str], signals: Any = None) -> list[float]:
        """Log-odds of ESCALATE for already-rendered prompts (contract.render_prompt output, without
        OUTPUT_PREFIX): the same tokenization (add_special_tokens=False) and forward pass as the fast path, so
        training metrics and serving read the same number; `signals` (the rows' serve-time features, as
        serving.signals.feature_matrix gives them) are required when the router has a signal head. Puts nothing
        in train mode: callers that train restore `model.train()` themselves (see the class docstring about the
        prefix cache)."""
        if self.signal_head is not None and (signals is None or len(signals) != len(prompts)):
            raise ValueError("this router has a signal head: score_prompts needs one signal row per prompt")
        out: list[float] = []
        skip_lm = self.signal_head is not None and self.text_weight == 0.0  # as the fast path: the LM is not run
        for i in range(0, len(prompts), self.batch_size):
            rows = [self._encode(p + contract.OUTPUT_PREFIX) for p in prompts[i: i + self.batch_size]]
            out += [0.0] * len(rows) if skip_lm else self._score(rows)
        if self.signal_head is not None:
            out = [self.text_weight * m + h for m, h in zip(out, self.head_log_odds(signals), strict=True)]
        return out

    def _fast(self, questions, summaries, threshold: float) -> list[Decision]:
        out: list[Decision] = []
        for i in range(0, len(questions), self.batch_size):
            qs, ss = questions[i: i + self.batch_size], summaries[i: i + self.batch_size]
            started = time.perf_counter()
            if self.signal_head is not None and self.text_weight == 0.0:
                # Validation gave the LM's margin no weight: the decision is the head's, and the LM is not run.
                rows = [[] for _ in qs]
                margins = [0.0] * len(rows)
            else:
                rows = [self._encode(contract.render_prompt(self.tokenizer, q, s) + contract.OUTPUT_PREFIX)
                        for q, s in zip(qs, ss, strict=True)]
                margins = self._score(rows)
            heads, parts = [0.0] * len(rows), [None] * len(rows)
            if self.signal_head is not None:
                x = feature_matrix(qs, ss)
                heads = self.head_log_odds(x)
                groups = self.signal_head.contributions(x)
                parts = [{"text": self.text_weight * m, **{f"signals: {g}": float(v[i]) for g, v in groups.items()}}
                         for i, m in enumerate(margins)]
            dt = (time.perf_counter() - started) / len(rows)
            for m, h, part, row in zip(margins, heads, parts, rows, strict=True):
                score = (self.text_weight * m + h) if self.signal_head is not None else m
                action = "ESCALATE" if score >= threshold else "ANSWER"
                why = (f"log-odds {score:.3f} (text {self.text_weight:g} x {m:.3f} + signals {h:.3f})"
                       if self.signal_head is not None
                       else f"log-odds {score:.3f}")
                out.append(Decision(action, sigmoid(score), f"{why} vs threshold {threshold:.3f}", True, dt,
                                    len(row), score=score, score_parts=part))
        return out

    # -- generate path -----------------------------------------------------------------------------
    def generate(self, prompts: list[str], max_new_tokens: int | None = None,
                 top_logprobs: int = 0) -> list[dict[str, Any]]:
        """Greedy completions of raw prompt strings: text, token counts, and per-token log-probs if asked."""
        torch = self.torch
        enc = [self._encode(p) for p in prompts]
        width = max(len(e) for e in enc)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(e)) + e for e in enc], device=self.device)  # left pad
        mask = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in enc], device=self.device)
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids, attention_mask=mask, max_new_tokens=max_new_tokens or self.max_new_tokens,
                do_sample=False, pad_token_id=pad, return_dict_in_generate=True, output_scores=top_logprobs > 0)
        new = out.sequences[:, width:]
        results = []
        eos = {self.tokenizer.eos_token_id, pad}
        for b, e in enumerate(enc):
            ids = new[b].tolist()
            n = next((k for k, t in enumerate(ids) if t in eos), len(ids))
            item: dict[str, Any] = {
                "text": self.tokenizer.decode(ids[:n], skip_special_tokens=True),
                "prompt_tokens": len(e), "completion_tokens": n, "finish_reason": "stop" if n < len(ids) else "length",
            }
            if top_logprobs > 0:
                steps = []
                for k in range(n):
                    logp = torch.log_softmax(out.scores[k][b].float(), dim=-1)
                    top = torch.topk(logp, top_logprobs)
                    steps.append({
                        "token": self.tokenizer.decode([ids[k]]), "logprob": logp[ids[k]].item(),
                        "top_logprobs": [{"token": self.tokenizer.decode([int(t)]), "logprob": v.item()}
                                         for v, t in zip(top.values, top.indices, strict=True)],
                    })
                item["logprobs"] = steps
            results.append(item)
        return results

    def _generate(self, questions, summaries) -> list[Decision]:
        out: list[Decision] = []
        for i in range(0, len(questions), self.batch_size):
            qs, ss = questions[i: i + self.batch_size], summaries[i: i + self.batch_size]
            started = time.perf_counter()
            gens = self.generate([contract.render_prompt(self.tokenizer, q, s) for q, s in zip(qs, ss, strict=True)])
            dt = (time.perf_counter() - started) / len(gens)
            out.extend(_from_text(g["text"], dt, g["prompt_tokens"]) for g in gens)
        return out

    def route_batch(self, questions, summaries, threshold=None):
        _check_lengths(questions, summaries)
        if not questions:
            return []
        self._check_top_k(summaries)
        if self.mode == "generate":  # the model's own greedy decision; the threshold does not apply
            return self._generate(list(questions), list(summaries))
        return self._fast(list(questions), list(summaries), self._threshold(threshold))
