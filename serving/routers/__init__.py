"""Routers: the interface (base.py), the kinds (registry.py) and the one way to build one (spec.py)."""

from serving.routers.base import Decision, Router, ScoreRouter, decide
from serving.routers.spec import RouterSpec, as_router_spec, build

__all__ = ["Decision", "Router", "RouterSpec", "ScoreRouter", "as_router_spec", "build", "decide"]
