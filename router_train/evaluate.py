"""`make eval`: score a router on a labeled split by counterfactual replay, against the baselines.

    tiermem-router eval [--config configs/eval/default.yaml] [router.path=runs/grpo] [split=validation]

Reads the label DatasetDict (or the labeling JSONL), asks the router for every record's decision on
the stored router input (`router_summaries`, never re-retrieved), replays the decisions through the
records' per-path correctness and costs (router_train.metrics) and writes eval.json, eval.md,
eval.png and predictions.jsonl under `out_dir`. `live.enabled=true` additionally runs the memory
runtime end to end on held-out conversations (router_train.live_eval).
"""

from __future__ import annotations

import json
import logging
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labeling.dataset import load_split  # noqa: F401  (re-exported: evaluate.load_split)
from router_train import eval_report, metrics
from serving import contract
from serving.artifacts import RunMetaError
from serving.router import Decision, RouterLoadError
from tiermem.config import ConfigError, parse_cli
from tiermem.llm.base import LLMConfig
from tiermem.models import ModelSpecError

log = logging.getLogger(__name__)
DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "eval" / "default.yaml"
ROUTER_KINDS = ("trained", "llm", "none")


@dataclass
class RouterSpec:
    kind: str = "trained"  # trained: a run dir / hub id; llm: an LLM prompted with the contract; none: baselines only
    path: str = "runs/grpo"  # kind=trained: passed to serving.router.Router.from_pretrained
    mode: str = "fast"  # kind=trained: fast (action-token probabilities, sweepable) | generate (parsed JSON)
    threshold: float | None = None  # None: the calibrated threshold saved with the router
    batch_size: int = 8
    llm: LLMConfig = field(default_factory=LLMConfig)  # kind=llm: the teacher / any chat model
    max_tokens: int = 64  # kind=llm: the action comes first, so short completions suffice


@dataclass
class LiveConfig:
    enabled: bool = False
    label_config: str | None = None  # the labeling config; None: the config.yaml labeling saved next to `dataset`
    data: str | None = None  # conversations file; None: the one the label config used
    split_from_dataset: bool = True  # only conversations of `split` in the label dataset (held out)
    max_conversations: int = 1
    max_questions: int = 10  # per conversation (the first ones, in file order)
    workdir: str = "runs/eval/live"  # tiers built here
    judge_threshold: float = 0.3  # lexical judge (LoCoMo F1), as labeling's embedded default


@dataclass
class EvalConfig:
    dataset: str = "runs/label/dataset"  # DatasetDict dir (save_to_disk) or the labeling records .jsonl
    split: str = "test"
    correctness: str = "label_rule"  # label_rule | outcome | evidence (see metrics.correctness_fields)
    include_unlabeled: bool = True  # keep records the label rule dropped (both paths wrong) in accuracy
    max_records: int | None = None
    router: RouterSpec = field(default_factory=RouterSpec)
    sweep: bool = True
    recover_shares: list[float] = field(default_factory=lambda: [0.8, 0.95])
    out_dir: str = "runs/eval"
    live: LiveConfig = field(default_factory=LiveConfig)

    def __post_init__(self) -> None:
        if self.correctness not in metrics.CORRECTNESS_RULES:
            raise ValueError(f"correctness must be one of {metrics.CORRECTNESS_RULES}, got {self.correctness!r}")
        if self.router.kind not in ROUTER_KINDS:
            raise ValueError(f"router.kind must be one of {ROUTER_KINDS}, got {self.router.kind!r}")
        if self.router.mode not in ("fast", "generate"):
            raise ValueError(f"router.mode must be fast or generate, got {self.router.mode!r}")


# ---- data ------------------------------------------------------------------------------------


# ---- routers ---------------------------------------------------------------------------------


def build_router(spec: RouterSpec) -> tuple[Any, str]:
    if spec.kind == "trained":
        from serving.router import Router

        router = Router.from_pretrained(spec.path, mode=spec.mode, batch_size=spec.batch_size)
        return router, f"trained:{spec.path} ({spec.mode})"
    if spec.kind == "llm":
        from serving.router import TeacherRouter
        from tiermem.llm import build_llm

        llm = build_llm(spec.llm)
        return TeacherRouter(llm, max_tokens=spec.max_tokens), f"llm-prompt:{llm.name}"
    raise ValueError(f"router.kind={spec.kind!r} builds no router")


def route_records(router: Any, records: Sequence[dict[str, Any]], threshold: float | None,
                  batch_size: int) -> list[Decision]:
    """Decisions on the stored router input; any object with serving.router's route_batch works."""
    from tqdm import tqdm

    out: list[Decision] = []
    for start in tqdm(range(0, len(records), batch_size), desc="routing", unit="batch"):
        chunk = records[start:start + batch_size]
        for i, rec in enumerate(chunk):
            if not isinstance(rec.get("router_summaries"), list):
                raise metrics.RecordError(
                    f"record {start + i} (qid={rec.get('qid')!r}): field 'router_summaries' must be a list")
        decisions = router.route_batch([r["question"] for r in chunk], [r["router_summaries"] for r in chunk],
                                       threshold=threshold)
        if len(decisions) != len(chunk):
            raise RuntimeError(f"router returned {len(decisions)} decisions for {len(chunk)} questions")
        out.extend(decisions)
    return out


