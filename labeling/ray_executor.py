"""`tiermem-router label executor=ray shards=N`: each shard as a Ray task, retried and resumed, then the merge."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Any

from labeling.config import LabelConfig
from labeling.shards import found_shards
from tiermem.runs.rundir import check_output_dir
from tiermem.settings.errors import MissingExtraError, RunError, UnreachableError, UsageError

RAY_EXTRA = "pip install -e '.[ray]'"
CONNECT_TIMEOUT_S = 10.0  # how long the cluster's address may take to accept a connection


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise MissingExtraError(f"executor=ray needs Ray, the optional extra [ray] ({exc}): install it with "
                                f"{RAY_EXTRA} in the checkout (or pip install 'tiermem-router[ray]'), or label with "
                                "executor=process (shard=i/n per process: docs/labeling.md, \"Running shards\")"
                                ) from None
    return ray


def label_shard(cfg: LabelConfig, cwd: str) -> dict[str, Any]:
    """One Ray task: one shard, run by the stage's own code in the driver's directory. A named error comes back as
    a value (Ray would retry a raised one, and bad input fails the same way every time); anything else raises."""
    from labeling.run import run

    previous = os.getcwd()
    os.chdir(cwd)
    try:
        return {"state": run(cfg)}
    except Exception as exc:
        if not isinstance(getattr(exc, "exit_code", None), int):
            raise
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        os.chdir(previous)


def _why(exc: BaseException) -> str:
    """One line for a task Ray gave up on: the task's own exception, or what happened to its worker."""
    cause = getattr(exc, "cause", None) or exc
    lines = [line for line in str(cause).strip().splitlines() if line.strip()]
    return f"{type(cause).__name__}: {lines[0] if lines else '(no message)'}"


def _check_before_start(cfg: LabelConfig) -> None:
    """What would make every task fail, refused before a cluster starts."""
    from labeling.run import selected_conversations

    out = check_output_dir(cfg.output_dir, "label")
    counts = sorted({n for _, n in found_shards(out)})
    if counts and counts != [cfg.shards]:
        raise UsageError(f"{out}: holds the shards of a run with n={', '.join(map(str, counts))}, not "
                         f"shards={cfg.shards}; label-merge takes one count: use a new output_dir, or shards="
                         f"{counts[0]} to resume that run")
    selected_conversations(cfg)  # an unreadable data file or an empty selection, named once here


def _probe(address: str) -> None:
    """Ray retries an address that does not answer for minutes; one that refuses or times out is named at once."""
    import socket

    target = address.split("://", 1)[-1]
    host, _, port = target.rpartition(":")
    if address == "auto" or not host or not port.isdigit():
        return  # "auto" (a cluster started on this machine) and forms Ray parses itself
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise UnreachableError(f"ray_address={address}: the Ray cluster cannot be reached ({exc}); start it (ray start "
                               "--head) or fix ray_address, or leave it empty for a local cluster") from None


def _check_resources(ray: Any, cfg: LabelConfig) -> None:
    """A task asking for more CPUs than the cluster has would wait for them forever: named before submitting."""
    cpus = float(ray.cluster_resources().get("CPU", 0))
    if cfg.ray_cpus_per_task > cpus:
        raise UsageError(f"ray_cpus_per_task={cfg.ray_cpus_per_task:g}, but the Ray cluster has {cpus:g} CPU(s) in "
                         "all: no shard could ever start; ask for at most that many")


def _connect(ray: Any, cfg: LabelConfig) -> bool:
    """Join the configured cluster or start a local one (or use a Ray already initialized here); True when this call
    started Ray and so shuts it down."""
    if ray.is_initialized():
        return False
    if cfg.ray_address:
        _probe(cfg.ray_address)
        ray.init(address=cfg.ray_address)
    else:
        ray.init(include_dashboard=False)  # a local cluster for this run only; nobody looks at its dashboard
    return True


def label_on_ray(cfg: LabelConfig) -> dict[str, Any]:
    """Label every shard as a Ray task, then merge; RunError names the shards that failed for good (others stay)."""
    from labeling.merge import merge

    ray = import_ray()
    _check_before_start(cfg)
    count = cfg.shards
    started = time.perf_counter()
    owned = _connect(ray, cfg)
    failed: dict[int, str] = {}
    try:
        _check_resources(ray, cfg)
        task = ray.remote(label_shard).options(
            num_cpus=cfg.ray_cpus_per_task, max_retries=cfg.ray_max_retries, retry_exceptions=True,
            # one line per shard from here; a per-question bar from every worker would interleave
            runtime_env={"env_vars": {"TQDM_DISABLE": "1"}})
        cwd = os.getcwd()
        pending = {task.remote(dataclasses.replace(cfg, executor="process", shards=None, shard=f"{i}/{count}"),
                               cwd): i for i in range(count)}
        print(f"label: {count} shards submitted to Ray ({cfg.ray_cpus_per_task:g} CPU each, up to "
              f"{cfg.ray_max_retries} retries); output in {cfg.output_dir}/shards", flush=True)
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            index = pending.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as exc:
                result = {"error": f"{_why(exc)} (after up to {cfg.ray_max_retries} retries)"}
            done = f"[{count - len(pending)}/{count}, {time.perf_counter() - started:.1f} s]"
            if "error" in result:
                failed[index] = result["error"]
                print(f"shard {index}/{count} failed {done}: {result['error']}", file=sys.stderr, flush=True)
                continue
            state = result["state"]
            resumed = state.get("resumed_records") or 0
            print(f"shard {index}/{count} done {done}: {state['records']} questions of {len(state['conversations'])} "
                  f"conversation(s), {state['errors']} errors, {state['elapsed_s']} s"
                  + (f"; {resumed} resumed from its committed records" if resumed else ""), flush=True)
    finally:
        if owned:
            ray.shutdown()
    try:
        return merge(cfg)
    except (RunError, UsageError) as exc:  # UsageError: no shard got as far as its directory
        if not failed:
            raise
        causes = "; ".join(f"shard {i}/{count}: {why}" for i, why in sorted(failed.items()))
        raise RunError(f"{exc}. Ray gave up on {causes}") from None
