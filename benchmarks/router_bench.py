"""Router decision speed: fast path (one forward pass, action-token probabilities) vs generate path
(full JSON), batch sizes 1 and 8, with and without the cached instruction prefix; peak memory.

Same model object, same prompts for every variant, so the ratios compare only the decoding strategy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from benchmarks.common import PeakRSS, ratio, table, time_call


@dataclass
class RouterBenchConfig:
    enabled: bool = True
    router: str | None = None  # a trained run dir / hub id; None: the untrained base model below
    model: str = "packaged:smollm2-135m-instruct"
    data: str | None = "runs/label/dataset"  # real router inputs when it exists; else built from `data_path`
    split: str = "test"
    data_path: str | None = None  # conversations file for synthetic router inputs; None: the shipped sample
    n_prompts: int = 16
    k_summaries: int = 5
    batch_sizes: list[int] = field(default_factory=lambda: [1, 8])
    fast_repeats: int = 3  # the fast path is quick: median of several runs
    max_new_tokens: int = 64  # generate path: room for the contract JSON with a short reason


def router_inputs(cfg: RouterBenchConfig) -> tuple[list[str], list[list[dict[str, Any]]], str]:
    """(questions, summaries, where they came from)."""
    from pathlib import Path

    if cfg.data and Path(cfg.data).exists():
        from evaluation.evaluate import load_split

        recs = [r for r in load_split(cfg.data, cfg.split) if isinstance(r.get("router_summaries"), list)]
        if recs:  # real router inputs, even when the split holds fewer than n_prompts
            recs = recs[: cfg.n_prompts]
            return ([r["question"] for r in recs], [r["router_summaries"] for r in recs],
                    f"label dataset {cfg.data} ({cfg.split})")
    from tiermem.data.conversations import load_conversations

    convs = load_conversations(cfg.data_path)
    questions, summaries = [], []
    for conv in convs:
        turns = conv.turns
        for i, q in enumerate(conv.questions):
            start = (i * cfg.k_summaries) % max(1, len(turns) - cfg.k_summaries)
            window = turns[start: start + cfg.k_summaries]
            questions.append(q.question)
            summaries.append([{"text": f"{t.speaker}: {t.text}", "date": t.timestamp} for t in window])
            if len(questions) == cfg.n_prompts:
                return questions, summaries, f"questions + raw turns as summaries from {cfg.data_path or 'the sample'}"
    if not questions:
        raise ValueError(f"router bench: no questions in {cfg.data_path or 'the shipped sample'}")
    return questions, summaries, f"{len(questions)} questions from {cfg.data_path or 'the sample'} (fewer than asked)"


def load_lm(router: str | None, model: str) -> tuple[Any, Any, Any, str]:
    """(model, tokenizer, meta, name) of a trained LM router directory, or of the untrained base model."""
    from serving.routers.local import LocalRouter
    from tiermem.models.specs import load_causal_lm

    if router:
        loaded = LocalRouter.load(router)
        return loaded.model, loaded.tokenizer, loaded.meta, router
    lm, tokenizer = load_causal_lm(model)
    return lm, tokenizer, None, f"{model} (untrained: speed only)"


def run(cfg: RouterBenchConfig) -> dict[str, Any]:
    from serving.routers.local import LocalRouter
    from tiermem import contract

    with PeakRSS() as load_mem:
        model, tokenizer, meta, name = load_lm(cfg.router, cfg.model)
    questions, summaries, source = router_inputs(cfg)
    routers = {
        (mode, cache, bs): LocalRouter(model, tokenizer, meta=meta, mode=mode, prefix_cache=cache, batch_size=bs,
                                       max_new_tokens=cfg.max_new_tokens)
        for bs in cfg.batch_sizes for mode, cache in (("fast", True), ("fast", False), ("generate", False))
    }
    prompt_tokens = [len(tokenizer(contract.render_prompt(tokenizer, q, s), add_special_tokens=False).input_ids)
                     for q, s in zip(questions, summaries, strict=True)]
    # Warm-up once for all variants: the first forward passes pay for lazy init and allocator growth.
    for router in routers.values():
        router.route_batch(questions[:1], summaries[:1])
    rows, results = [], {}
    decisions: dict[tuple[str, bool, int], list[str]] = {}
    raw: dict[tuple[str, bool, int], list[Any]] = {}
    for (mode, cache, bs), router in routers.items():
        repeats = cfg.fast_repeats if mode == "fast" else 1
        with PeakRSS() as mem:
            timing, out = time_call(lambda r=router: r.route_batch(questions, summaries), repeats=repeats)
        per_decision_ms = timing.median / len(questions) * 1000
        decisions[(mode, cache, bs)] = [d.action for d in out]
        raw[(mode, cache, bs)] = out
        key = f"{mode}{'+prefix_cache' if cache else ''}@bs{bs}"
        results[key] = {"mode": mode, "prefix_cache": cache, "batch_size": bs, "ms_per_decision": per_decision_ms,
                        "total_s": timing.seconds, "peak_rss_extra_mb": mem.extra_mb,
                        "parsed_ok": sum(d.parsed_ok for d in out), "n": len(out)}
        rows.append([key, per_decision_ms, mem.extra_mb, f"{sum(d.parsed_ok for d in out)}/{len(out)}"])
    for r in results.values():
        r["decisions_per_s"] = 1000.0 / r["ms_per_decision"] if r["ms_per_decision"] else None
    for row, key in zip(rows, results, strict=True):
        row.insert(2, results[key]["decisions_per_s"])
    where = fast_path_breakdown(routers[("fast", True, cfg.batch_sizes[0])], questions, summaries,
                                results[f"fast+prefix_cache@bs{cfg.batch_sizes[0]}"]["ms_per_decision"])
    ratios: dict[str, float | None] = {}
    for bs in cfg.batch_sizes:
        fast = results[f"fast+prefix_cache@bs{bs}"]["ms_per_decision"]
        ratios[f"generate / fast (prefix cache) @bs{bs}"] = ratio(results[f"generate@bs{bs}"]["ms_per_decision"], fast)
        ratios[f"fast without / with prefix cache @bs{bs}"] = ratio(results[f"fast@bs{bs}"]["ms_per_decision"], fast)
    if len(cfg.batch_sizes) > 1:
        lo, hi = min(cfg.batch_sizes), max(cfg.batch_sizes)
        for variant in ("fast+prefix_cache", "generate"):
            ratios[f"{variant}: bs{lo} / bs{hi} per decision"] = ratio(
                results[f"{variant}@bs{lo}"]["ms_per_decision"], results[f"{variant}@bs{hi}"]["ms_per_decision"])
    bs0 = cfg.batch_sizes[0]
    # Greedy generation follows the argmax, so the like-for-like check is the fast path at threshold_logit 0;
    # at a calibrated threshold the two paths are meant to differ.
    fast_d, gen_d = raw[("fast", True, bs0)], decisions[("generate", False, bs0)]
    agree = sum(a.action == b for a, b in zip(fast_d, gen_d, strict=True))
    argmax = ["ESCALATE" if (d.p_escalate or 0.0) >= 0.5 else "ANSWER" for d in fast_d]
    agree_argmax = sum(a == b for a, b in zip(argmax, gen_d, strict=True))
    threshold = getattr(router, "threshold_logit", None)
    text = "\n".join([
        f"router: {name}; prompts: {len(questions)} from {source}; "
        f"prompt tokens mean {sum(prompt_tokens) / len(prompt_tokens):.0f} (max {max(prompt_tokens)}); "
        f"generate max_new_tokens={cfg.max_new_tokens}",
        table(["variant", "ms/decision", "decisions/s", "peak RSS +MB", "parsed"], rows),
        "",
        f"where a fast decision's time goes (bs{cfg.batch_sizes[0]}, prefix cache):",
        table(["part", "value"], [[k, v] for k, v in where.items()]),
        "",
        table(["ratio (measured in this run)", "x"], [[k, v] for k, v in ratios.items()]),
        f"fast (threshold_logit 0 = argmax) vs generate action agreement @bs{bs0}: {agree_argmax}/{len(questions)}; "
        f"at the router's threshold_logit {threshold}: {agree}/{len(questions)}"
        + (" (untrained base model: agreement is not a quality figure)" if not cfg.router else ""),
        f"model load: +{load_mem.extra_mb:.0f} MB RSS; peak RSS +MB per variant is growth over what the process "
        "already held (later variants reuse memory the allocator kept)",
    ])
    return {"name": name, "source": source, "n_prompts": len(questions),
            "mean_prompt_tokens": sum(prompt_tokens) / len(prompt_tokens), "variants": results, "ratios": ratios,
            "fast_generate_agreement": agree, "fast_argmax_generate_agreement": agree_argmax,
            "router_threshold_logit": threshold, "model_load_rss_mb": load_mem.extra_mb,
            "fast_path_breakdown": where, "text": text}


def fast_path_breakdown(router: Any, questions: list[str], summaries: list[Any], ms_per_decision: float
                        ) -> dict[str, float]:
    """The fast path's parts: rendering + tokenizing the prompt, the share of prompts whose instruction prefix
    comes from the KV cache, the uncached tail each forward pass reads, and the rest (forward pass, Python)."""
    import time

    from tiermem import contract

    start = time.perf_counter()
    rows = [router._encode(contract.render_prompt(router.tokenizer, q, s) + contract.OUTPUT_PREFIX)
            for q, s in zip(questions, summaries, strict=True)]
    render_ms = (time.perf_counter() - start) / len(rows) * 1000
    p_len = len(router.prefix_ids)
    hits = [router._prefix_cache is not None and r[:p_len] == router.prefix_ids for r in rows]
    tails = [len(r) - (p_len if hit else 0) for r, hit in zip(rows, hits, strict=True)]
    return {"render + tokenize ms": render_ms, "prefix cache hit rate": sum(hits) / len(hits),
            "cached prefix tokens": float(p_len), "mean prompt tokens": sum(map(len, rows)) / len(rows),
            "mean uncached tail tokens": sum(tails) / len(tails),
            "forward pass + the rest ms": ms_per_decision - render_ms}
