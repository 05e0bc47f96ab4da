"""The sections of a router's model card (serving/model_card.py puts them together), each written for the kind of
router the run holds: an LM router answers a JSON action; a score router (unit reader, features, top-1 score)
returns log-odds and generates no text. Every number and name comes from tiermem_router.json."""

from __future__ import annotations

import json
import re
from typing import Any

from labeling.rules import LABEL_RULE_TEXT
from serving.card_usage import is_lm
from serving.portable import local_path_name, without_local_paths
from tiermem import contract
from tiermem.models.logistic import sigmoid
from tiermem.models.specs import hub_id
from tiermem.runs.eval_summary import Interval, ceiling_table
from tiermem.runs.run_meta import RunMeta

# The eval table's columns: EvalSummary's point metrics, each with its interval where eval.json has one.
EVAL_COLUMNS = ("accuracy", "escalation_rate", "mean_input_tokens", "mean_latency_s", "mean_router_tokens",
                "hard_recall", "repair_rate", "regress_rate")
# what each score router's weights are, for the card's first lines (an LM router: its adapter or merged weights)
SCORE_WEIGHTS = {
    "unit-reader": "a cross-encoder (base `{reader}`: `model.safetensors`, "
                   "`config.json`, tokenizer) that reads each summary against the question, and a logistic head "
                   "over its pooled unit scores and the serve-time signals (`signal_head.json`); no language model",
    "features": "a logistic model over serve-time signals of the request (`feature_model.json`: retrieval scores, "
                "lexical overlap, question form); no language model",
    "top1-score": "a cutoff on the top-1 retrieval score; no weights and no language model",
}


# ---------------------------------------------------------------------------------------------- formatting


def fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


def table(rows: dict[str, Any], head: tuple[str, str] = ("metric", "value")) -> str:
    if not rows:
        return "_none recorded_"
    lines = [f"| {head[0]} | {head[1]} |", "|---|---|"]
    for key, value in rows.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                lines.append(f"| {key}.{sub} | {fmt(v)} |")
        else:
            lines.append(f"| {key} | {fmt(value)} |")
    return "\n".join(lines)


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def ci(value: float | None, interval: Interval | None) -> str:
    """`0.75 [0.61, 0.86]`: the point value and its bootstrap interval, as eval.json has them."""
    cell = fmt(value)
    if interval is not None and interval.lo is not None and interval.hi is not None:
        cell += f" [{fmt(interval.lo)}, {fmt(interval.hi)}]"
    return cell


# ---------------------------------------------------------------------------------------------- sections


def data_section(meta: RunMeta, local: bool = True) -> str:
    data = dict(meta.data) if local else without_local_paths(meta.data)
    rules = data.get("label_rules") or []
    lines = [table(data), ""]
    lines.append("Labels are hindsight labels: ANSWER when the summary-only path was right, ESCALATE when only the "
                 "research path (the linked raw pages) was right; questions where both paths failed are dropped.")
    lines.append("")
    for rule in rules:
        lines.append(f"- Label rule `{rule}`: right according to {LABEL_RULE_TEXT.get(rule, 'an unknown rule')}.")
    return "\n".join(lines)


def score_section(meta: RunMeta) -> str:
    """How the decision's log-odds are computed: the LM's first-token margin, plus the signal head if it has one;
    for a unit reader, its pooled unit scores and the head; for the features and top-1 routers, their signals."""
    if meta.router_kind == "unit-reader":
        return unit_reader_section(meta)
    if meta.router_kind == "features":
        return ("The decision is `score >= threshold_logit`, where `score` is a logistic model's log-odds of "
                "ESCALATE over standardized serve-time signals of the request (`feature_model.json`; "
                "`serving.signals.features`: retrieval scores, lexical overlap, question form). Requests must carry "
                "each summary's retrieval `score`.")
    if meta.router_kind == "top1-score":
        return ("The decision is `score >= threshold_logit`, where `score` is minus the top-1 retrieval score of "
                "the summaries: it escalates when the best summary's score is below `-threshold_logit`. Requests "
                "must carry each summary's retrieval `score`.")
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
            + table({k: round(float(v), 4) for k, v in weights.items()}, ("signal", "weight (per std. dev.)")))


