"""The model card (README.md with YAML metadata) of a router run directory.

The card travels with the weights: training writes it next to the adapter (replacing PEFT's empty template),
`make calibrate` and `make eval` refresh it (`refresh_card`, `record_eval`), `make push` renders it once more
with the hub repo id. Every number and name comes from tiermem_router.json; only the wording lives here.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from labeling.rules import LABEL_RULE_TEXT
from tiermem import contract
from tiermem.artifacts import RunMeta, meta_digest, read_run_meta, write_run_meta
from tiermem.eval_summary import EvalSummary, Interval
from tiermem.models import PACKAGED_HUB_IDS, hub_id
from tiermem.safe_io import write_atomic

__all__ = ["PACKAGED_HUB_IDS", "record_eval", "refresh_card", "render_card", "write_model_card", "write_run_card"]

CARD_FILE = "README.md"
DIGEST_KEY = "tiermem_router_sha256"  # card metadata: artifacts.meta_digest of the metadata it was rendered from
# The eval table's columns: EvalSummary's point metrics, each with its interval where eval.json has one.
EVAL_COLUMNS = ("accuracy", "escalation_rate", "mean_input_tokens", "mean_latency_s", "hard_recall",
                "repair_rate", "regress_rate")


# ---------------------------------------------------------------------------------------------- formatting


def _fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


def _table(rows: dict[str, Any], head: tuple[str, str] = ("metric", "value")) -> str:
    if not rows:
        return "_none recorded_"
    lines = [f"| {head[0]} | {head[1]} |", "|---|---|"]
    for key, value in rows.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                lines.append(f"| {key}.{sub} | {_fmt(v)} |")
        else:
            lines.append(f"| {key} | {_fmt(value)} |")
    return "\n".join(lines)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _ci(value: float | None, interval: Interval | None) -> str:
    """`0.75 [0.61, 0.86]`: the point value and its bootstrap interval, as eval.json has them."""
    cell = _fmt(value)
    if interval is not None and interval.lo is not None and interval.hi is not None:
        cell += f" [{_fmt(interval.lo)}, {_fmt(interval.hi)}]"
    return cell


# ---------------------------------------------------------------------------------------------- sections


HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def travelling_data_name(value: str) -> str:
    """Training data by what it is, for a card that leaves this machine (never a local path): a hub dataset id as
    is; a local label dataset by the conversations file its label run read (the config.yaml the label stage writes
    beside `dataset/`), else by its own name."""
    from labeling.config import label_run_config

    path = Path(value)
    if not path.exists() and HUB_ID.match(value):
        return value
    source = (label_run_config(path)[1] or {}).get("data_path")
    if isinstance(source, str) and source:
        return f"label dataset of {Path(source).name}"
    return f"local label dataset {path.name}"


def without_local_paths(values: dict[str, Any]) -> dict[str, Any]:
    """A metadata table for a card that travels: the training data by what it is, the router a run continued from
    by its run's name, the output directory left out (each a path on the machine that trained)."""
    out = {k: v for k, v in values.items() if k != "output_dir"}
    for key in ("data", "dataset"):
        if isinstance(out.get(key), str):
            out[key] = travelling_data_name(out[key])
    if isinstance(out.get("router"), str) and (Path(out["router"]).exists() or not HUB_ID.match(out["router"])):
        out["router"] = f"local run {Path(out['router']).name}"
    return out


def _data_section(meta: RunMeta, local: bool = True) -> str:
    data = dict(meta.data) if local else without_local_paths(meta.data)
    rules = data.get("label_rules") or []
    lines = [_table(data), ""]
    lines.append("Labels are hindsight labels: ANSWER when the summary-only path was right, ESCALATE when only the "
                 "research path (the linked raw pages) was right; questions where both paths failed are dropped.")
    lines.append("")
    for rule in rules:
        lines.append(f"- Label rule `{rule}`: right according to {LABEL_RULE_TEXT.get(rule, 'an unknown rule')}.")
    return "\n".join(lines)


