"""The router interface every kind implements, the one decision rule (`decide`: ESCALATE when score >=
threshold_logit, log-odds everywhere), and the Decision a router returns."""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tiermem import contract
from tiermem.models.logistic import logit, sigmoid  # noqa: F401  (the routers' p_escalate and thresholds)
from tiermem.runs.run_meta import RunMeta, read_run_meta, verify_files
from tiermem.settings.errors import RouterLoadError, UsageError

DEFAULT_THRESHOLD_LOGIT = 0.0  # p_escalate = 0.5: the argmax decision
ESCALATE_ALL = -1.0e9  # below any model margin: every question escalates (a JSON-safe -inf)
Summaries = Sequence[Any]  # dicts / objects with text and date (and score), see contract.as_view


@dataclass
class Decision:
    action: str  # one of contract.ACTIONS
    p_escalate: float | None  # None when the router has no probability (fixed, parsed-only routers)
    reason: str
    parsed_ok: bool  # False: the output could not be read and the decision fell back to ESCALATE
    latency_s: float  # wall time of the call that produced it, divided by the batch size
    prompt_tokens: int
    error: str | None = None  # an LLM/endpoint error after retries; the action is then ESCALATE, flagged
    score: float | None = None  # log-odds of ESCALATE (float64 margin); None when the router has no score
    # what the score is made of, when it has parts (an LM router with a signal head: "text" is the LM's margin,
    # "signals: <group>" each feature group's share of the head; they sum to score minus the head's bias)
    score_parts: dict[str, float] | None = None
    # the signals that were outside the range the router was trained on and were clipped to it (feature names);
    # None when the router reads no signals
    clipped: list[str] | None = None


def decide(score: float, threshold_logit: float) -> str:
    """The decision rule, the only place it is written."""
    return "ESCALATE" if score >= threshold_logit else "ANSWER"


def decision_from_text(text: str, latency_s: float, prompt_tokens: int) -> Decision:
    """A generated contract output, parsed (unreadable: ESCALATE with parsed_ok False)."""
    parsed = contract.parse(text)
    return Decision(parsed.action, None, parsed.reason, parsed.parsed_ok, latency_s, prompt_tokens)


def error_decision(exc: BaseException, latency_s: float) -> Decision:
    """An endpoint's failure after its retries: ESCALATE, flagged, never a silent ANSWER."""
    return Decision("ESCALATE", None, "", False, latency_s, 0, error=f"{type(exc).__name__}: {exc}")


def check_lengths(questions: Sequence[str], summaries: Sequence[Summaries]) -> None:
    if len(questions) != len(summaries):
        raise UsageError(f"{len(questions)} questions but {len(summaries)} summary lists")