def rewards_section(meta: RunMeta) -> str:
    rewards = meta.training.get("rewards")
    if meta.stage != "grpo" or not isinstance(rewards, dict):
        return ""
    text = ("\n## GRPO rewards\n\nThe reward table the policy was optimised against (per sampled decision; "
            "`cost_weight` scales the research cost penalty):\n\n" + table(rewards, ("reward", "value")) + "\n")
    text += grpo_learned_section(meta.metrics.get("grpo_signal"))
    curve = meta.metrics.get("reward_curve") or []
    if curve:
        text += ("\nReward curve (mean reward of the sampled completions per logged step; `frac_reward_zero_std`: "
                 "share of prompts whose samples all got the same reward, which give no gradient; "
                 "`reward_curves.json` has every logged key):\n\n"
                 "| step | reward | reward std | frac_reward_zero_std | grad norm | sampled escalation |\n"
                 "|---|---|---|---|---|---|\n" + "\n".join(
                     f"| {fmt(p.get('step'))} | {fmt(p.get('reward'))} | {fmt(p.get('reward_std'))} "
                     f"| {fmt(p.get('frac_reward_zero_std'))} | {fmt(p.get('grad_norm'))} "
                     f"| {fmt(p.get('decision/escalation_rate'))} |" for p in curve) + "\n")
    return text


def _interval_cell(value: Any) -> str:
    if not isinstance(value, dict):
        return "n/a"
    cell = fmt(value.get("estimate"))
    return cell + (f" [{fmt(value['lo'])}, {fmt(value['hi'])}]" if value.get("lo") is not None else "")


def grpo_learned_section(signal: Any) -> str:
    """What GRPO learned (metrics.grpo_signal): its verdict, learning signal, and validation reward before/after."""
    if not isinstance(signal, dict):
        return ""
    verdict = signal.get("verdict")
    warnings = signal.get("warnings") or []
    if verdict == "refined":
        why = " The policy's expected validation reward rose (its interval lies above 0)."
    elif warnings:
        why = " This run is not a refinement of the SFT router:\n\n" + "\n".join(f"- {w}" for w in warnings)
    else:
        why = (" No validation reward was measured (completion text, or no validation rows with rewards): nothing "
               "here says the run refined the SFT router.")
    text = f"\n### What GRPO learned\n\n**Verdict: {verdict}.**{why}\n\n"
    rows = {"logged steps": signal.get("logged_steps"),
            "share of zero-variance groups (mean over logged steps)": signal.get("zero_variance_share"),
            "gradient norm (mean / max)": f"{fmt(signal.get('grad_norm_mean'))} / {fmt(signal.get('grad_norm_max'))}",
            "sampled escalation rate (first / last logged step)":
                f"{fmt(signal.get('sampled_escalation_first'))} / {fmt(signal.get('sampled_escalation_last'))}",
            "stopped at step (no validation gain)": signal.get("stopped_at_step"),
            "weights kept from step": signal.get("kept_step")}
    text += table(rows) + "\n"
    reward_rows = []
    for key, what in (("validation_expected_reward", "policy's exact expected reward (what GRPO maximizes)"),
                      ("validation_router_reward", "router's reward at its decisions (score >= 0, uncalibrated)")):
        value = signal.get(key)
        if isinstance(value, dict):
            cells = [_interval_cell(value.get(k)) for k in ("before", "after", "difference")]
            reward_rows.append(f"| {what} | {' | '.join(cells)} | {value.get('rows')} | {value.get('conversations')} |")
    if reward_rows:
        text += ("\nMean reward per validation row under the reward table above, before GRPO (the SFT adapter) and "
                 "after, with 95% cluster-bootstrap intervals (conversations, then rows; the difference paired). "
                 "The validation rows also chose the kept step, so the difference leans optimistic; the test split "
                 "in `make eval` is the held-out comparison.\n\n"
                 "| measure | before | after | after - before | rows | conversations |\n|---|---|---|---|---|---|\n"
                 + "\n".join(reward_rows) + "\n")
    return text


