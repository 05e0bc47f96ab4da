"""Training step time: the recipes' CPU-aware defaults (fp32, no gradient checkpointing) vs TRL's defaults
(bf16, gradient checkpointing on), SFT and GRPO, a few steps each, same rows, same model.

The trainers are built with the recipes' own config builders (router_train.lm.sft / router_train.lm.grpo), so
the numbers are those of `make sft` / `make grpo` steps; only `max_steps` and the variant differ.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common import PeakRSS, ratio, table

# variant -> (recipe cpu_defaults flag, trainer overrides)
VARIANTS: dict[str, tuple[bool, dict[str, Any]]] = {
    "cpu_defaults": (True, {}),  # what the recipes pick without a GPU
    "trl_defaults": (False, {}),  # TRL's own: bf16=True, activation checkpointing on (+ use_cpu without a GPU)
    "bf16_only": (True, {"bf16": True}),
    "grad_ckpt_only": (True, {"activation_checkpointing": True}),  # the non-deprecated name
}


@dataclass
class TrainingBenchConfig:
    enabled: bool = True
    model: str = "packaged:smollm2-135m-instruct"
    data: str | None = "runs/label/dataset"  # label rows when it exists; else synthetic contract rows
    split: str = "train"
    n_rows: int = 8
    variants: list[str] = field(default_factory=lambda: ["cpu_defaults", "trl_defaults"])
    sft: bool = True
    sft_steps: int = 3  # the first step is reported apart (warm-up), the rest are averaged
    sft_batch_size: int = 2
    grpo: bool = True
    grpo_steps: int = 2
    grpo_batch_size: int = 2
    grpo_num_generations: int = 2
    grpo_max_completion_length: int = 16
    output_dir: str = "runs/bench/training"


def _overrides(variant: str) -> tuple[bool, dict[str, Any]]:
    """The variant's flags; without a GPU, transformers refuses bf16 unless use_cpu is set explicitly."""
    from router_train.lm.recipe_config import has_gpu

    cpu_defaults, overrides = VARIANTS[variant]
    if not has_gpu():
        overrides = {"use_cpu": True, **overrides}
    return cpu_defaults, overrides


class StepTimer:
    """A TrainerCallback recording wall time per optimizer step."""

    def __new__(cls) -> Any:
        from transformers import TrainerCallback

        class _Timer(TrainerCallback):
            def __init__(self) -> None:
                self.steps: list[float] = []
                self._t = 0.0

            def on_step_begin(self, args, state, control, **kw):  # noqa: ANN001
                self._t = time.perf_counter()

            def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
                self.steps.append(time.perf_counter() - self._t)

        return _Timer()


def _rows(cfg: TrainingBenchConfig, tokenizer: Any, with_rewards: bool) -> tuple[Any, str]:
    from pathlib import Path

    from datasets import Dataset

    from tiermem import contract

    if cfg.data and Path(cfg.data).exists():
        from labeling.dataset import load_dataset_dict
        from router_train.lm import rows as rows_lib

        rows = rows_lib.build_rows(load_dataset_dict(cfg.data), cfg.split, tokenizer,
                                   with_rewards=with_rewards, limit=cfg.n_rows)
        if len(rows) >= min(cfg.n_rows, 4):
            return rows, f"{len(rows)} rows of {cfg.data} ({cfg.split})"
    from benchmarks.router_bench import RouterBenchConfig, router_inputs

    questions, summaries, src = router_inputs(RouterBenchConfig(data=None, n_prompts=cfg.n_rows))
    labels = [("ANSWER", "ESCALATE")[i % 2] for i in range(len(questions))]
    rows: dict[str, list[Any]] = {
        "prompt": [contract.render_prompt(tokenizer, q, s) for q, s in zip(questions, summaries, strict=True)],
        "completion": [contract.render_target(lab, "synthetic row for timing") + tokenizer.eos_token
                       for lab in labels],
        "label": labels,
    }
    if with_rewards:
        rows.update(s_ok=[lab == "ANSWER" for lab in labels], r_ok=[True] * len(labels),
                    cost_research_input_tokens=[2000] * len(labels))
    return Dataset.from_dict(rows), f"{len(labels)} synthetic contract rows (no label dataset; {src})"


def _summarize(steps: list[float]) -> dict[str, Any]:
    rest = steps[1:]
    return {"first_step_s": steps[0] if steps else None,
            "s_per_step": statistics.mean(rest) if rest else (steps[0] if steps else None),
            "steps_s": steps}