def check_threshold_logit(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise UsageError(f"threshold_logit must be a log-odds number, got {value!r}")
    return float(value)


def calibrated_threshold_logit(meta: RunMeta | None) -> float | None:
    """The threshold `calibrate` stored with the router (calibration.threshold_logit), if any."""
    value = (meta.calibration or {}).get("threshold_logit") if meta else None
    return None if value is None else float(value)


def open_run_dir(run_dir: str | Path, where: str | None = None) -> RunMeta:
    """Before any loader opens a router's files: tiermem_router.json checked (contract, prompt limits, digests)."""
    run_dir = Path(run_dir)
    meta = read_run_meta(run_dir)
    where = where or f"router {run_dir}"
    contract.check_version(meta.contract_version, where=where)
    contract.check_limits(meta.data.get("router_input"), where=where)
    verify_files(run_dir, meta)
    return meta


class Router(ABC):
    """One kind of router. A kind is one module with a subclass of this, plus one line in registry.py."""

    kind: ClassVar[str] = "base"  # the registry's name for this kind
    # RouterSpec fields this kind reads besides kind/path/name; build() refuses a spec that sets any other
    spec_fields: ClassVar[tuple[str, ...]] = ()
    # optional summary fields this router cannot decide without (the server refuses a request lacking one, 422)
    summary_fields: ClassVar[tuple[str, ...]] = ()
    threshold_logit: float = DEFAULT_THRESHOLD_LOGIT
    name: str = ""  # display name (eval's rows), set by from_spec

    @classmethod
    @abstractmethod
    def from_spec(cls, spec: Any, trunk_cache: dict[str, Any] | None = None) -> Router:
        """Build this kind from a RouterSpec. `trunk_cache`: where LM routers of one base in one offline stage share
        their frozen trunk's states."""

    @classmethod
    def check_spec(cls, spec: Any) -> None:
        """Refuse, when the config is read, a spec this kind cannot build (UsageError naming `router.<field>`)."""
        return None

    @classmethod
    def from_pretrained(cls, path_or_hub_id: str | Path, trunk_cache: dict[str, Any] | None = None,
                        **options: Any) -> Router:
        """`build(RouterSpec(path=..., **options))`; on a subclass the directory must hold that subclass's kind."""
        import dataclasses

        from serving.routers.spec import RouterSpec, build

        known = {f.name for f in dataclasses.fields(RouterSpec)} - {"path", "kind"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise UsageError(f"unknown router option(s) {unknown}; options: {sorted(known)}")
        kind = "auto" if cls is Router else cls.kind
        return build(RouterSpec(path=str(path_or_hub_id), kind=kind, **options), trunk_cache=trunk_cache)

    def route(self, question: str, summaries: Summaries, threshold_logit: float | None = None) -> Decision:
        return self.route_batch([question], [summaries], threshold_logit)[0]

    @abstractmethod
    def route_batch(self, questions: Sequence[str], summaries: Sequence[Summaries],
                    threshold_logit: float | None = None) -> list[Decision]:
        """One Decision per question, in order."""

    def _threshold_logit(self, override: float | None) -> float:
        return check_threshold_logit(self.threshold_logit if override is None else override)

    def score(self, questions: Sequence[str], summaries: Sequence[Summaries]) -> list[float]:
        """Log-odds of ESCALATE per question; routers that only emit parsed decisions have none (usage error)."""
        raise UsageError(f"router kind {self.kind!r} gives no score (log-odds of ESCALATE), so it has no threshold "
                         "to calibrate or sweep; use an LM, features or top1-score router")


class ScoreRouter(Router):
    """A router whose decisions are its scores against the threshold (no language model in the loop)."""

    probabilistic: ClassVar[bool] = False  # True when sigmoid(score) is a fitted probability

    def __init__(self, threshold_logit: float | None = None) -> None:
        self.threshold_logit = DEFAULT_THRESHOLD_LOGIT if threshold_logit is None else float(threshold_logit)
        self.name = self.kind
        self.run_dir: Path | None = None  # the directory it was loaded from, if any
        self.meta: RunMeta | None = None

    @classmethod
    def from_spec(cls, spec: Any, trunk_cache: dict[str, Any] | None = None) -> Router:
        """A score router saved in a run directory (`router.path`), loaded by its kind's `load`."""
        if not spec.path:
            raise RouterLoadError(f"a {cls.kind} router needs router.path: the directory its stage wrote")
        return cls.load(spec.path, threshold_logit=spec.threshold_logit)  # type: ignore[attr-defined]

    def scored(self, questions: Sequence[str], summaries: Sequence[Summaries]
               ) -> tuple[list[float], list[dict[str, float]] | None, list[list[str]] | None]:
        """(scores, what each is made of, the signals clipped in each); routers without parts or signals: `score()`."""
        return self.score(questions, summaries), None, None

    def scored_reading(self, questions: Sequence[str], summaries: Sequence[Summaries]) -> tuple[Any, Any, Any, Any]:
        """`scored`, and the tokens the router read per question to score it (none here: no model reads the text)."""
        scores, parts, clipped = self.scored(questions, summaries)
        return scores, parts, clipped, [0] * len(scores)

    def route_batch(self, questions, summaries, threshold_logit=None):
        check_lengths(questions, summaries)
        t = self._threshold_logit(threshold_logit)
        started = time.perf_counter()
        scores, parts, clipped, tokens = self.scored_reading(questions, summaries)
        dt = (time.perf_counter() - started) / max(len(scores), 1)
        parts, clipped = parts or [None] * len(scores), clipped or [None] * len(scores)
        return [Decision(decide(s, t), sigmoid(s) if self.probabilistic else None,
                         f"{self.kind} score {s:.3f}" + (f" (text {p['text']:.3f})" if p and "text" in p else "")
                         + f" vs threshold {t:.3f}", True, dt, int(n), score=s, score_parts=p, clipped=c)
                for s, p, c, n in zip(scores, parts, clipped, tokens, strict=True)]
