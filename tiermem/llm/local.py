"""In-process generation with transformers: greedy, deterministic, batched."""

from __future__ import annotations

import time

from tiermem.llm.base import LLM, CallParams, ChatResult, LLMError, Messages
from tiermem.llm.cache import ResponseCache


class LocalLLM(LLM):
    backend = "local"

    def __init__(self, model: str, cache: ResponseCache | None = None, max_tokens: int = 256,
                 temperature: float = 0.0, batch_size: int = 8) -> None:
        super().__init__(model, cache, max_tokens, temperature)
        self.batch_size = batch_size
        self._model = None
        self._tokenizer = None
        self._enforcer_data = None  # lm-format-enforcer's tables for this tokenizer, built on the first JSON call

    def _load(self) -> None:
        if self._model is None:
            from tiermem.models.specs import load_causal_lm, setup_cpu_threads

            setup_cpu_threads()
            self._model, self._tokenizer = load_causal_lm(self.model)
            self._tokenizer.padding_side = "left"

    def _prompt(self, messages: Messages) -> str:
        return self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _complete_many(self, batch: list[Messages], params: CallParams) -> list[ChatResult | LLMError]:
        self._load()
        out: list[ChatResult | LLMError] = []
        for start in range(0, len(batch), self.batch_size):
            chunk = batch[start : start + self.batch_size]
            try:
                if params.choices:
                    out.extend(self._choose(m, params.choices) for m in chunk)
                else:
                    out.extend(self._generate(chunk, params))
            except Exception as exc:  # e.g. out of memory: record, do not crash the whole run
                out.extend(LLMError(f"{self.name}: {type(exc).__name__}: {exc}") for _ in chunk)
        return out

    def _generate(self, chunk: list[Messages], params: CallParams) -> list[ChatResult]:
        import torch

        tok = self._tokenizer
        started = time.perf_counter()
        enc = tok([self._prompt(m) for m in chunk], return_tensors="pt", padding=True,
                  add_special_tokens=False).to(self._model.device)
        sample = params.temperature > 0
        constrain = {}
        if params.json_schema:  # decode only what the schema allows (tiermem.llm.constrained)
            from tiermem.llm.constrained import prefix_allowed_tokens_fn, tokenizer_data

            if self._enforcer_data is None:
                self._enforcer_data = tokenizer_data(tok)
            constrain["prefix_allowed_tokens_fn"] = prefix_allowed_tokens_fn(self._enforcer_data, params.json_schema)
        with torch.no_grad():
            gen = self._model.generate(**enc, max_new_tokens=params.max_tokens, do_sample=sample,
                                       temperature=params.temperature if sample else None, top_p=None, top_k=None,
                                       pad_token_id=tok.pad_token_id, **constrain)
        new = gen[:, enc.input_ids.shape[1]:]
        latency = (time.perf_counter() - started) / len(chunk)
        results = []
        for row, mask in zip(new, enc.attention_mask, strict=True):
            ids = row.tolist()
            if tok.eos_token_id in ids:
                ids = ids[: ids.index(tok.eos_token_id) + 1]
            ids = [i for i in ids if i != tok.pad_token_id or i == tok.eos_token_id]
            text = tok.decode(ids, skip_special_tokens=True).strip()
            results.append(ChatResult(text, int(mask.sum()), len(ids), latency, model=self.name))
        return results

    def _choose(self, messages: Messages, choices: list[str]) -> ChatResult:
        """Constrained choice: the option with the highest log-likelihood after the prompt."""
        import torch

        tok = self._tokenizer
        started = time.perf_counter()
        prompt_ids = tok(self._prompt(messages), add_special_tokens=False).input_ids
        scores = []
        for choice in choices:
            choice_ids = tok(choice, add_special_tokens=False).input_ids
            ids = torch.tensor([prompt_ids + choice_ids], device=self._model.device)
            with torch.no_grad():
                logp = self._model(ids).logits[0, len(prompt_ids) - 1 : -1].log_softmax(-1)
            scores.append(sum(logp[i, t].item() for i, t in enumerate(choice_ids)))
        best = max(range(len(choices)), key=scores.__getitem__)
        return ChatResult(choices[best], len(prompt_ids), len(tok(choices[best]).input_ids),
                          time.perf_counter() - started, model=self.name)