def _score_section(meta: RunMeta) -> str:
    """How the decision's log-odds are computed: the LM's first-token margin, plus the signal head if it has one;
    for a unit reader, its pooled unit scores and the head."""
    if meta.router_kind == "unit-reader":
        chosen = meta.metrics.get("chosen") or {}
        cv = (meta.metrics.get("cv") or {}).get("signals_only") or {}
        return ("The decision is `score >= threshold_logit`. A cross-encoder "
                f"(`{meta.extra.get('reader_base')}`, fine-tuned on per-unit targets) scores each summary against "
                f"the question; the unit scores are pooled (`{meta.extra.get('pooling')}`) and a logistic head "
                "joins them with the serve-time signals: `score = bias + signals + text_weight x text` with "
                f"text_weight {meta.extra.get('text_weight')}. Requests must carry each summary's retrieval "
                "`score`. Chosen by leave-one-conversation-out cross-validation over train + validation:\n\n"
                + _table({"epochs": chosen.get("epochs"), "pooling": chosen.get("pooling"),
                          "text weight": chosen.get("text_weight"), "CV AUROC (mean over folds)": chosen.get("mean"),
                          "CV AUROC range": f"{chosen.get('min')} - {chosen.get('max')}",
                          "signals-only head, CV AUROC": cv.get("mean")}))
    margin = ('the log-odds margin between the first tokens of "ANSWER" and "ESCALATE" right after the output '
              f"prefix `{contract.OUTPUT_PREFIX}`")
    head = meta.data.get("signal_head") if meta.adapter or meta.stage in ("sft", "expected_reward") else None
    if not isinstance(head, dict):
        return (f"The decision is `score >= threshold_logit`, where `score` is {margin}; `p_escalate` = "
                "sigmoid(score). The stored threshold is the default; it can be overridden per call.")
    weights = head.get("weights") or {}
    return (f"The decision is `score >= threshold_logit`, where `score` is {margin} **plus the signal head**: a "
            f"linear model over serve-time signals of the request (`{head.get('file')}`; standardized features "
            "from `serving.signals.features`: retrieval scores, lexical overlap, question form), trained jointly "
            "with the adapter. Requests must carry each summary's retrieval `score`. With an OpenAI-compatible "
            "endpoint serving the adapter, the remote router adds the same head to the endpoint's first-token "
            "log-probs (`router.signal_head=<this run>`).\n\n"
            + _table({k: round(float(v), 4) for k, v in weights.items()}, ("signal", "weight (per std. dev.)")))


def _rewards_section(meta: RunMeta) -> str:
    rewards = meta.training.get("rewards")
    if meta.stage != "grpo" or not isinstance(rewards, dict):
        return ""
    text = ("\n## GRPO rewards\n\nThe reward table the policy was optimised against (per sampled decision; "
            "`cost_weight` scales the research cost penalty):\n\n" + _table(rewards, ("reward", "value")) + "\n")
    curve = meta.metrics.get("reward_curve") or []
    if curve:
        text += ("\nReward curve (mean reward of the sampled completions per logged step; `frac_reward_zero_std`: "
                 "share of prompts whose samples all got the same reward, which give no gradient; "
                 "`reward_curves.json` has every logged key):\n\n"
                 "| step | reward | reward std | frac_reward_zero_std |\n|---|---|---|---|\n" + "\n".join(
                     f"| {_fmt(p.get('step'))} | {_fmt(p.get('reward'))} | {_fmt(p.get('reward_std'))} "
                     f"| {_fmt(p.get('frac_reward_zero_std'))} |" for p in curve) + "\n")
    return text