def eval_section(meta: RunMeta, local: bool = True) -> str:
    """The evaluation of record (meta.eval), then the other evaluations beside it. `local`: the card of the run
    directory itself, which may name eval.json's local path; a pushed card never does."""
    ev = meta.eval
    others = other_evals_section(meta)
    if ev is None:
        return "Not evaluated yet: run `make eval` (the table then appears here)." + others
    level = f"{round(100 * ev.level)}%" if ev.level is not None else None
    router = ev.router if local else "this router"  # eval's display name holds the run's local path
    lines = [f"On `{ev.dataset}` [{ev.split}], {ev.n} questions in {ev.n_conversations} conversation(s); router "
             f"`{router}` at threshold_logit {fmt(ev.threshold_logit)}; counterfactual replay of the labeled paths "
             f"under correctness rule `{ev.correctness_rule}` (evaluated {ev.date}"
             + (f"; full report: `{ev.path}`" if ev.path and local else "") + "). "
             + (f"In brackets: {level} two-stage cluster bootstrap intervals (conversations, then questions; "
                f"{ev.n_boot} replicates)." if level else "No intervals: eval ran without a bootstrap."), "",
             "| policy | " + " | ".join(m.replace("_", " ") for m in EVAL_COLUMNS) + " |",
             "|" + "---|" * (1 + len(EVAL_COLUMNS))]
    for name, policy in ev.policies.items():
        cells = [ci(policy.metrics.get(m), policy.intervals.get(m)) for m in EVAL_COLUMNS]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    if ev.ranking:
        lines += ["", "Ranking quality of the score (labeled records, ESCALATE positive; random AUROC = 0.5, "
                      "APGR = 0.5):", "",
                  "| router | AUROC | AUPRC | APGR | ECE | labeled | ESCALATE share |", "|---|---|---|---|---|---|---|"]
        for name, r in ev.ranking.items():
            cells = [ci(iv.estimate if iv else None, iv) for iv in (r.auroc, r.auprc, r.apgr, r.ece)]
            lines.append("| " + " | ".join([name, *cells, str(r.n_labeled), fmt(r.escalate_share)]) + " |")
    if ev.gap is not None or ev.auc_accuracy_tokens is not None:
        lines += ["", f"Threshold sweep: gap (raw-only - summary-only accuracy) {fmt(ev.gap)}, AUC of accuracy vs "
                      f"mean input tokens {fmt(ev.auc_accuracy_tokens)}."]
    if ev.ceiling:
        lines += ["", "The ranking's ceiling: a threshold chosen on the evaluated data itself, after seeing the "
                      "answers (a CEILING, not an operating point), beside the router's own point:", "",
                  *ceiling_table(ev.ceiling)]
    if ev.reading:
        lines += ["", "What reading adds (AUROC on the labeled records): the reader as pre-trained beside the one "
                      "fine-tuned on the conversations, when cross-validation fine-tuned it.", "",
                  "| reader | text part alone | score without the text part | whole score |", "|---|---|---|---|"]
        lines += [f"| {name} | " + " | ".join(ci(iv.estimate if iv else None, iv) for iv in
                                             (row.get("text_alone"), row.get("without_text"), row.get("full"))) + " |"
                  for name, row in ev.reading.items()]
    if ev.by_domain:
        lines += ["", "On each domain's questions alone (AUROC; `main - x`: the paired difference):", ""]
        lines += [f"- {domain}: " + "; ".join(f"{k} {ci(iv.estimate if iv else None, iv)}" for k, iv in row.items())
                  for domain, row in ev.by_domain.items()]
    return "\n".join(lines) + others


def other_evals_section(meta: RunMeta) -> str:
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
        lines.append(f"| {ev.dataset} | {ev.split} | {ev.n} | {fmt(routed.get('accuracy'))} | "
                     f"{fmt(routed.get('escalation_rate'))} | {fmt(auroc.estimate if auroc else None)} | {ev.date} |")
    return "\n".join(lines)


def eval_results(meta: RunMeta) -> list[Any] | None:
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


