"""The labeling stage's config and the question subset it selects; apart from the run so the CLI and benchmarks
read a label config without importing the labeler."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from labeling.evidence import EvidenceConfig
from labeling.shards import parse_shard
from labeling.split import SplitSpec
from labeling.unit_targets import UnitTargetsConfig
from tiermem.data.conversations import Conversation, detect_file_format
from tiermem.llm import LLMConfig
from tiermem.memory import MemoryConfig
from tiermem.settings.config import AT_LEAST_ONE, check_declared
from tiermem.settings.errors import ConfigError

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "label" / "cpu_default.yaml"
# Minimal-pair kinds, in the order their records are emitted (labeling/minimal_pairs.py builds them).
PAIR_KINDS = ("drop_answer", "drop_irrelevant", "bring_answer", "near_miss")


@dataclass
class LLMRoles:
    answerer: LLMConfig | None = field(default_factory=LLMConfig)  # both paths; null with generate_answers=false
    summarizer: LLMConfig | None = None  # memory.summarizer=llm only; None = the answerer
    judge: LLMConfig | None = None  # CORRECT/WRONG judge; None = lexical judge alone
    sufficiency: LLMConfig | None = None  # strict sufficiency judge; None = not run
    teacher: LLMConfig | None = None  # router-contract teacher; None = templated SFT targets
    # conservative coverage judge (labeling/judgments/live.py): judges the questions `judgments` does not cover yet
    # and appends them to that file, its cache; None = the file's judgments alone
    coverage: LLMConfig | None = None


@dataclass
class MinimalPairsConfig:
    """Train-split variants of each question's summary set, one unit apart, labeled by the evidence rule."""

    enabled: bool = False
    # retrieval depth the brought-in units come from (ranks top_k+1 .. deep_k)
    deep_k: int = field(default=20, metadata=AT_LEAST_ONE)

    def __post_init__(self) -> None:
        check_declared(self, "minimal_pairs.")


@dataclass
class LabelConfig:
    data_path: str | None = None  # None: the sample conversation shipped in tiermem/data
    # auto | locomo | longmemeval | tiermem (your own conversations) | realmem (a file or a folder of histories)
    dataset_format: Literal["auto", "locomo", "longmemeval", "tiermem", "realmem"] = "auto"
    conversations: list[str] = field(default_factory=list)  # subset by id; empty = all
    max_conversations: int | None = field(default=None, metadata=AT_LEAST_ONE)  # None: all
    max_questions_per_conversation: int | None = field(default=None, metadata=AT_LEAST_ONE)
    question_sampling: Literal["random", "first"] = "random"  # random (seeded) | first
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    llm: LLMRoles = field(default_factory=LLMRoles)
    judge_threshold: float = field(default=0.3, metadata={"ge": 0, "le": 1})  # LoCoMo F1 threshold of the lexical judge
    evidence: EvidenceConfig = field(default_factory=EvidenceConfig)
    label_rule: Literal["outcome", "evidence"] = "outcome"  # outcome (the paper's) | evidence; both are always recorded
    # false: no answer is generated on either path (the evidence rule needs none). Research cost fields then hold
    # the input tokens of the first round's pages and prompts, flagged `cost_estimated`; outcome labels stay empty.
    generate_answers: bool = True
    minimal_pairs: MinimalPairsConfig = field(default_factory=MinimalPairsConfig)
    # per-unit targets (labeling/unit_targets.py): each retrieved unit's own answer recall and gold turns;
    # unit_targets.deep_k also labels ranks top_k+1..deep_k (train split only) for a unit reader to learn from
    unit_targets: UnitTargetsConfig = field(default_factory=UnitTargetsConfig)
    # a careful-reading judgments file (labeling/judgments/, format tiermem-judgments): where a question's router
    # units hash to a judgment's, its summary verdict (s_ok), per-unit verdicts and spans and its teacher decision
    # come from the judgment, the lexical evidence rule elsewhere; each record's `s_ok_by` says which decided.
    # r_ok keeps its rule (the research pages were not judged). None = the lexical rule everywhere
    judgments: str | None = None
    # careful-reading verdicts to check the labels against (labeling/judgments/verdicts.py: tiermem-judgments or
    # realmem-careful-reading files): report.md and stats.json say how the labels agree with them, where a verdict
    # read the record's own units. Never a label source. Empty = no check
    verdicts: list[str] = field(default_factory=list)
    split: SplitSpec = field(default_factory=SplitSpec)
    seed: int = 0
    output_dir: str = "runs/label"
    tiers_dir: str | None = None  # tier cache; None = <output_dir>/tiers
    llm_cache: str | None = None  # response cache for roles without cache_path; None = <output_dir>/llm_cache.sqlite
    # questions in flight (HTTP backends only; the local backend runs one at a time)
    concurrency: int = field(default=1, metadata=AT_LEAST_ONE)
    # "i/n": label only shard i of n (conversations by a hash of their id) into <output_dir>/shards/<i>-of-<n>/;
    # `tiermem-router label-merge` then writes the one dataset. None = every conversation in this process.
    shard: str | None = None
    # How `label` runs: "process" (in this process; with shard=i/n, that one shard) | "ray" (`shards` shards, one Ray
    # task each, then label-merge; the optional extra: pip install -e '.[ray]'; docs/labeling.md "Running shards")
    executor: Literal["process", "ray"] = "process"
    shards: int | None = field(default=None, metadata=AT_LEAST_ONE)  # executor=ray: how many shards (Ray tasks)
    # executor=ray: the cluster. None = start a local one on this machine (every core) for this run; "auto" = join
    # the one `ray start` runs here; or an address (host:6379, ray://host:10001) to join that one
    ray_address: str | None = None
    ray_cpus_per_task: float = field(default=1.0, metadata={"gt": 0})  # executor=ray: CPUs reserved per shard task
    # executor=ray: Ray reruns a shard task whose worker died (SIGKILL, OOM, a lost node) or that raised, up to
    # this many times; each rerun resumes from the shard's committed records
    ray_max_retries: int = field(default=3, metadata={"ge": 0})
    push_to_hub: str | None = None  # dataset repo id
    hub_private: bool = True

    def __post_init__(self) -> None:
        check_declared(self)
        if not self.generate_answers and self.label_rule != "evidence":
            raise ConfigError("generate_answers=false labels without answers: it needs label_rule=evidence "
                              f"(got {self.label_rule!r}); the outcome rule judges generated answers")
        if self.minimal_pairs.enabled:
            if self.generate_answers or self.label_rule != "evidence":
                raise ConfigError("minimal_pairs needs label_rule=evidence and generate_answers=false: a variant's "
                                  "label comes from the evidence rule over its summary set, while the outcome rule "
                                  "would need answers generated from each new summary set")
            if self.minimal_pairs.deep_k <= self.memory.top_k:
                raise ConfigError(f"minimal_pairs.deep_k ({self.minimal_pairs.deep_k}) must exceed memory.top_k "
                                  f"({self.memory.top_k}): brought-in units come from the ranks below top_k")
        if self.unit_targets.deep_k is not None and self.unit_targets.deep_k < self.memory.top_k:
            raise ConfigError(f"unit_targets.deep_k ({self.unit_targets.deep_k}) must be >= memory.top_k "
                              f"({self.memory.top_k}) or null: it extends the router's retrieval")
        if self.llm.coverage is not None and not self.judgments:
            raise ConfigError("llm.coverage writes careful-reading judgments into a file: it needs judgments=PATH "
                              "(a new path, or one a live coverage judge wrote before)")
        self._check_executor()
        if self.shard is not None:
            parse_shard(self.shard)
        if self.shard is not None or self.shards is not None:
            key = "shard" if self.shard is not None else "shards"
            for name in ("answerer", "summarizer", "judge", "sufficiency", "teacher", "coverage"):
                role = getattr(self.llm, name)
                if role is not None and role.backend == "local" and role.temperature > 0:
                    # one process-wide torch RNG: a sampled reply would depend on the calls made before it,
                    # i.e. on which conversations share the process
                    raise ConfigError(f"{key}: llm.{name}.temperature={role.temperature} samples a local model "
                                      "from one process-wide RNG, so records would depend on how the conversations "
                                      "are sharded; use temperature 0 (greedy) or an OpenAI-compatible backend "
                                      "(its per-request seed) for a sharded run")

    def _check_executor(self) -> None:
        if self.executor == "process":
            if self.shards is not None:
                raise ConfigError(f"shards={self.shards} runs every shard as a Ray task: it needs executor=ray "
                                  "(one process labels one shard with shard=i/n)")
            return
        if self.shards is None:
            raise ConfigError("executor=ray needs shards=N (N >= 1 Ray tasks)")
        if self.shard is not None:
            raise ConfigError(f"executor=ray runs every shard of {self.shards} itself; leave shard= out "
                              f"(got shard={self.shard})")