def _eval_section(meta: RunMeta, local: bool = True) -> str:
    """The evaluation of record (meta.eval), then the other evaluations beside it. `local`: the card of the run
    directory itself, which may name eval.json's local path; a pushed card never does."""
    ev = meta.eval
    others = _other_evals_section(meta)
    if ev is None:
        return "Not evaluated yet: run `make eval` (the table then appears here)." + others
    level = f"{round(100 * ev.level)}%" if ev.level is not None else None
    router = ev.router if local else "this router"  # eval's display name holds the run's local path
    lines = [f"On `{ev.dataset}` [{ev.split}], {ev.n} questions in {ev.n_conversations} conversation(s); router "
             f"`{router}` at threshold_logit {_fmt(ev.threshold_logit)}; counterfactual replay of the labeled paths "
             f"under correctness rule `{ev.correctness_rule}` (evaluated {ev.date}"
             + (f"; full report: `{ev.path}`" if ev.path and local else "") + "). "
             + (f"In brackets: {level} two-stage cluster bootstrap intervals (conversations, then questions; "
                f"{ev.n_boot} replicates)." if level else "No intervals: eval ran without a bootstrap."), "",
             "| policy | " + " | ".join(m.replace("_", " ") for m in EVAL_COLUMNS) + " |",
             "|" + "---|" * (1 + len(EVAL_COLUMNS))]
    for name, policy in ev.policies.items():
        cells = [_ci(policy.metrics.get(m), policy.intervals.get(m)) for m in EVAL_COLUMNS]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    if ev.ranking:
        lines += ["", "Ranking quality of the score (labeled records, ESCALATE positive; random AUROC = 0.5, "
                      "APGR = 0.5):", "",
                  "| router | AUROC | AUPRC | APGR | ECE | labeled | ESCALATE share |", "|---|---|---|---|---|---|---|"]
        for name, r in ev.ranking.items():
            cells = [_ci(iv.estimate if iv else None, iv) for iv in (r.auroc, r.auprc, r.apgr, r.ece)]
            lines.append("| " + " | ".join([name, *cells, str(r.n_labeled), _fmt(r.escalate_share)]) + " |")
    if ev.gap is not None or ev.auc_accuracy_tokens is not None:
        lines += ["", f"Threshold sweep: gap (raw-only - summary-only accuracy) {_fmt(ev.gap)}, AUC of accuracy vs "
                      f"mean input tokens {_fmt(ev.auc_accuracy_tokens)}."]
    return "\n".join(lines) + others


def _other_evals_section(meta: RunMeta) -> str:
    """Evaluations on other data or splits (a user's own file): listed beside the evaluation of record, as the
    hub's model-index lists several results, never in its place."""
    if not meta.other_evals:
        return ""
    lines = ["", "", "### Other evaluations", "",
             "On data other than the held-out test split of the training data; not the evaluation of record.", "",
             "| data | split | questions | routed accuracy | routed escalation rate | AUROC | evaluated |",
             "|---|---|---|---|---|---|---|"]
    for ev in meta.other_evals:
        routed = ev.policies["routed"].metrics if "routed" in ev.policies else {}
        auroc = ev.ranking["routed"].auroc if "routed" in ev.ranking else None
        lines.append(f"| {ev.dataset} | {ev.split} | {ev.n} | {_fmt(routed.get('accuracy'))} | "
                     f"{_fmt(routed.get('escalation_rate'))} | {_fmt(auroc.estimate if auroc else None)} | {ev.date} |")
    return "\n".join(lines)


def _eval_results(meta: RunMeta) -> list[Any] | None:
    """The model-index `results`: the routed accuracy of the evaluation of record first, then each other one."""
    from huggingface_hub import EvalResult

    out = []
    for ev in [e for e in [meta.eval] if e is not None] + list(meta.other_evals):
        routed = ev.policies.get("routed")
        value = routed.metrics.get("accuracy") if routed else None
        if value is None:
            continue
        out.append(EvalResult(task_type="text-classification", task_name="memory sufficiency routing",
                              # the hub groups results by dataset type: one per data, so each keeps its own row
                              dataset_type=re.sub(r"[^A-Za-z0-9._-]+", "-", ev.dataset).strip("-")[:96],
                              dataset_name=ev.dataset,
                              dataset_split=ev.split, metric_type="accuracy", metric_name="routed accuracy",
                              metric_value=round(float(value), 4)))
    return out or None


