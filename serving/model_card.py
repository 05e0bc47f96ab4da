"""A router's model card (README.md): one template, filled from tiermem_router.json and, at push, the router's
eval.json. The run directory keeps the card of its metadata; push renders its card from the metadata as pushed."""

from __future__ import annotations

import json
from typing import Any

from labeling.rules import LABEL_RULE_TEXT
from serving.portable import portable_meta
from tiermem.models.specs import hub_id
from tiermem.runs.run_meta import RunMeta, RunMetaFile

CARD = """---
{yaml}
---

# {title}

A **sufficiency router** for a two-tier agent memory (tiermem-router): given a question and the top-k retrieved
Tier-1 summaries (with dates and retrieval scores, in rank order), it decides whether the summaries suffice to answer
(ANSWER) or the agent should read the linked Tier-2 raw pages (ESCALATE). {what}

- Router kind `{kind}`, training stage `{stage}`; base model: {base}
- Router contract `{contract}`: a runtime that speaks another contract version refuses the router
- Decision: ESCALATE when `score >= threshold_logit`; threshold_logit **{threshold}** ({calibration})

## Training data

{data}

Hindsight labels: ANSWER when the summary-only path was right, ESCALATE when only the research path (the linked raw
pages) was right; questions where both paths failed are dropped.
{rules}

## Training

{training}

Training and validation metrics:

{metrics}

## Evaluation

{evaluation}

## How to use

```python
from serving.routers import Router

router = Router.from_pretrained("{ref}")
decision = router.route("When did Caroline move?",
                        [{{"text": "Caroline moved to Boston.", "date": "2023-05-08", "score": 0.71}}])
print(decision.action, decision.score)
```

As an HTTP endpoint: `tiermem-router serve router={ref}` (POST /route).

## Limitations

- The router sees only the retrieved summaries: it cannot know what retrieval missed, so a retrieval failure can look
  like a sufficient set of summaries.
- Labels inherit the judges' errors and the label rule; the metrics above are on the data named here, not on other
  benchmarks or domains. Training data derived from LoCoMo is CC BY-NC 4.0 (non-commercial).
- {limits}
"""

SCORE_ROUTER = ("It generates no text: its score is the log-odds that the agent should ESCALATE. Requests must carry "
                "each summary's retrieval `score`.")
# per router kind: what it is, its hub library, pipeline tag and tags, and what it is limited by
KINDS: dict[str, dict[str, Any]] = {
    "local": {"what": ('A language model (a PEFT LoRA adapter, or merged weights) that answers `{"action": "ANSWER" | '
                       '"ESCALATE", "reason": "..."}`; its score is the log-odds margin between the first tokens '
                       "of the two actions, plus its signal head over serve-time signals when it has one."),
              "pipeline_tag": "text-generation",
              "limits": ("Prompts must be rendered by the same contract version (`tiermem.contract.render_prompt`); "
                         "unparseable outputs are treated as ESCALATE.")},
    "unit-reader": {"what": ("A cross-encoder (`model.safetensors`, `config.json`, tokenizer) reads each summary "
                             "against the question; a logistic head (`signal_head.json`) joins its pooled unit "
                             f"scores with serve-time signals; no language model. {SCORE_ROUTER}"),
                    "library_name": "transformers", "pipeline_tag": "text-classification",
                    "tags": ["unit-reader", "cross-encoder", "score-router"]},
    "features": {"what": ("A logistic model over serve-time signals of the request (`feature_model.json`: retrieval "
                          f"scores, lexical overlap, question form); no language model. {SCORE_ROUTER}"),
                 "tags": ["features", "score-router", "logistic-regression"]},
    "top1-score": {"what": ("A cutoff on the top-1 retrieval score (the score is minus the best summary's retrieval "
                            f"score); no weights and no language model. {SCORE_ROUTER}"),
                   "tags": ["top1-score", "score-router", "threshold"]},
}
SCORE_LIMITS = ("Requests must carry each summary's retrieval `score` from the retriever the training data used; "
                "signals outside the training range are clipped to it (a decision then says so).")
# the eval table's columns: eval.json intervals[policy][metric]
EVAL_COLUMNS = ("accuracy", "escalation_rate", "hard_recall", "mean_input_tokens")


def fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


def table(rows: dict[str, Any]) -> str:
    """Scalars as a two-column table (nested: `key.sub`); lists and deeper tables stay in tiermem_router.json."""
    flat = {f"{key}.{sub}" if isinstance(value, dict) else key: v
            for key, value in rows.items() for sub, v in (value.items() if isinstance(value, dict) else [(key, value)])}
    lines = [f"| {k} | {fmt(v)} |" for k, v in flat.items() if not isinstance(v, list | dict)]
    return "\n".join(["| key | value |", "|---|---|", *lines]) if lines else "_none recorded_"


def interval(cell: Any) -> str:
    """`0.75 [0.61, 0.86]`: an eval.json interval ({estimate, lo, hi}) as a cell."""
    if not isinstance(cell, dict) or cell.get("estimate") is None:
        return "n/a"
    bounds = f" [{fmt(cell['lo'])}, {fmt(cell['hi'])}]" if cell.get("lo") is not None else ""
    return fmt(cell["estimate"]) + bounds


def base_hub_id(meta: RunMeta) -> str | None:
    """The hub model the weights derive from: an LM router's base, a unit reader's (or its pre-training's) base."""
    if meta.router_kind == "local":
        return hub_id(meta.base_model)
    reader = (meta.extra.get("reader_pretrain") or {}).get("base") or meta.extra.get("reader_base")
    return hub_id(reader) if meta.router_kind == "unit-reader" and isinstance(reader, str) else None


