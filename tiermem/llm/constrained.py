"""JSON-schema-constrained generation for the local (transformers) backend, through lm-format-enforcer's stable
core (TokenEnforcer, JsonSchemaParser); why that library: docs/DESIGN.md."""

from __future__ import annotations

import functools
from typing import Any

# Whitespace the parser allows between JSON tokens: none. A small model left free pads its JSON with newlines and
# indentation (84 tokens for a one-search plan, against 31 compact), each token a step of the enforcer.
MAX_WHITESPACE = 0


def _regular_tokens(tokenizer: Any) -> list[tuple[int, str, bool]]:
    """(id, text, starts a word) for every non-special token: text decoded after "0" keeps leading spaces that
    a lone decode strips (sentencepiece/BPE word markers)."""
    zero = tokenizer.encode("0", add_special_tokens=False)[-1]
    special = set(tokenizer.all_special_ids)
    out = []
    for idx in range(len(tokenizer)):
        if idx in special:
            continue
        after_zero = tokenizer.decode([zero, idx])[1:]
        alone = tokenizer.decode([idx])
        out.append((idx, after_zero, len(after_zero) > len(alone)))
    return out


def tokenizer_data(tokenizer: Any) -> Any:
    """The per-tokenizer tables lm-format-enforcer needs (a few seconds to build: build once per model)."""
    from lmformatenforcer import TokenEnforcerTokenizerData

    decode = functools.partial(_decode, tokenizer)
    return TokenEnforcerTokenizerData(_regular_tokens(tokenizer), decode, tokenizer.eos_token_id, False,
                                      len(tokenizer))


def _decode(tokenizer: Any, ids: list[int]) -> str:
    return tokenizer.decode(ids).rstrip("\ufffd")  # a partial multi-byte character is not text yet


def prefix_allowed_tokens_fn(data: Any, schema: dict[str, Any]) -> Any:
    """A `generate(prefix_allowed_tokens_fn=...)` callback allowing only continuations valid under `schema`; one
    enforcer serves a whole (left-padded) batch, keying its state on each row's full token sequence."""
    from lmformatenforcer import JsonSchemaParser, TokenEnforcer

    enforcer = TokenEnforcer(data, JsonSchemaParser(schema))
    enforcer.root_parser.config.max_consecutive_whitespaces = MAX_WHITESPACE
    enforcer.root_parser.config.force_json_field_order = True  # "fact" before "quote", as the prompt shows

    def allowed(batch_id: int, sent: Any) -> list[int]:
        return enforcer.get_allowed_tokens(sent.tolist()).allowed_tokens

    return allowed