def _calibration_section(meta: RunMeta, local: bool = True) -> str:
    cal = meta.calibration if local or not meta.calibration else without_local_paths(meta.calibration)
    if not cal:
        return ("Not calibrated: the default threshold_logit 0 (threshold_prob 0.5, the argmax) applies (run "
                "`make calibrate`).")
    criterion, goal = cal.get("criterion"), cal.get("value")
    logit = _number(cal.get("threshold_logit"))
    prob = None if logit is None else 1.0 / (1.0 + math.exp(-logit))
    parts = [f"Threshold: threshold_logit **{_fmt(logit)}** on the log-odds score (threshold_prob {_fmt(prob)} on "
             "p_escalate)"
             + f", chosen by criterion {criterion or '(not recorded)'}"
             + (f" = {_fmt(goal)}" if goal is not None else "")
             + (f" on `{cal.get('data')}` [{cal.get('split')}]" if cal.get("data") else "") + "."]
    for warning in cal.get("warnings") or []:
        parts += ["", f"**Warning: {warning}.**"]
    if isinstance(cal.get("achieved"), dict):
        parts += ["", "Achieved on the calibration data:", "", _table(cal["achieved"])]
    guarantee = cal.get("guarantee", "absent")
    if isinstance(guarantee, dict):
        parts += ["", f"Statistical guarantee (method `{guarantee.get('method')}`, alpha = "
                      f"{_fmt(guarantee.get('alpha'))}, delta = {_fmt(guarantee.get('delta'))}, on "
                      f"{_fmt(guarantee.get('n_calibration'))} calibration questions):", "", _table(guarantee)]
    elif guarantee is None:
        parts += ["", "No statistical guarantee is claimed for this threshold: it meets its target on the "
                      "calibration data only."]
    return "\n".join(parts)


def _usage_section(meta: RunMeta, ref: str, base_id: str | None) -> str:
    base = base_id or "<base model>"
    if not meta.adapter:
        peft = ""
    elif base_id:
        peft = f"""
With plain PEFT (the adapter config names the base by its hub id, `{base_id}`):

```python
from peft import AutoPeftModelForCausalLM
from transformers import AutoTokenizer

model = AutoPeftModelForCausalLM.from_pretrained("{ref}")
tokenizer = AutoTokenizer.from_pretrained("{ref}")   # the chat template the router was trained with
```
"""
    else:
        peft = f"""
With plain PEFT: the base `{meta.base_model}` is a local directory with no hub id, so load it yourself:

```python
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("<the base model>"), "{ref}")
tokenizer = AutoTokenizer.from_pretrained("{ref}")   # the chat template the router was trained with
```
"""
    if peft:
        peft += f"""
Render prompts with `tiermem.contract.render_prompt` (contract `{meta.contract_version}`); other prompt formats
are out of distribution.
"""
    vllm = "" if not meta.adapter else f"""
With vLLM (the adapter is selected by model name; log-probs of the action tokens give `p_escalate`):

```bash
vllm serve {base} --enable-lora --lora-modules router={ref}
```

```python
from serving.router import RemoteRouter
router = RemoteRouter(base_url="http://127.0.0.1:8000/v1", model="router")
```
"""
    return f"""In the tiermem runtime (loads offline: the base is resolved from `base_model` in tiermem_router.json):

```python
from serving.router import Router

router = Router.from_pretrained("{ref}")          # fast path: one forward pass, no generation
decision = router.route("When did Caroline move?", [{{"text": "Caroline moved to Boston.", "date": "2023-05-08"}}])
print(decision.action, decision.p_escalate)
```

As an HTTP endpoint: `tiermem-router serve router={ref}` (POST /route).
{peft}{vllm}"""


