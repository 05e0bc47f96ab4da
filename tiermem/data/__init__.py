"""Benchmark loaders (LoCoMo, LongMemEval) and the conversation records they produce."""

from tiermem.data.conversations import (
    SAMPLE_PATH,
    Conversation,
    DataError,
    Question,
    Turn,
    load_conversations,
    load_locomo,
    load_longmemeval,
)

__all__ = [
    "SAMPLE_PATH",
    "Conversation",
    "DataError",
    "Question",
    "Turn",
    "load_conversations",
    "load_locomo",
    "load_longmemeval",
]
