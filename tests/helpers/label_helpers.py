"""Shared pieces for the labeling tests: a fast deterministic embedder and a scripted answerer."""

from __future__ import annotations

import hashlib
import re

import numpy as np

from labeling.config import LabelConfig
from tiermem.settings.config import from_dict

SMALL_MEMORY = {"tokenizer": "whitespace", "page_tokens": 120, "max_rounds": 2}


class HashEmbedder:
    """Bag-of-words hashed into 64 dims: deterministic, no model load, good enough to rank by shared words."""

    def encode(self, sentences, **kwargs):
        out = np.zeros((len(sentences), 64), dtype=np.float32)
        for i, text in enumerate(sentences):
            for word in re.findall(r"[a-z0-9]+", text.lower()):
                out[i, int(hashlib.md5(word.encode()).hexdigest(), 16) % 64] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def answer_from_prompt(messages) -> str:
    """Scripted answerer: research steps find nothing and stop; answers echo the first note's last words."""
    system, user = messages[0]["content"], messages[-1]["content"]
    if system.startswith("You collect evidence"):
        return '{"facts": []}'
    if system.startswith("You plan"):
        return "DONE"
    words = re.findall(r"[A-Za-z0-9]+", user.split("\n")[1] if "\n" in user else user)
    return " ".join(words[-4:]) or "not mentioned"


def _label_cfg(out, **extra) -> LabelConfig:
    return from_dict(LabelConfig, {"output_dir": str(out), "memory": SMALL_MEMORY, "label_rule": "evidence",
                                   "max_questions_per_conversation": 2, **extra})
