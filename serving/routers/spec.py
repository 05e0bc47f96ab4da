"""`RouterSpec`, the `router:` config of every stage, and `build(spec)`, the one way to get a router."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serving.routers.registry import ROUTER_KINDS, router_class
from tiermem.llm.base import LLMConfig
from tiermem.models.specs import is_hub_id
from tiermem.runs.run_meta import read_run_meta
from tiermem.settings.config import AT_LEAST_ONE, check_declared
from tiermem.settings.errors import HubError, MissingFileError, UnreachableError, UsageError

# besides the registry's kinds: "auto" (what the directory's tiermem_router.json names) and "none" (no router:
# eval then reports the baselines only)
META_KINDS = ("auto", "none")
# fields every kind takes; the others belong to the kinds whose `spec_fields` name them
COMMON_FIELDS = ("path", "kind", "name", "threshold_logit", "batch_size")


@dataclass
class RouterSpec:
    """`router:` in a config is this mapping, or a plain path / hub id / kind as shorthand (`router: runs/grpo`)."""

    path: str | None = "runs/grpo"  # run directory or hub id (LM, features or top1-score router)
    kind: str = "auto"  # auto: what the directory's tiermem_router.json names; none; or a registry kind
    name: str | None = None  # display name (eval's compare rows)
    threshold_logit: float | None = None  # escalate when score >= this; None: the threshold calibrate stored
    batch_size: int = field(default=8, metadata=AT_LEAST_ONE)  # questions per route_batch call
    revision: str | None = None  # local: hub revision
    mode: str = "fast"  # local: fast (log-odds of the action tokens) | generate (parsed JSON)
    base_model: str | None = None  # local: the base to load the adapter on; None: the one the router names
    llm: LLMConfig = field(default_factory=LLMConfig)  # teacher: the chat model prompted with the contract
    max_tokens: int = 64  # teacher / remote: the action comes first, so short completions suffice
    base_url: str | None = None  # remote: OpenAI-compatible endpoint serving the router adapter (vLLM, ...)
    model: str | None = None  # remote: the model name the endpoint serves the adapter under
    api_key_env: str = "OPENAI_API_KEY"  # remote
    # remote: the run directory of the adapter the endpoint serves, when it has a signal head (added to the margin)
    signal_head: str | None = None

    @classmethod
    def from_shorthand(cls, value: str) -> RouterSpec:
        """A directory or hub id, or a kind that needs none (`router=always-escalate`)."""
        if value in ROUTER_KINDS and not Path(value).is_dir():
            return cls(path=None, kind=value)
        return cls(path=value)

    def __post_init__(self) -> None:
        if self.kind not in (*META_KINDS, *ROUTER_KINDS):
            raise UsageError(f"unknown router kind {self.kind!r} (router.kind); known: "
                             f"{[*META_KINDS, *ROUTER_KINDS]}")
        if self.threshold_logit is not None and not math.isfinite(self.threshold_logit):
            raise UsageError(f"router.threshold_logit must be a finite log-odds number or null, got "
                             f"{self.threshold_logit!r}")
        check_declared(self, "router.")
        if self.kind == "auto" and not self.path:
            raise UsageError("router.kind=auto needs router.path (a run directory or hub id)")
        if self.kind in ROUTER_KINDS:
            router_class(self.kind).check_spec(self)


def as_router_spec(value: RouterSpec | str) -> RouterSpec:
    """Configs built in Python may name the router by its path, as YAML and overrides may."""
    return RouterSpec.from_shorthand(value) if isinstance(value, str) else value


def router_kind_of(path_or_hub_id: str | Path, revision: str | None = None) -> str:
    """The router_kind a run directory or hub repo holds; else the LM router's loader names what is wrong."""
    path = Path(path_or_hub_id).expanduser()
    if path.is_dir():
        return read_run_meta(path).router_kind
    if is_hub_id(str(path_or_hub_id)):
        from serving.hub import pull

        try:
            return read_run_meta(pull(str(path_or_hub_id), revision=revision, verify=False)).router_kind
        except (HubError, UnreachableError, MissingFileError):
            pass  # the LM router's loader pulls it again and names what is wrong
    return "local"


def resolved_kind(spec: RouterSpec) -> str:
    if spec.kind == "none":
        raise UsageError("router.kind=none builds no router")
    return router_kind_of(spec.path, spec.revision) if spec.kind == "auto" else spec.kind  # type: ignore[arg-type]


def pulled(spec: RouterSpec, kind: str) -> RouterSpec:
    """A score router named by hub id, read from its pulled snapshot (an LM router's loader pulls for itself)."""
    if kind == "local" or not spec.path or Path(spec.path).expanduser().exists() or not is_hub_id(spec.path):
        return spec
    if not hasattr(router_class(kind), "load"):  # a kind that reads no directory (always-*, remote, teacher)
        return spec
    from serving.hub import pull

    return dataclasses.replace(spec, path=str(pull(spec.path, revision=spec.revision)), revision=None,
                               name=spec.name or spec.path)


def build(spec: RouterSpec | str, trunk_cache: dict[str, Any] | None = None) -> Any:
    """The router a spec names; a field its kind does not read is refused (a typo must not be ignored)."""
    spec = as_router_spec(spec)
    kind = resolved_kind(spec)
    spec = pulled(spec, kind)
    cls = router_class(kind)
    defaults = RouterSpec(path=None, kind="none")
    ignored = [f.name for f in dataclasses.fields(RouterSpec) if f.name not in (*COMMON_FIELDS, *cls.spec_fields)
               and getattr(spec, f.name) != getattr(defaults, f.name)]
    if ignored:
        raise UsageError(f"router.{ignored[0]} does not apply to a {kind} router; it takes "
                         f"{sorted([*COMMON_FIELDS, *cls.spec_fields])}")
    return cls.from_spec(spec, trunk_cache=trunk_cache)
