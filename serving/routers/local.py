"""An in-process LM router: base model + LoRA adapter (or merged weights) read by the contract; `fast`: the float64
first-token margin (+ signal head) of one forward pass, `generate`: the full JSON, parsed."""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from serving.portable import LOCAL_BASE
from serving.routers.base import (
    DEFAULT_THRESHOLD_LOGIT,
    Decision,
    Router,
    Summaries,
    calibrated_threshold_logit,
    check_lengths,
    decide,
    decision_from_text,
    open_run_dir,
    sigmoid,
)
from serving.routers.lm_head import (
    action_token_ids,
    check_head_features,
    check_text_weight,
    read_signal_head,
    served_score,
)
from serving.signals import FEATURE_GROUPS, FEATURES, feature_matrix
from tiermem import contract
from tiermem.models.logistic import LogisticModel
from tiermem.models.torch_state import padded
from tiermem.models.trunk import FrozenTrunk, supports_trunk, top_layers_holding
from tiermem.runs.run_meta import RunMeta
from tiermem.settings.errors import MissingFileError, RouterLoadError, UsageError


class LocalRouter(Router):
    """An in-process router model. __init__ puts the model in eval mode and, with `prefix_cache=True`, caches the
    shared instruction prefix's KV under the weights of that moment: a training loop that scores with a LocalRouter
    builds it with `prefix_cache=False` and restores `model.train()` itself afterwards."""

    kind = "local"
    spec_fields = ("revision", "mode", "base_model")

    def __init__(self, model: Any, tokenizer: Any, meta: RunMeta | None = None, mode: str = "fast",
                 threshold_logit: float | None = None, prefix_cache: bool = True, batch_size: int = 8,
                 max_new_tokens: int = 64, trunk_layers: int | None = None, trunk_cache: dict | None = None,
                 signal_head: LogisticModel | None = None, text_weight: float = 1.0,
                 trunk: FrozenTrunk | None = None) -> None:
        import torch

        if mode not in ("fast", "generate"):
            raise UsageError(f"router.mode must be fast or generate, got {mode!r}")
        self.torch = torch
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.meta = meta
        self.mode = mode
        calibrated = calibrated_threshold_logit(meta)
        self.threshold_logit = threshold_logit if threshold_logit is not None else (
            calibrated if calibrated is not None else DEFAULT_THRESHOLD_LOGIT)
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.signal_head = None if signal_head is None else check_head_features(signal_head)
        # the weight of the LM's margin beside the head (chosen on validation by SFT; 1.0 without a head)
        self.text_weight = check_text_weight(text_weight)
        self.summary_fields = ("score",) if signal_head is not None else ()  # the head reads the retrieval scores
        # the most summaries a training prompt held
        self.top_k = ((meta.data.get("router_input") or {}).get("top_k") or None) if meta else None
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.device = next(model.parameters()).device
        self.answer_id, self.escalate_id = action_token_ids(self.tokenizer)
        self.prefix_ids, self._prefix_cache = self._fixed_prefix() if prefix_cache else ([], None)
        # Routers of one base scoring the same records (eval, calibrate) share the frozen bottom layers' output
        # through the caller's `trunk_cache`; `trunk`: a training run's own FrozenTrunk over this model.
        self.trunk = trunk
        if trunk is None and trunk_layers and supports_trunk(model):
            self.trunk = FrozenTrunk(model, trunk_layers, batch_size=batch_size)
            if trunk_cache is not None:
                self.trunk.cache = trunk_cache.setdefault(self.trunk.fingerprint, {})

    # -- loading -----------------------------------------------------------------------------------
    @classmethod
    def check_spec(cls, spec):
        if spec.mode not in ("fast", "generate"):
            raise UsageError(f"router.mode must be fast or generate, got {spec.mode!r}")
        if not spec.path:
            raise UsageError("router.kind=local needs router.path (a run directory or hub id)")

    @classmethod
    def from_spec(cls, spec, trunk_cache=None):
        router = cls.load(spec.path, revision=spec.revision, mode=spec.mode, threshold_logit=spec.threshold_logit,
                          batch_size=spec.batch_size, trunk_cache=trunk_cache if spec.mode == "fast" else None,
                          base_model=spec.base_model)
        router.name = f"local:{spec.path} ({spec.mode})"
        return router

    @classmethod
    def load(cls, path_or_hub_id: str | Path, revision: str | None = None, mode: str = "fast",
             threshold_logit: float | None = None, batch_size: int = 8, trunk_cache: dict | None = None,
             prefix_cache: bool = True, base_model: str | None = None) -> LocalRouter:
        """A run directory or hub id, its adapter merged into the base. `base_model`: the base to load it on instead
        of the one tiermem_router.json names (a pushed router's local base is named only `local directory NAME`)."""
        from transformers import AutoTokenizer

        from tiermem.models.specs import load_causal_lm

        run_dir = Path(path_or_hub_id).expanduser()
        if not run_dir.exists():
            if str(path_or_hub_id).startswith((".", "/", "~")) or str(path_or_hub_id).count("/") != 1:
                raise MissingFileError(f"router {path_or_hub_id!r}: no such directory, and not a hub id org/name")
            from serving.hub import pull

            run_dir = pull(str(path_or_hub_id), revision=revision, verify=False)
        meta = open_run_dir(run_dir, where=f"router {path_or_hub_id}")
        if meta.router_kind != "local":
            raise RouterLoadError(f"{run_dir} holds a {meta.router_kind!r} router, not a language model: load it "
                                  f"with kind={meta.router_kind} (or Router.from_pretrained, which reads the kind)")
        trunk_layers = None
        if (run_dir / "adapter_config.json").is_file():
            model, tokenizer = load_adapter_model(run_dir, meta, base_model=base_model)
            if trunk_cache is not None:
                trunk_layers = top_layers_holding(model, "lora")
            model = model.merge_and_unload()  # one set of weights: no LoRA matmuls per layer at inference
        elif (run_dir / "config.json").is_file():
            model, tokenizer = load_causal_lm(str(run_dir))
            if (run_dir / "tokenizer_config.json").is_file():
                tokenizer = AutoTokenizer.from_pretrained(str(run_dir))
        else:
            raise RouterLoadError(f"{run_dir}: neither adapter_config.json (LoRA) nor config.json (merged model)")
        head, text_weight = read_signal_head(run_dir, meta)
        return cls(model, tokenizer, meta=meta, mode=mode, threshold_logit=threshold_logit, batch_size=batch_size,
                   prefix_cache=prefix_cache, trunk_layers=trunk_layers, trunk_cache=trunk_cache, signal_head=head,
                   text_weight=text_weight)

    def head_log_odds(self, signals: Any) -> list[float]:
        """The signal head's log-odds for raw feature rows ([n, len(FEATURES)])."""
        return [float(v) for v in self.signal_head.log_odds(np.asarray(signals, dtype=np.float64).reshape(
            len(signals), len(FEATURES)))]

    # -- tokens ------------------------------------------------------------------------------------
    def _encode(self, text: str) -> list[int]:
        # The chat template already carries the special tokens; adding BOS again would shift the prompt.
        return self.tokenizer(text, add_special_tokens=False).input_ids

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
        """logit(ESCALATE) - logit(ANSWER) per row, read at its last real token: rows are right-padded after the
        (optional) cached prefix, so no pad sits between prefix and row and no position shifts."""
        torch = self.torch
        if self.trunk is not None:
            ids, mask = padded(rows, self.tokenizer.pad_token_id)
            last = (mask.sum(dim=1) - 1).to(self.device)
            # no_grad, not inference_mode: the states cached here may meet a training run's autograd later
            with torch.no_grad():
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
        # Logits only at the rows' last real tokens: the vocabulary projection of every tail position would cost
        # about a fifth of the forward pass and is never read.
        last = torch.tensor([len(t) - 1 for t in tails], device=self.device)
        keep, column = torch.unique(last, return_inverse=True)
        with torch.inference_mode():
            logits = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                                use_cache=use_cache, logits_to_keep=keep, **kwargs).logits
        picked = logits[torch.arange(len(rows), device=self.device), column][:, [self.answer_id, self.escalate_id]]
        # The margin in float64: a float32 softmax saturates at exactly 1.0 for large margins, which ties
        # distinct decisions and collapses sweeps and quantile thresholds.
        picked = picked.double()
        return (picked[:, 1] - picked[:, 0]).tolist()

    def score(self, questions: Sequence[str], summaries: Sequence[Summaries]) -> list[float]:
        """Log-odds of ESCALATE per (question, summaries), batched: what calibration and evaluation sweep."""
        check_lengths(questions, summaries)
        self._check_top_k(summaries)
        return [d.score for d in self._fast(questions, summaries, self.threshold_logit)]  # type: ignore[misc]

    def _check_top_k(self, summaries: Sequence[Summaries]) -> None:
        """A prompt with more summaries than any training prompt is one the router never learned to read."""
        most = max((len(s) for s in summaries), default=0)
        if self.top_k and most > self.top_k:
            raise UsageError(f"this router was trained on prompts with at most {self.top_k} summaries, got {most}: "
                             f"retrieve top_k={self.top_k} (saved in tiermem_router.json data.router_input)")

    def score_prompts(self, prompts: Sequence[str], signals: Any = None) -> list[float]:
        """Log-odds of ESCALATE for rendered prompts (no OUTPUT_PREFIX) by the fast path, so training metrics read
        serving's number; `signals` (serving.signals.feature_matrix rows) are required with a signal head."""
        if self.signal_head is not None and (signals is None or len(signals) != len(prompts)):
            raise ValueError("this router has a signal head: score_prompts needs one signal row per prompt")
        out = [m for i in range(0, len(prompts), self.batch_size)
               for m in self._margins(prompts[i: i + self.batch_size])[0]]
        if self.signal_head is not None:
            out = [served_score(m, h, self.text_weight) for m, h in zip(out, self.head_log_odds(signals), strict=True)]
        return out

    def _margins(self, prompts: Sequence[str]) -> tuple[list[float], list[int]]:
        """First-token margins of rendered prompts and their token counts; no LM run when the text weight is 0."""
        if self.signal_head is not None and self.text_weight == 0.0:
            return [0.0] * len(prompts), [0] * len(prompts)
        rows = [self._encode(p + contract.OUTPUT_PREFIX) for p in prompts]
        return self._score(rows), [len(r) for r in rows]

    def _fast(self, questions, summaries, threshold_logit: float) -> list[Decision]:
        out: list[Decision] = []
        for i in range(0, len(questions), self.batch_size):
            qs, ss = questions[i: i + self.batch_size], summaries[i: i + self.batch_size]
            started = time.perf_counter()
            margins, tokens = self._margins([contract.render_prompt(self.tokenizer, q, s)
                                             for q, s in zip(qs, ss, strict=True)])
            heads, parts, clipped = [0.0] * len(qs), [None] * len(qs), [None] * len(qs)
            if self.signal_head is not None:
                x = feature_matrix(qs, ss)
                heads = self.head_log_odds(x)
                clipped = self.signal_head.clipped_features(x)
                groups = self.signal_head.contributions(x, FEATURE_GROUPS)
                parts = [{"text": self.text_weight * m, **{f"signals: {g}": float(v[i]) for g, v in groups.items()}}
                         for i, m in enumerate(margins)]
            dt = (time.perf_counter() - started) / len(qs)
            for m, h, part, n_tokens, clip in zip(margins, heads, parts, tokens, clipped, strict=True):
                score = served_score(m, h if self.signal_head is not None else None, self.text_weight)
                action = decide(score, threshold_logit)
                why = (f"log-odds {score:.3f} (text {self.text_weight:g} x {m:.3f} + signals {h:.3f})"
                       if self.signal_head is not None
                       else f"log-odds {score:.3f}")
                out.append(Decision(action, sigmoid(score), f"{why} vs threshold {threshold_logit:.3f}", True, dt,
                                    n_tokens, score=score, score_parts=part, clipped=clip))
        return out

    # -- generate path -----------------------------------------------------------------------------
    def generate(self, prompts: list[str], max_new_tokens: int | None = None,
                 top_logprobs: int = 0) -> list[dict[str, Any]]:
        """Greedy completions of raw prompt strings: text, token counts, and per-token log-probs if asked."""
        torch = self.torch
        enc = [self._encode(p) for p in prompts]
        width = max(len(e) for e in enc)
        pad = self.tokenizer.pad_token_id
        input_ids, mask = (t.to(self.device) for t in padded(enc, pad, left=True))
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
            out.extend(decision_from_text(g["text"], dt, g["prompt_tokens"]) for g in gens)
        return out

    def route_batch(self, questions, summaries, threshold_logit=None):
        check_lengths(questions, summaries)
        if not questions:
            return []
        self._check_top_k(summaries)
        if self.mode == "generate":  # the model's own greedy decision; the threshold does not apply
            return self._generate(list(questions), list(summaries))
        return self._fast(list(questions), list(summaries), self._threshold_logit(threshold_logit))


def load_adapter_model(run_dir: str | Path, meta: RunMeta, *, base_model: str | None = None, device: Any = None,
                       trainable: bool = False) -> tuple[Any, Any]:
    """(PeftModel, tokenizer) of a router run checked by `open_run_dir`, with the tokenizer training rendered with:
    the one adapter loader (serving loads a router with it, SFT and GRPO continue one)."""
    from transformers import AutoTokenizer

    from tiermem.models.adapter import load_adapter
    from tiermem.models.specs import load_causal_lm

    run_dir = Path(run_dir)
    base = base_model or meta.base_model
    if base.startswith(LOCAL_BASE):
        raise RouterLoadError(f"router {run_dir}: its base model was a {base} on the machine that trained it (no "
                              "hub id); pass router.base_model=PATH (or base_model=PATH)")
    model, tokenizer = load_causal_lm(base, device=device)
    model = load_adapter(model, run_dir, meta, trainable=trainable)
    if (run_dir / "tokenizer_config.json").is_file():
        tokenizer = AutoTokenizer.from_pretrained(str(run_dir))
    return model, tokenizer
