"""A router run's directory: the writer every router run ends with, and a score router's directory read back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from serving.routers.base import calibrated_threshold_logit, open_run_dir
from tiermem import contract
from tiermem.runs.run_meta import RunMeta, RunMetaFile, file_digests, read_run_meta
from tiermem.settings.errors import RouterLoadError


def score_run_meta(kind: str, data: dict[str, Any], metrics: dict[str, Any], extra: dict[str, Any]) -> RunMeta:
    return RunMeta(contract_version=contract.CONTRACT_VERSION, base_model=f"none ({kind}: no language model)",
                   stage=kind, adapter=False, training={}, data=data, metrics=metrics,
                   router_kind=kind, extra=extra)


def write_router_run(run_dir: str | Path, meta: RunMeta) -> Path:
    """The card, then the metadata with every file's digest, written last since it marks a finished run."""
    from serving.model_card import save_with_card

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    meta.files = file_digests(run_dir)
    save_with_card(RunMetaFile.new(run_dir, meta))
    return run_dir


def open_score_run(path: str | Path, kind: str) -> tuple[Path, RunMeta]:
    """A run directory that must hold a `kind` router, checked like every router run (contract, digests)."""
    run_dir = Path(path).expanduser()
    meta = read_run_meta(run_dir)
    if meta.router_kind != kind:
        raise RouterLoadError(f"{run_dir}: tiermem_router.json says router_kind {meta.router_kind!r}, not {kind!r}")
    return run_dir, open_run_dir(run_dir)


def load_score_router(cls: Any, path: str | Path, threshold_logit: float | None,
                      read: Callable[[Path], tuple[Any, ...]] = lambda run_dir: ()) -> Any:
    """`cls(*read(run_dir), threshold_logit=...)` from its checked run directory; the stored threshold unless given."""
    run_dir, meta = open_score_run(path, cls.kind)
    threshold = threshold_logit if threshold_logit is not None else calibrated_threshold_logit(meta)
    router = cls(*read(run_dir), threshold_logit=threshold)
    router.run_dir, router.meta, router.name = run_dir, meta, f"{cls.kind}:{path}"
    return router
