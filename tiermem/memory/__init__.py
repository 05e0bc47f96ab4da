"""The two-tier memory: immutable raw pages (tier 2), linked summary units (tier 1), policies, runtime."""

from tiermem.memory.policies import PathCost, research_policy, summary_policy
from tiermem.memory.runtime import MemoryConfig, MemoryRuntime

__all__ = ["MemoryConfig", "MemoryRuntime", "PathCost", "research_policy", "summary_policy"]