# ---- the stage -------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "python": platform.python_version()}
    try:
        import torch

        from tiermem.models import cpu_count

        info.update(cores=cpu_count(), torch=torch.__version__, torch_threads=torch.get_num_threads(),
                    cuda=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
    except ImportError:
        pass
    return info


def _replayable(rec: dict[str, Any], cfg: EvalConfig) -> bool:
    """The records metrics.load_cases keeps, in the same order (decisions must line up with cases)."""
    if rec.get("error"):
        return False
    if rec.get("label") is None:
        fields = metrics.correctness_fields(rec, cfg.correctness)
        return cfg.include_unlabeled and all(rec.get(f) is not None for f in fields)
    return True


def evaluate_records(records: Sequence[dict[str, Any]], cfg: EvalConfig, router: Any | None = None,
                     router_name: str = "none") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Replay `router` (or only the baselines) on `records`; returns the report dict and per-case predictions."""
    case_set = metrics.load_cases(records, cfg.correctness, cfg.include_unlabeled)
    cases = case_set.cases
    if not cases:
        raise ConfigError(f"no evaluable records in split {cfg.split!r} of {cfg.dataset}")
    kept = [r for r in records if _replayable(r, cfg)]
    if len(kept) != len(cases):
        raise RuntimeError(f"internal: {len(kept)} routable records but {len(cases)} replay cases")
    label_rules = sorted({str(r.get("label_rule")) for r in kept})
    notes: list[str] = []
    if case_set.n_unknown:
        notes.append(f"{case_set.n_unknown} unlabeled record(s) skipped: a path's correctness is unknown "
                     f"under rule {cfg.correctness!r}")
    if case_set.n_error:
        notes.append(f"{case_set.n_error} labeling error record(s) skipped (no verdicts)")
    meta: dict[str, Any] = {
        "dataset": str(cfg.dataset), "split": cfg.split, "router": router_name, "mode": "replay",
        "correctness_rule": cfg.correctness, "label_rule": ", ".join(label_rules), "n": len(cases),
        "n_error": case_set.n_error, "n_unlabeled": case_set.n_unlabeled, "n_unknown": case_set.n_unknown,
        "machine": machine_info(), "notes": notes,
    }
    predictions: list[dict[str, Any]] = []
    routed = sweep = None
    random_rate = None
    if router is not None:
        t0 = time.perf_counter()
        decisions = route_records(router, kept, cfg.router.threshold, cfg.router.batch_size)
        meta["routing_wall_s"] = round(time.perf_counter() - t0, 3)
        meta["threshold"] = cfg.router.threshold if cfg.router.threshold is not None else getattr(
            router, "threshold", None)
        escalate = [1.0 if d.action == "ESCALATE" else 0.0 for d in decisions]
        rtok = [float(d.prompt_tokens) for d in decisions]
        rlat = [float(d.latency_s) for d in decisions]
        routed = metrics.replay(cases, escalate, "routed", rtok, rlat, [d.parsed_ok for d in decisions])
        random_rate = routed.escalation_rate
        n_router_errors = sum(getattr(d, "error", None) is not None for d in decisions)
        meta["router_errors"] = n_router_errors
        if n_router_errors:
            notes.append(f"{n_router_errors} router call(s) failed after retries; routed as ESCALATE and counted")
        if cfg.sweep:
            if any(d.p_escalate is None for d in decisions):
                notes.append("router gives no p_escalate; sweep uses its hard decisions (operating point only)")
            probs = [d.p_escalate if d.p_escalate is not None else e for d, e in zip(decisions, escalate, strict=True)]
            sweep = metrics.sweep(cases, probs, rtok, rlat, cfg.recover_shares)
        for rec, d in zip(kept, decisions, strict=True):
            predictions.append({"conv_id": rec.get("conv_id"), "qid": rec["qid"], "label": rec.get("label"),
                                "action": d.action, "p_escalate": d.p_escalate, "reason": d.reason,
                                "parsed_ok": d.parsed_ok, "latency_s": d.latency_s,
                                "prompt_tokens": d.prompt_tokens, "error": getattr(d, "error", None)})
    report = eval_report.build_report(routed=routed, baselines=metrics.baselines(cases, random_rate),
                                      sweep=sweep, meta=meta)
    return report, predictions


def write_outputs(report: dict[str, Any], predictions: list[dict[str, Any]], out_dir: str | Path) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"plot": out / "eval.png"}
    report["meta"]["plot"] = str(paths["plot"])
    eval_report.write_plot(report, paths["plot"])
    paths["json"] = eval_report.write_json(report, out / "eval.json")
    paths["markdown"] = eval_report.write_markdown(report, out / "eval.md")
    if predictions:
        paths["predictions"] = out / "predictions.jsonl"
        paths["predictions"].write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in predictions))
    return paths


def run(cfg: EvalConfig) -> dict[str, Path]:
    records = load_split(cfg.dataset, cfg.split)
    if cfg.max_records is not None:
        records = records[: cfg.max_records]
    router, name = (None, "baselines only") if cfg.router.kind == "none" else build_router(cfg.router)
    report, predictions = evaluate_records(records, cfg, router, name)
    paths = write_outputs(report, predictions, cfg.out_dir)
    from serving.model_card import record_eval

    record_eval(cfg.router.path if cfg.router.kind == "trained" else None, report, paths["json"])  # run card
    print(eval_report.render_markdown(report))
    if cfg.live.enabled:
        from router_train.live_eval import run_live

        paths.update(run_live(cfg, router, name))
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return paths


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = parse_cli(EvalConfig, list(sys.argv[1:] if argv is None else argv), default_config=DEFAULT_CONFIG)
        run(cfg)
    except (ConfigError, FileNotFoundError, metrics.RecordError, contract.ContractVersionError, RouterLoadError,
            RunMetaError, ModelSpecError) as exc:
        print(f"eval: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
