"""Benchmark loaders (LoCoMo, LongMemEval) and the conversation records they produce."""

from tiermem.data.conversations import (
    SAMPLE_PATH,
    DataError,
    Turn,
    load_conversations,
    load_locomo,
    load_longmemeval,
)

__all__ = [
    "SAMPLE_PATH",
    "DataError",
    "Turn",
    "load_conversations",
    "load_locomo",
    "load_longmemeval",
]