def _sft_variant(cfg: TrainingBenchConfig, variant: str, out: str) -> dict[str, Any]:
    from trl import SFTTrainer

    from router_train.lm.sft import SFTRecipeConfig, build_sft_config
    from tiermem.models.specs import load_causal_lm

    cpu_defaults, overrides = _overrides(variant)
    recipe = SFTRecipeConfig(model=cfg.model, output_dir=out, cpu_defaults=cpu_defaults, trainer={
        "max_steps": cfg.sft_steps, "per_device_train_batch_size": cfg.sft_batch_size, "logging_steps": 10_000,
        "disable_tqdm": True, **overrides})
    args = build_sft_config(recipe)
    model, tokenizer = load_causal_lm(cfg.model)
    rows, source = _rows(cfg, tokenizer, with_rewards=False)
    timer = StepTimer()
    trainer = SFTTrainer(model=model, args=args, train_dataset=rows.select_columns(["prompt", "completion"]),
                         processing_class=tokenizer, peft_config=recipe.lora.to_peft(), callbacks=[timer])
    with PeakRSS() as mem:
        trainer.train()
    return {**_summarize(timer.steps), "bf16": args.bf16, "gradient_checkpointing": args.gradient_checkpointing,
            "peak_rss_extra_mb": mem.extra_mb, "rows": source}


def _grpo_variant(cfg: TrainingBenchConfig, variant: str, out: str) -> dict[str, Any]:
    from trl import GRPOTrainer

    from router_train.lm.grpo import GRPORecipeConfig, build_grpo_config
    from router_train.lm.rewards import build_reward_funcs
    from tiermem.models.specs import load_causal_lm
    from tiermem.rewards import RewardConfig

    cpu_defaults, overrides = _overrides(variant)
    recipe = GRPORecipeConfig(model=cfg.model, output_dir=out, cpu_defaults=cpu_defaults, trainer={
        "max_steps": cfg.grpo_steps, "per_device_train_batch_size": cfg.grpo_batch_size,
        "num_generations": cfg.grpo_num_generations, "max_completion_length": cfg.grpo_max_completion_length,
        "logging_steps": 10_000, "disable_tqdm": True, **overrides})
    args = build_grpo_config(recipe)
    # A fresh adapter on the base model: step time does not depend on whether SFT ran first.
    model, tokenizer = load_causal_lm(cfg.model)
    rows, source = _rows(cfg, tokenizer, with_rewards=True)
    reward_funcs = build_reward_funcs(RewardConfig(), rows["cost_research_input_tokens"], args.max_completion_length)
    timer = StepTimer()
    trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args,
                          train_dataset=rows.select_columns(["prompt", "label", "s_ok", "r_ok",
                                                             "cost_research_input_tokens"]),
                          processing_class=tokenizer, peft_config=recipe.lora.to_peft(), callbacks=[timer])
    with PeakRSS() as mem:
        trainer.train()
    return {**_summarize(timer.steps), "bf16": args.bf16, "gradient_checkpointing": args.gradient_checkpointing,
            "peak_rss_extra_mb": mem.extra_mb, "rows": source}


def run(cfg: TrainingBenchConfig) -> dict[str, Any]:
    unknown = [v for v in cfg.variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"training.variants: unknown {unknown}; known: {sorted(VARIANTS)}")
    results: dict[str, Any] = {}
    stages = [("sft", _sft_variant)] if cfg.sft else []
    if cfg.grpo:
        stages.append(("grpo", _grpo_variant))
    rows, ratios, notes = [], {}, []
    for stage, fn in stages:
        for variant in cfg.variants:
            key = f"{stage}/{variant}"
            try:
                r = fn(cfg, variant, f"{cfg.output_dir}/{stage}_{variant}")
            except ModuleNotFoundError as exc:
                notes.append(f"{stage}: skipped, module missing: {exc.name}")
                break
            except Exception as exc:  # one variant failing must not hide the others' figures
                notes.append(f"{key}: FAILED: {type(exc).__name__}: {exc}")
                results[key] = {"failed": f"{type(exc).__name__}: {exc}"}
                continue
            results[key] = r
            rows.append([key, r["s_per_step"], r["first_step_s"], r["bf16"], r["gradient_checkpointing"],
                         r["peak_rss_extra_mb"]])
        base = results.get(f"{stage}/cpu_defaults")
        for variant in cfg.variants:
            other = results.get(f"{stage}/{variant}")
            if base and other and variant != "cpu_defaults" and "failed" not in other and "failed" not in base:
                ratios[f"{stage}: {variant} / cpu_defaults s/step"] = ratio(other["s_per_step"], base["s_per_step"])
    sources = sorted({r["rows"] for r in results.values() if "rows" in r})
    text = "\n".join([
        f"model: {cfg.model}; rows: {'; '.join(sources) or 'n/a'}; "
        f"SFT {cfg.sft_steps} steps x batch {cfg.sft_batch_size}; GRPO {cfg.grpo_steps} steps x batch "
        f"{cfg.grpo_batch_size}, {cfg.grpo_num_generations} generations, max {cfg.grpo_max_completion_length} tokens",
        table(["stage/variant", "s/step (after 1st)", "1st step s", "bf16", "grad ckpt", "peak RSS +MB"], rows),
        "",
        table(["ratio (measured in this run)", "x"], [[k, v] for k, v in ratios.items()]),
        "peak RSS +MB is growth over what the process already held: variants after the first reuse memory the "
        "allocator kept, so only the first variant's figure is a full footprint.",
        *notes,
    ])
    return {"variants": results, "ratios": ratios, "notes": notes, "text": text}