def select(cfg: LabelConfig, conversations: list[Conversation]) -> list[Conversation]:
    """The conversation subset and, per conversation, the question subset (seeded, stable order)."""
    if cfg.conversations:
        known = {c.conv_id for c in conversations}
        missing = [c for c in cfg.conversations if c not in known]
        if missing:
            raise ConfigError(f"conversations {missing} are not in {cfg.data_path or 'the sample'}")
        conversations = [c for c in conversations if c.conv_id in set(cfg.conversations)]
    if cfg.max_conversations is not None:
        conversations = conversations[: cfg.max_conversations]
    out = []
    for conv in conversations:
        questions = list(conv.questions)
        limit = cfg.max_questions_per_conversation
        if limit is not None and len(questions) > limit:
            if cfg.question_sampling == "random":
                # a seeded permutation's prefix: a larger limit extends a smaller one (resumed runs reuse records)
                order = list(range(len(questions)))
                random.Random(f"{cfg.seed}:{conv.conv_id}").shuffle(order)
                keep = set(order[:limit])
                questions = [q for i, q in enumerate(questions) if i in keep]
            else:
                questions = questions[:limit]
        out.append(dataclasses.replace(conv, questions=questions))
    return out


def data_format(cfg: LabelConfig, path: str | Path | None) -> str:
    if cfg.dataset_format != "auto":
        return cfg.dataset_format
    from tiermem.data.conversations import SAMPLE_PATH

    # the loader's reader: a BOM is fine, bad bytes and bad JSON are DataErrors naming the file
    return detect_file_format(Path(path) if path else SAMPLE_PATH)


LABEL_RUN_CONFIG = "config.yaml"  # what the label stage writes beside `dataset/` and the records JSONL


def label_run_config(dataset: str | Path) -> tuple[Path, dict | None, str | None]:
    """(path, mapping or None, YAML error or None) of the config of the label run that made a dataset or records
    file."""
    import yaml

    path = Path(dataset)
    config = (path.parent if path.exists() else path) / LABEL_RUN_CONFIG
    if not config.is_file():
        return config, None, None
    try:
        loaded = yaml.safe_load(config.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        return config, None, f"not valid YAML: {exc}"
    return config, loaded if isinstance(loaded, dict) else None, None
