"""The LLM behind each labeling role, and the lock proxy that lets questions in flight share one memory."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path
from typing import Any

from labeling.config import LabelConfig
from tiermem.llm import LLM, LLMConfig, build_llm
from tiermem.settings.errors import ConfigError


class Roles:
    """The LLM behind each role; one instance per distinct config (roles sharing a model share its weights)."""

    NAMES = ("answerer", "summarizer", "judge", "sufficiency", "teacher", "coverage")

    def __init__(self, roles: dict[str, LLM | None], need_answerer: bool = True) -> None:
        if need_answerer and roles.get("answerer") is None:
            raise ConfigError("labeling needs an answerer LLM (llm.answerer)")
        unknown = set(roles) - set(self.NAMES)
        if unknown:
            raise ValueError(f"unknown LLM role(s) {sorted(unknown)}; roles are {self.NAMES}")
        self.roles = {name: roles.get(name) for name in self.NAMES}
        self.roles["summarizer"] = self.roles["summarizer"] or self.roles["answerer"]

    @classmethod
    def from_config(cls, cfg: LabelConfig) -> Roles:
        default_cache = cfg.llm_cache or str(Path(cfg.output_dir) / "llm_cache.sqlite")
        built: dict[str, LLM] = {}
        roles: dict[str, LLM | None] = {}
        for name in cls.NAMES:
            role_cfg: LLMConfig | None = getattr(cfg.llm, name)
            if role_cfg is None or (name == "summarizer" and cfg.memory.summarizer != "llm") or (
                    name == "answerer" and not cfg.generate_answers):
                roles[name] = None
                continue
            if role_cfg.cache_path is None:
                role_cfg = dataclasses.replace(role_cfg, cache_path=default_cache)
            key = json.dumps(dataclasses.asdict(role_cfg), sort_keys=True)
            if key not in built:
                built[key] = build_llm(role_cfg)
            roles[name] = built[key]
        return cls(roles, need_answerer=cfg.generate_answers)

    def _distinct(self) -> list[LLM]:
        return list({id(llm): llm for llm in self.roles.values() if llm is not None}.values())

    def __getitem__(self, name: str) -> LLM | None:
        return self.roles[name]

    def thread_safe(self) -> bool:
        """HTTP clients (and the test double) may be called from several threads; in-process models may not."""
        return all(getattr(llm, "backend", "") in ("openai", "scripted") for llm in self._distinct())

    def stats(self) -> dict[str, Any]:
        out = {}
        for i, llm in enumerate(self._distinct()):
            names = [n for n, r in self.roles.items() if r is llm]
            out[llm.name if llm.name not in out else f"{llm.name}#{i}"] = {"roles": names, **llm.stats}
        return out


class Serialized:
    """Runs every method of the wrapped object (and of the named attributes) under one lock: SQLite connections,
    the tokenizer and the page cache are not safe under concurrent calls; the LLM calls between them run in parallel."""

    def __init__(self, target: Any, lock: threading.RLock, nested: tuple[str, ...] = ()) -> None:
        self._target, self._lock = target, lock
        self._nested = {name: Serialized(getattr(target, name), lock) for name in nested}

    def __getattr__(self, name: str) -> Any:
        if name in self._nested:
            return self._nested[name]
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return call
