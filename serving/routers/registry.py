"""The only list of router kinds ("module:Class", imported when built): a new kind is a module plus one line here."""

from __future__ import annotations

import importlib
from typing import Any

from tiermem.settings.errors import UsageError

ROUTER_KINDS: dict[str, str] = {
    "local": "serving.routers.local:LocalRouter",  # a LoRA adapter or merged LM, in process
    "remote": "serving.routers.remote:RemoteRouter",  # the adapter behind an OpenAI-compatible endpoint
    "teacher": "serving.routers.teacher:TeacherRouter",  # any chat LLM prompted with the contract
    # a teacher's decisions recorded in a judgments file (labeling/judgments/format.py), read back by question and units
    "recorded-teacher": "serving.routers.recorded:RecordedTeacherRouter",
    "features": "serving.routers.features:FeatureRouter",  # logistic regression on serve-time signals
    "top1-score": "serving.routers.top1:Top1ScoreRouter",  # the top-1 retrieval score against a cutoff
    # a cross-encoder reads each unit against the question; pooled and joined with the signals by a head
    "unit-reader": "serving.routers.unit_reader:UnitReaderRouter",
    "always-answer": "serving.routers.fixed:AlwaysAnswer",
    "always-escalate": "serving.routers.fixed:AlwaysEscalate",
}


def router_class(kind: str) -> Any:
    """The Router subclass registered under `kind`."""
    if kind not in ROUTER_KINDS:
        raise UsageError(f"unknown router kind {kind!r}; known: {sorted(ROUTER_KINDS)}")
    module, _, name = ROUTER_KINDS[kind].partition(":")
    cls = getattr(importlib.import_module(module), name)
    if getattr(cls, "kind", None) != kind:
        raise TypeError(f"registry entry {kind!r} -> {ROUTER_KINDS[kind]} declares kind {getattr(cls, 'kind', None)!r}")
    return cls