# ---------------------------------------------------------------------------------------------- the card


def render_card(meta: RunMeta, repo_id: str | None = None, license: str = "apache-2.0",
                datasets: list[str] | None = None, tags: list[str] | None = None, ref: str | None = None) -> Any:
    """The card as a huggingface_hub ModelCard. `repo_id`: the hub repo (push); `ref`: what the usage snippets
    load when there is no repo yet (the run directory)."""
    from huggingface_hub import ModelCard, ModelCardData

    base_id = hub_id(meta.base_model)
    ref = repo_id or ref or "<run directory or org/name>"
    results = _eval_results(meta)
    data = ModelCardData(
        base_model=base_id, library_name="peft" if meta.adapter else "transformers", pipeline_tag="text-generation",
        license=license, datasets=list(datasets or []) or None,
        tags=sorted({"tiermem", "router", "agent-memory", "lora" if meta.adapter else "merged", meta.stage,
                     *(tags or [])}),
        model_name=(repo_id or f"tiermem router: {meta.stage}") if results else None, eval_results=results,
        # the metadata this card was rendered from: a card older than tiermem_router.json is detected (check_card)
        **{DIGEST_KEY: meta_digest(meta)},
    )
    base_line = f"`{meta.base_model}`" + (f" (hub: `{base_id}`)" if base_id and base_id != meta.base_model else "")
    weights = ("a PEFT LoRA adapter over " + base_line if meta.adapter else "merged weights (base " + base_line + ")")
    body = f"""# {repo_id or "tiermem router: " + meta.stage}

A **sufficiency router** for a two-tier agent memory (tiermem-router). Given a question and the top-k retrieved
Tier-1 summaries (with dates, in rank order) it answers `{{"action": "ANSWER" | "ESCALATE", "reason": "..."}}`:
ANSWER when the summaries state the answer exactly and completely, ESCALATE when the agent should read the linked
Tier-2 raw pages (bounded multi-hop research, then answer).

- Weights: {weights}
- Training stage: `{meta.stage}`
- Router contract: `{meta.contract_version}` (the prompt and output format; a router is refused by a runtime that
  speaks another contract version)

## Training data and label rule

{_data_section(meta, local=repo_id is None)}

## Training configuration

{_table({k: v for k, v in (meta.training if repo_id is None else without_local_paths(meta.training)).items()
         if not isinstance(v, dict | list)})}
{_rewards_section(meta)}
## Training and validation metrics

{_table({k: v for k, v in meta.metrics.items() if k not in ("log_history", "reward_curve")})}

## Evaluation

{_eval_section(meta, local=repo_id is None)}

## Calibration

{_calibration_section(meta, local=repo_id is None)}

{_score_section(meta)}

## How to use

{_usage_section(meta, ref, base_id)}
## Limitations

- The router only sees the retrieved summaries; it cannot know what retrieval missed, so a retrieval failure can
  look like a sufficient set of summaries.
- Labels inherit the judges' errors and the label rule; metrics above are on the splits named here, not on other
  benchmarks or domains. Training data derived from LoCoMo is CC BY-NC 4.0 (non-commercial).
- Prompts must be rendered by the same contract version (`{meta.contract_version}`); other prompt formats are out
  of distribution.
- Unparseable outputs are treated as ESCALATE (faithfulness first), which trades tokens for safety.
"""
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}")


def write_run_card(run_dir: str | Path, meta: RunMeta | None = None, repo_id: str | None = None,
                   **kwargs: Any) -> Path:
    """README.md of the run directory; `meta` defaults to the run's tiermem_router.json."""
    run_dir = Path(run_dir)
    meta = meta or read_run_meta(run_dir)
    path = run_dir / CARD_FILE
    write_atomic(path, str(render_card(meta, repo_id, ref=str(run_dir), **kwargs)))  # never through a link
    return path