def calibration_text(cal: dict[str, Any] | None) -> str:
    if not cal:
        return "not calibrated: the default, the argmax; `make calibrate` picks one"
    text = f"chosen by criterion {cal.get('criterion')}"
    text += f" = {fmt(cal.get('value'))}" if cal.get("value") is not None else ""
    text += f" on `{cal.get('data')}` [{cal.get('split')}]" if cal.get("data") else ""
    if cal.get("scores_from") == "out_of_fold":
        text += (f" (scores: the {cal.get('scored_on')}, each conversation scored by a router fitted on the others, "
                 "not one validation split)")
    if isinstance(cal.get("achieved"), dict):
        text += "; achieved there: " + ", ".join(f"{k} {fmt(v)}" for k, v in cal["achieved"].items())
    guarantee = cal.get("guarantee")
    if isinstance(guarantee, dict):
        text += (f"; guarantee: method `{guarantee.get('method')}`, alpha {fmt(guarantee.get('alpha'))}, delta "
                 f"{fmt(guarantee.get('delta'))}, on {fmt(guarantee.get('n_calibration'))} calibration questions")
    return text + "".join(f". **Warning: {w}**" for w in cal.get("warnings") or [])


def evaluation_text(report: dict[str, Any] | None) -> str:
    """The evaluation's table (eval.json: policy metrics with bootstrap intervals, router AUROCs), or how to add one."""
    if report is None:
        return ('Not on this card: run `make eval`, then `make push ARGS="eval=<output_dir>/eval.json"`.')
    meta, intervals = report["meta"], report.get("intervals") or {}
    level = (report.get("uncertainty") or {}).get("level")
    lines = [f"On `{meta.get('data_name') or meta.get('dataset')}` [{meta.get('split')}], {meta.get('n')} questions in "
             f"{meta.get('n_conversations')} conversation(s), at threshold_logit {fmt(meta.get('threshold_logit'))}: "
             f"counterfactual replay of the labeled paths under correctness rule `{meta.get('correctness_rule')}`. "
             + (f"In brackets: {round(100 * level)}% two-stage cluster bootstrap intervals (conversations, then "
                "questions)." if intervals and level else "No intervals: eval ran without a bootstrap."), "",
             "| policy | " + " | ".join(c.replace("_", " ") for c in EVAL_COLUMNS) + " |",
             "|---" * (1 + len(EVAL_COLUMNS)) + "|"]
    for name, policy in report["policies"].items():
        cells = [interval(intervals.get(name, {}).get(c) or {"estimate": policy.get(c)}) for c in EVAL_COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    ranking = report.get("ranking") or {}
    if ranking:
        lines += ["", "Ranking (AUROC of the score, ESCALATE positive, on the labeled records): "
                  + "; ".join(f"{name} {interval(r.get('auroc'))}" for name, r in ranking.items()) + "."]
    return "\n".join(lines)


def render_card(meta: RunMeta, repo_id: str | None = None, eval_report: dict[str, Any] | None = None,
                license: str = "apache-2.0", datasets: list[str] | None = None, tags: list[str] | None = None,
                ref: str | None = None) -> str:
    """The card of `meta`'s router; with `repo_id` rendered from the metadata as pushed (no path of this machine).
    `ref`: what the usage snippet loads when there is no repo (the run directory)."""
    from huggingface_hub import ModelCardData

    meta = portable_meta(meta) if repo_id else meta
    kind = KINDS.get(meta.router_kind, {"what": SCORE_ROUTER, "tags": [meta.router_kind, "score-router"]})
    lm = meta.router_kind == "local"
    base = base_hub_id(meta)
    data = ModelCardData(
        base_model=base, license=license, datasets=list(datasets or []) or None,
        library_name=("peft" if meta.adapter else "transformers") if lm else kind.get("library_name"),
        pipeline_tag=kind.get("pipeline_tag"),
        tags=sorted({"tiermem", "router", "agent-memory", meta.stage, *(tags or []),
                     *(["lora" if meta.adapter else "merged"] if lm else kind["tags"])}))
    reader = (meta.extra.get("reader_pretrain") or {}).get("base") or meta.extra.get("reader_base")
    base_text = f"`{meta.base_model if lm else reader or 'none'}`" + (f" (hub: `{base}`)" if base else "")
    training = meta.training or (meta.extra.get("config") if isinstance(meta.extra.get("config"), dict) else {})
    cal = meta.calibration or {}
    return CARD.format(
        yaml=data.to_yaml(), title=repo_id or f"tiermem router: {meta.stage}", what=kind["what"],
        kind=meta.router_kind, stage=meta.stage, base=base_text, contract=meta.contract_version,
        threshold=fmt(cal.get("threshold_logit", 0.0)), calibration=calibration_text(meta.calibration),
        data=table(meta.data), training=table(training),
        rules="\n".join(f"- Label rule `{r}`: right according to {LABEL_RULE_TEXT.get(r, 'an unknown rule')}."
                        for r in meta.data.get("label_rules") or []),
        metrics=table({k: v for k, v in meta.metrics.items() if k not in ("log_history", "reward_curve")}),
        evaluation=evaluation_text(eval_report), ref=repo_id or ref or "<run directory or org/name>",
        limits=kind.get("limits") or SCORE_LIMITS)


def save_with_card(record: RunMetaFile) -> None:
    """A stage's one write of the run's metadata, with the run's card rendered from it."""
    record.save(card=lambda meta: render_card(meta, ref=str(record.run_dir)))