def calibration_section(meta: RunMeta, local: bool = True) -> str:
    cal = meta.calibration if local or not meta.calibration else without_local_paths(meta.calibration)
    if not cal:
        return ("Not calibrated: the default threshold_logit 0 (threshold_prob 0.5, the argmax) applies (run "
                "`make calibrate`).")
    criterion, goal = cal.get("criterion"), cal.get("value")
    logit = number(cal.get("threshold_logit"))
    prob = None if logit is None else sigmoid(logit)
    parts = [f"Threshold: threshold_logit **{fmt(logit)}** on the log-odds score (threshold_prob {fmt(prob)} on "
             "p_escalate)"
             + f", chosen by criterion {criterion or '(not recorded)'}"
             + (f" = {fmt(goal)}" if goal is not None else "")
             + (f" on `{cal.get('data')}` [{cal.get('split')}]" if cal.get("data") else "") + "."]
    if cal.get("scores_from") == "out_of_fold":
        parts[0] += (f" Scores: the {cal.get('scored_on')} (each conversation scored by a router fitted on the "
                     "others), not one validation split.")
    for warning in cal.get("warnings") or []:
        parts += ["", f"**Warning: {warning}.**"]
    if isinstance(cal.get("achieved"), dict):
        parts += ["", "Achieved on the calibration data:", "", table(cal["achieved"])]
    guarantee = cal.get("guarantee", "absent")
    if isinstance(guarantee, dict):
        parts += ["", f"Statistical guarantee (method `{guarantee.get('method')}`, alpha = "
                      f"{fmt(guarantee.get('alpha'))}, delta = {fmt(guarantee.get('delta'))}, on "
                      f"{fmt(guarantee.get('n_calibration'))} calibration questions):", "", table(guarantee)]
    elif guarantee is None:
        parts += ["", "No statistical guarantee is claimed for this threshold: it meets its target on the "
                      "calibration data only."]
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------- by router kind




def reader_story(meta: RunMeta) -> str:
    """Where the unit reader's reading comes from: its pre-training (public answerability data) and what CV chose."""
    pre = meta.extra.get("reader_pretrain") or {}
    chosen = meta.metrics.get("chosen") or {}
    layers = chosen.get("finetune_layers", 1)
    tuned = ("used as pre-trained (zero-shot: cross-validation chose no fine-tuning on the conversations)"
             if layers == 0 else f"then its top {layers} layer(s) fine-tuned on per-unit targets of the "
             f"conversations for {chosen.get('epochs')} epoch(s)")
    if not pre:
        return f"A cross-encoder (`{meta.extra.get('reader_base')}`), {tuned},"
    held = pre.get("heldout") or {}
    chat = "".join(f" and `{c}` (turns)" for c in pre.get("chat_data") or [])
    heads = " with a span head (answer span vs no answer)" if pre.get("span_head") else ""
    scores = {"span": " (its span margin read)", "both": " (its classifier logit and span margin read)"}.get(
        str(meta.extra.get("text_scores", "classifier")), "")
    return (f"A cross-encoder pre-trained to read (`{pre.get('base')}` fine-tuned, every layer, as an answerability "
            f"cross-encoder{heads} on {pre.get('train_pairs')} (question, sentence) pairs of `{pre.get('data')}`"
            f"{chat}; held-out articles: AUROC {held.get('pair_auroc')} per sentence, {held.get('question_auroc')} "
            f"per question), {tuned}{scores},")


def unit_reader_section(meta: RunMeta) -> str:
    chosen = meta.metrics.get("chosen") or {}
    cv = (meta.metrics.get("cv") or {}).get("signals_only") or {}
    steps = meta.metrics.get("cv_by_finetuning") or []
    text = (f"The decision is `score >= threshold_logit`. {reader_story(meta)} scores each summary against the "
            f"question; the unit scores are pooled (`{meta.extra.get('pooling')}`) and a logistic head joins them "
            "with the serve-time signals: `score = bias + signals + text_weight x text` with text_weight "
            f"{meta.extra.get('text_weight')}. Requests must carry each summary's retrieval `score`. Chosen by "
            "leave-one-conversation-out cross-validation over train + validation:\n\n"
            + table({"layers fine-tuned (0: zero-shot)": chosen.get("finetune_layers"), "epochs": chosen.get("epochs"),
                     "pooling": chosen.get("pooling"), "text weight": chosen.get("text_weight"),
                     "CV AUROC (mean over folds)": chosen.get("mean"),
                     "CV AUROC range": f"{chosen.get('min')} - {chosen.get('max')}",
                     "signals-only head, CV AUROC": cv.get("mean")}))
    if steps:
        text += ("\n\nWhat each step adds (cross-validation; text alone: the pooled reader score's AUROC on every "
                 "out-of-fold question):\n\n| layers fine-tuned | epochs | CV AUROC, best head | text alone |\n"
                 "|---|---|---|---|\n" + "\n".join(
                     f"| {g['finetune_layers'] or 'none (zero-shot)'} | {g['epochs'] or '-'} | {fmt(g['mean'])} | "
                     f"{fmt(g.get('text_alone_auroc'))} |" for g in steps))
    return text