def write_model_card(run_dir: str | Path, repo_id: str, **kwargs: Any) -> Path:
    """The card for a push: usage snippets load `repo_id`."""
    return write_run_card(run_dir, repo_id=repo_id, **kwargs)


def refresh_card(run_dir: str | Path) -> Path | None:
    """Re-render README.md from the run's current tiermem_router.json (after calibrate, eval). A router given
    by hub id (no local run directory) has no card to refresh: None."""
    run_dir = Path(run_dir)
    if not (run_dir / "tiermem_router.json").is_file():
        return None
    return write_run_card(run_dir)


MAX_OTHER_EVALS = 10  # the card lists the latest ones; eval.json of each run keeps everything


def trained_on(meta: RunMeta) -> str | None:
    """The label data the router was trained from, as its training recorded it (LM routers: data.data; score
    routers: data.dataset)."""
    value = meta.data.get("data") or meta.data.get("dataset")
    return value if isinstance(value, str) and value else None


def is_of_record(meta: RunMeta, data: str | Path | None, split: str) -> bool:
    """An eval is the router's evaluation of record when it replays the held-out test split of the very data the
    router was trained from (compared as resolved paths; a hub id as written). Any other data or split is not."""
    source = trained_on(meta)
    if data is None or source is None or split != "test":
        return False
    if str(data) == source:
        return True
    local, recorded = Path(data), Path(source)
    return local.exists() and recorded.exists() and local.resolve() == recorded.resolve()


def record_eval(run_dir: str | Path | None, summary: EvalSummary, data: str | Path | None = None) -> Path | None:
    """Store an eval's summary in the run's tiermem_router.json and refresh the card: as the evaluation of record
    (`eval`) when it replays the test split of the router's own training data (`data`: what eval read), else
    among `other_evals` (one per dataset and split, the latest MAX_OTHER_EVALS), leaving the evaluation of record
    as it was. `run_dir` None or not a local run directory (a hub id, an LLM router): nothing to record, None."""
    if not run_dir or not (Path(run_dir) / "tiermem_router.json").is_file():
        return None
    meta = read_run_meta(run_dir)
    if data is None or is_of_record(meta, data, summary.split):
        meta.eval = summary
    else:
        kept = [e for e in meta.other_evals if (e.dataset, e.split) != (summary.dataset, summary.split)]
        meta.other_evals = (kept + [summary])[-MAX_OTHER_EVALS:]
    write_run_meta(run_dir, meta)
    return write_run_card(run_dir, meta)


def card_digest(run_dir: str | Path) -> str | None:
    """The metadata digest the run's README.md says it was rendered from; None: no card, or one without it."""
    path = Path(run_dir) / CARD_FILE
    if not path.is_file() or path.is_symlink():
        return None
    match = re.search(rf"^{DIGEST_KEY}: ([0-9a-f]{{64}})$", path.read_text(encoding="utf-8", errors="replace"),
                      re.MULTILINE)
    return match.group(1) if match else None


def check_card(run_dir: str | Path, meta: RunMeta | None = None) -> str | None:
    """None when README.md was rendered from the run's current tiermem_router.json; else why it is stale (a stage
    killed between writing the metadata and the card, or a card edited by hand). The metadata is the truth: the
    router loads from it, and `tiermem-router push` re-renders the card from it."""
    run_dir = Path(run_dir)
    if not (run_dir / CARD_FILE).is_file():
        return None
    meta = meta or read_run_meta(run_dir)
    recorded = card_digest(run_dir)
    if recorded == meta_digest(meta):
        return None
    why = "it records no metadata digest" if recorded is None else "it was rendered from other metadata"
    return (f"{run_dir / CARD_FILE} does not match {run_dir / 'tiermem_router.json'}: {why} (a stage stopped "
            "between the two writes, or a card edited by hand); the router loads from tiermem_router.json, and "
            "push re-renders the card from it")
