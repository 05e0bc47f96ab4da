"""A tiny random BERT cross-encoder (the packaged MiniLM's tokenizer, 2 layers of width 32): stands in for MiniLM
where a test needs a reader that trains and scores in seconds."""

from __future__ import annotations

from pathlib import Path


def tiny_bert(path: str | Path) -> Path:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from tiermem.models.specs import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model("packaged:all-minilm-l6-v2")))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=160, num_labels=1)
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return Path(path)


def tiny_reader(path: str | Path, floor: float = -100.0) -> Path:
    """A tiny reader directory `ask` can answer with: the tiny BERT and its `answer_floor.json` bound to its weights
    (a floor this low: every best sentence is "stated")."""
    import hashlib
    import json

    path = tiny_bert(path)
    digest = hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()
    (path / "answer_floor.json").write_text(json.dumps({"floor": floor, "reader_weights_sha256": digest}))
    return path