def base_hub_id(meta: RunMeta) -> str | None:
    """The hub model the weights derive from: an LM router's base, a unit reader's cross-encoder base."""
    if is_lm(meta):
        return hub_id(meta.base_model)
    # a pre-trained reader derives from its pre-training's base (a local checkpoint has no hub id of its own)
    reader = (meta.extra.get("reader_pretrain") or {}).get("base") or meta.extra.get("reader_base")
    return hub_id(reader) if meta.router_kind == "unit-reader" and isinstance(reader, str) else None


def card_metadata(meta: RunMeta) -> dict[str, Any]:
    """The card's YAML fields that depend on the kind: the hub's pipeline tag and library, and the tags."""
    if is_lm(meta):
        return {"base_model": base_hub_id(meta), "library_name": "peft" if meta.adapter else "transformers",
                "pipeline_tag": "text-generation", "tags": ["lora" if meta.adapter else "merged"]}
    if meta.router_kind == "unit-reader":  # a sequence-classification encoder with one logit per (question, unit)
        return {"base_model": base_hub_id(meta), "library_name": "transformers", "pipeline_tag": "text-classification",
                "tags": ["unit-reader", "cross-encoder", "score-router"]}
    return {"base_model": None, "library_name": None, "pipeline_tag": None,
            "tags": [meta.router_kind, "score-router", "logistic-regression" if meta.router_kind == "features" else
                     "threshold"]}


def intro(meta: RunMeta) -> str:
    if is_lm(meta):
        return ("Given a question and the top-k retrieved Tier-1 summaries (with dates, in rank order) it answers "
                '`{"action": "ANSWER" | "ESCALATE", "reason": "..."}`: ANSWER when the summaries state the answer '
                "exactly and completely, ESCALATE when the agent should read the linked Tier-2 raw pages (bounded "
                "multi-hop research, then answer).")
    return ("Given a question and the top-k retrieved Tier-1 summaries (with dates and retrieval scores, in rank "
            "order) it returns a score: the log-odds that the agent should ESCALATE (read the linked Tier-2 raw "
            "pages) rather than ANSWER from the summaries. It generates no text; the decision is ESCALATE when "
            "`score >= threshold_logit`.")


def weights_line(meta: RunMeta, local: bool) -> str:
    if not is_lm(meta):
        reader = str(meta.extra.get("reader_base") or "not recorded")
        text = SCORE_WEIGHTS.get(meta.router_kind, f"a `{meta.router_kind}` router; no language model")
        return text.format(reader=reader if local else local_path_name(reader))
    base_id = base_hub_id(meta)
    base_line = f"`{meta.base_model}`" + (f" (hub: `{base_id}`)" if base_id and base_id != meta.base_model else "")
    return ("a PEFT LoRA adapter over " + base_line if meta.adapter else "merged weights (base " + base_line + ")")


def contract_line(meta: RunMeta) -> str:
    if is_lm(meta):
        return (f"- Router contract: `{meta.contract_version}` (the prompt and output format; a router is refused by "
                "a runtime that speaks another contract version)")
    return (f"- Router contract: `{meta.contract_version}` (the request format and the score's meaning; a router is "
            "refused by a runtime that speaks another contract version)")


def training_table(meta: RunMeta, local: bool) -> str:
    """An LM router's recipe; a score router's stage config (its `training` is empty)."""
    values = meta.training or (meta.extra.get("config") if isinstance(meta.extra.get("config"), dict) else {})
    values = values if local else without_local_paths(values)
    return table({k: v for k, v in values.items() if not isinstance(v, dict | list)})


def limitations(meta: RunMeta) -> str:
    lines = ["- The router only sees the retrieved summaries; it cannot know what retrieval missed, so a retrieval "
             "failure can look like a sufficient set of summaries.",
             "- Labels inherit the judges' errors and the label rule; metrics above are on the splits named here, not "
             "on other benchmarks or domains. Training data derived from LoCoMo is CC BY-NC 4.0 (non-commercial)."]
    if is_lm(meta):
        lines += [f"- Prompts must be rendered by the same contract version (`{meta.contract_version}`); other prompt "
                  "formats are out of distribution.",
                  "- Unparseable outputs are treated as ESCALATE (faithfulness first), which trades tokens for "
                  "safety."]
    else:
        lines += ["- Requests must carry each summary's retrieval `score` from the same retriever the training data "
                  "used; signals outside the training range are clipped to it (a decision then says so)."]
    return "\n".join(lines)
