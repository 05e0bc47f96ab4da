"""Writers for routing-evaluation results: eval.json, eval.md, the accuracy-vs-tokens plot and the reliability plot,
from the plain dict evaluate.py builds (so reports can be regenerated from a saved eval.json)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evaluation.ceiling import ceiling_table
from evaluation.domains import domain_section
from evaluation.metrics import PolicyMetrics, dumps
from evaluation.sweep import SweepResult
from labeling.judgments.report import judged_section, verdicts_section
from labeling.report import ci, fmt
from tiermem.runs.safe_io import write_atomic, write_stream

POLICY_ORDER = ("routed", "summary_only", "raw_only", "random", "oracle")
POLICY_TITLES = {
    "routed": "routed",
    "summary_only": "summary-only",
    "raw_only": "raw-only (always escalate)",
    "random": "random at routed rate (expected)",
    "oracle": "oracle (cheapest correct path)",
}


def build_report(
    *,
    routed: PolicyMetrics | None,
    baselines: Mapping[str, PolicyMetrics],
    sweep: SweepResult | None,
    meta: Mapping[str, Any],
    others: Mapping[str, PolicyMetrics] | None = None,
) -> dict[str, Any]:
    """`others`: compared routers by row name, listed after `routed` and before the baselines."""
    policies: dict[str, Any] = {}
    if routed is not None:
        policies["routed"] = routed.to_dict()
    policies.update({k: v.to_dict() for k, v in (others or {}).items()})
    policies.update({k: v.to_dict() for k, v in baselines.items()})
    return {"meta": dict(meta), "policies": policies, "sweep": sweep.to_dict() if sweep else None}


def write_json(report: Mapping[str, Any], path: str | Path) -> Path:
    return _write(path, dumps(report) + "\n")


def write_markdown(report: Mapping[str, Any], path: str | Path) -> Path:
    return _write(path, render_markdown(report))


def _write(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, text)


def _ordered(policies: Mapping[str, Any]) -> list[str]:
    routers = [k for k in policies if k not in POLICY_ORDER]
    head = ["routed"] if "routed" in policies else []
    return head + routers + [k for k in POLICY_ORDER[1:] if k in policies]


def interval_table(report: Mapping[str, Any]) -> str:
    intervals = report.get("intervals") or {}
    level = round(100 * (report.get("uncertainty") or {}).get("level", 0.95))
    lines = [f"| policy ({level}% intervals) | accuracy | escalation rate | hard-recall | false-cache-hit rate "
             "| false-cache-miss rate | mean input tokens |", "|" + "---|" * 7]
    for key in _ordered(report["policies"]):
        iv = intervals.get(key)
        if not iv:
            continue
        lines.append(f"| {POLICY_TITLES.get(key, key)} | {ci(iv['accuracy'])} | {ci(iv['escalation_rate'])} "
                     f"| {ci(iv['hard_recall'])} | {ci(iv['false_cache_hit_rate'])} "
                     f"| {ci(iv['false_cache_miss_rate'])} | {ci(iv['mean_input_tokens'], 1)} |")
    return "\n".join(lines)


def ranking_table(report: Mapping[str, Any]) -> str:
    lines = ["| router | AUROC | AUPRC | APGR | ECE | labeled | ESCALATE share |", "|---|---|---|---|---|---|---|"]
    for key, r in (report.get("ranking") or {}).items():
        lines.append(f"| {POLICY_TITLES.get(key, key)} | {ci(r.get('auroc'))} | {ci(r.get('auprc'))} "
                     f"| {ci(r.get('apgr'))} | {ci(r.get('ece'))} | {r.get('n_labeled')} "
                     f"| {fmt(r.get('escalate_share'))} |")
    return "\n".join(lines)


def headline_table(policies: Mapping[str, Mapping[str, Any]]) -> str:
    head = (
        "| policy | accuracy | escalation rate | mean input tokens | mean latency (s) | router tokens "
        "| router latency (s) | hard-recall | false cache hits | false cache misses | RepairRate | RegressRate |"
    )
    lines = [head, "|" + "---|" * 12]
    for key in _ordered(policies):
        m = policies[key]
        lines.append(
            f"| {POLICY_TITLES.get(key, key)} | {fmt(m['accuracy'])} | {fmt(m['escalation_rate'])} "
            f"| {fmt(m['mean_input_tokens'], 1)} | {fmt(m['mean_latency_s'], 2)} "
            f"| {fmt(m.get('mean_router_tokens'), 1)} | {fmt(m.get('mean_router_latency_s'), 3)} "
            f"| {fmt(m['hard_recall'])} "
            f"| {fmt(m['false_cache_hits'], 1)} | {fmt(m['false_cache_misses'], 1)} "
            f"| {fmt(m['repair_rate'])} | {fmt(m['regress_rate'])} |"
        )
    return "\n".join(lines)


def reading_section(reading: Mapping[str, Any]) -> list[str]:
    """eval.md's "what reading adds": the reader zero-shot (pre-trained only) beside the fine-tuned one."""
    out: list[str] = []
    for key, r in reading.items():
        out += [f"### What reading adds: {POLICY_TITLES.get(key, key)} (AUROC on {r['n_labeled']} labeled records, "
                "95% intervals resampling conversations)", "",
                "| reader | text part alone | score without the text part | whole score |", "|---|---|---|---|"]
        out += [f"| {name} | {ci(row['text_alone'])} | {ci(row['without_text'])} | {ci(row['full'])} |"
                for name, row in r["rows"].items()]
        diff = r.get("fine_tuned_minus_zero_shot")
        if diff:
            out.append(f"| fine-tuned - zero-shot (paired) | {ci(diff['text_alone'])} | | {ci(diff['full'])} |")
        if r.get("note"):
            out += ["", f"Note: {r['note']}."]
        out.append("")
    return out


def ceiling_section(ceiling: Mapping[str, Any] | None) -> list[str]:
    """eval.md's ceiling table (evaluation.ceiling): raw-only and the oracle for reference, then each router."""
    if not ceiling:
        return []
    raw, oracle = ceiling["raw_only"], ceiling["oracle"]
    return ["### The ranking's ceiling (threshold chosen on these data: a CEILING, not an operating point)", "",
            f"{ceiling['note']}. Reference: raw-only accuracy {fmt(raw['accuracy'])} at "
            f"{fmt(raw['mean_input_tokens'], 1)} mean input tokens; the oracle {fmt(oracle['mean_input_tokens'], 1)} "
            f"({fmt(100 * oracle['tokens_fewer_share'], 1) if oracle['tokens_fewer_share'] is not None else 'n/a'}% "
            "fewer). False cache hits: ANSWER where only the research path is right (the replay's outcomes), among "
            "the questions with the lowest escalation scores.", "",
            *ceiling_table(ceiling["routers"], POLICY_TITLES), "",
            *[f"- {POLICY_TITLES.get(k, k)}'s point: threshold_logit {fmt(r.get('calibrated_threshold_logit'))} "
              f"({r.get('calibrated_by')})" for k, r in ceiling["routers"].items()], ""]


def render_markdown(report: Mapping[str, Any]) -> str:
    meta, policies, sweep = report["meta"], report["policies"], report.get("sweep")
    out = [f"# Routing evaluation: {meta.get('router', 'router')} on `{meta.get('split', '?')}`", ""]
    for key in ("dataset", "split", "router", "threshold_logit", "correctness_rule", "label_rule", "n",
                "n_conversations", "n_error", "n_unlabeled", "n_unreplayable", "n_unreplayable_labeled",
                "router_errors", "routing_wall_s", "mode"):
        if key in meta:
            out.append(f"- {key}: {fmt(meta[key])}")
    prov = meta.get("provenance")
    if prov:
        made = (f"labeling config `{prov['label_config']}` (data `{prov.get('data_path')}`, rule "
                f"`{prov.get('label_rule_config')}`)" if prov.get("label_config")
                else "no labeling config.yaml next to the dataset (unknown labeling config)")
        contract_v = prov.get("contract_version") or "not recorded in the dataset"
        out.append(f"- made by: {made}; contract: {contract_v} (this code: {prov.get('current_contract_version')})")
    for key, c in (meta.get("compared") or {}).items():
        out.append(f"- compared router `{key}`: {c['router']}, threshold_logit {fmt(c.get('threshold_logit'))}")
    for note in meta.get("notes", []):
        out.append(f"- note: {note}")
    out += ["", headline_table(policies), ""]
    if report.get("intervals"):
        unc = report["uncertainty"]
        out += [f"### Uncertainty ({unc['method']}, {unc['n_boot']} replicates, seed {unc['seed']}; "
                f"{unc['n']} questions in {unc['n_clusters']} conversation(s))", ""]
        for note in unc.get("notes", []):
            out.append(f"- **caution**: {note}")
        out += ["", interval_table(report), ""]
    if report.get("ranking"):
        out += ["### Ranking quality (score vs label, ESCALATE positive; labeled records; random AUROC = 0.5, "
                "APGR = 0.5)", "", ranking_table(report), ""]
    out += ceiling_section(report.get("ceiling"))
    out += judged_section(report.get("judged"), report.get("ranking") or {})
    out += verdicts_section(report.get("verdicts"), report.get("ranking") or {})
    out += domain_section(report.get("by_domain"))
    per_conv = report.get("per_conversation") or {}
    if per_conv:
        keys = list(next(iter(per_conv.values()))["auroc"])
        out += ["### AUROC per conversation (labeled records; point estimates)", "",
                "| conversation | labeled | ESCALATE share | " + " | ".join(POLICY_TITLES.get(k, k) for k in keys)
                + " |", "|" + "---|" * (3 + len(keys))]
        for conv, row in per_conv.items():
            out.append(f"| {conv} | {row['n_labeled']} | {fmt(row['escalate_share'])} | "
                       + " | ".join(fmt(row["auroc"].get(k)) for k in keys) + " |")
        out.append("")
    for key, parts in (report.get("score_parts") or {}).items():
        out += [f"### What carries the decision: {POLICY_TITLES.get(key, key)} (AUROC on {parts['n_labeled']} labeled "
                f"records; full score {fmt(parts['full'])})", "",
                "| part of the score | AUROC of the part alone | AUROC of the score without it |", "|---|---|---|"]
        out += [f"| {name} | {fmt(v['alone'])} | {fmt(v['without'])} |" for name, v in parts.items()
                if isinstance(v, dict)]
        out.append("")
    out += reading_section(report.get("reading") or {})
    clipped = report.get("clipped_signals") or {}
    if clipped:
        out += ["### Signals outside the training range (clipped to it before the model reads them)", "",
                "| router | decisions | clipped | by feature |", "|---|---|---|---|"]
        out += [f"| {POLICY_TITLES.get(k, k)} | {c['n_decisions']} | {c['n_clipped']} | "
                + (", ".join(f"{n} {m}" for n, m in c["by_feature"].items()) or "-") + " |" for k, c in clipped.items()]
        out.append("")
    points = meta.get("operating_points") or {}
    if points:
        out += ["Rows `name@point` are the same router at another calibrated threshold (calibrate's "
                "operating_points): " + ", ".join(f"`{k}` ({p['criterion']}, log-odds {fmt(p['threshold_logit'])})"
                                                   for k, p in points.items()), ""]
    verdicts = [c for c in report.get("comparisons") or [] if c["b"].startswith("random") or c.get("pair")]
    if verdicts:
        out += ["### In words", ""]
        out += [f"- {c['reading']} (difference {fmt(c['estimate'])} [{fmt(c['lo'])}, {fmt(c['hi'])}])"
                for c in verdicts]
        out.append("")
    if report.get("comparisons"):
        out += ["### Paired comparisons (difference a - b, same resampled questions)", "",
                "| a | b | metric | difference | interval | reading |", "|---|---|---|---|---|---|"]
        for c in report["comparisons"]:
            out.append(f"| {c['a']} | {c['b']} | {c['metric']} | {fmt(c['estimate'])} "
                       f"| [{fmt(c['lo'])}, {fmt(c['hi'])}] | {c['reading']} |")
        out.append("")
    out.append(
        "Accuracy is counterfactual replay: the summary path's correctness when routed ANSWER, the "
        "research path's when ESCALATE. Input tokens and latency are the answering model's on the path taken; each "
        "router's own cost (the tokens it read, its time) is in the router columns, counted alike for every router."
    )
    if "routed" in policies:
        r = policies["routed"]
        out += ["", f"Unparseable router outputs (counted as ESCALATE): {r['unparseable']}", ""]
        out += ["## Confusion matrix (rows: label, columns: routed)", "",
                "| label | ANSWER | ESCALATE |", "|---|---|---|"]
        for label, row in r["confusion"].items():
            out.append(f"| {label} | {fmt(row['ANSWER'], 0)} | {fmt(row['ESCALATE'], 0)} |")
        out += ["", "## Per category", "",
                "| category | n | routed accuracy | summary-only | raw-only | escalation rate | mean input tokens |",
                "|---|---|---|---|---|---|---|"]
        for cat, c in r["per_category"].items():
            out.append(
                f"| {cat} | {c['n']} | {fmt(c['accuracy'])} | {fmt(c['summary_only_accuracy'])} "
                f"| {fmt(c['raw_only_accuracy'])} | {fmt(c['escalation_rate'])} | {fmt(c['mean_input_tokens'], 1)} |"
            )
    if sweep:
        rec = sweep["rate_to_recover"]
        apgr_iv = (report.get("ranking") or {}).get("routed", {}).get("apgr")
        out += ["", "## Threshold sweep", "",
                f"- points: {len(sweep['points'])}",
                f"- gap (raw-only - summary-only accuracy): {fmt(sweep['gap'])}",
                f"- APGR (average gap recovered over escalation rates 0..1; random = 0.5): "
                f"{ci(apgr_iv) if apgr_iv else fmt(sweep['apgr'])}",
                f"- AUC of accuracy vs mean input tokens, normalized by the token range: "
                f"{fmt(sweep['auc_accuracy_tokens'])}"]
        for share, rate in rec.items():
            out.append(f"- escalation rate needed to recover {share}% of the gap: {fmt(rate)}")
    if meta.get("plot"):
        out += ["", f"![accuracy vs input tokens]({Path(meta['plot']).name})"]
    if meta.get("reliability_plot"):
        out += ["", f"![reliability of p_escalate]({Path(meta['reliability_plot']).name})"]
    return "\n".join(out) + "\n"


def write_plot(report: Mapping[str, Any], path: str | Path) -> Path:
    """Accuracy vs mean input tokens: each router's sweep curve and operating point, baselines as points; error
    bars are the bootstrap intervals of accuracy and tokens."""
    policies = report["policies"]
    sweeps = report.get("sweeps") or {}  # evaluate writes one per router
    intervals = report.get("intervals") or {}
    plt, fig, ax = _axes((7.0, 4.8))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    router_colors = {k: cycle[i % len(cycle)] for i, k in enumerate(k for k in _ordered(policies)
                                                                      if k not in POLICY_ORDER[1:])}
    for key, sw in sweeps.items():
        if sw and sw["points"]:
            pts = sorted(sw["points"], key=lambda p: p["mean_input_tokens"])
            ax.plot([p["mean_input_tokens"] for p in pts], [p["accuracy"] for p in pts], "-", lw=1, alpha=0.8,
                    color=router_colors.get(key, "tab:blue"), label=f"{POLICY_TITLES.get(key, key)} sweep")
    if "summary_only" in policies and "raw_only" in policies:
        s, r = policies["summary_only"], policies["raw_only"]
        ax.plot([s["mean_input_tokens"], r["mean_input_tokens"]], [s["accuracy"], r["accuracy"]], "--",
                color="gray", lw=1, label="random routing")
    markers = {"summary_only": ("s", "tab:orange"), "raw_only": ("^", "tab:red"), "oracle": ("*", "tab:green"),
               "random": ("x", "gray")}
    for key in _ordered(policies):
        m = policies[key]
        marker, color = markers.get(key, ("D", router_colors.get(key, "black")))
        iv = intervals.get(key) or {}
        acc, tok = iv.get("accuracy"), iv.get("mean_input_tokens")
        if acc and acc.get("lo") is not None and tok and tok.get("lo") is not None:
            ax.errorbar([m["mean_input_tokens"]], [m["accuracy"]],
                        yerr=[[m["accuracy"] - acc["lo"]], [acc["hi"] - m["accuracy"]]],
                        xerr=[[m["mean_input_tokens"] - tok["lo"]], [tok["hi"] - m["mean_input_tokens"]]],
                        fmt="none", ecolor=color, elinewidth=0.8, capsize=2, alpha=0.7, zorder=2)
        ax.scatter([m["mean_input_tokens"]], [m["accuracy"]], marker=marker, s=60, color=color, zorder=3,
                   edgecolors="black" if key not in POLICY_ORDER[1:] else None, label=POLICY_TITLES.get(key, key))
    ax.set_xlabel("mean input tokens per query (answering model)")
    ax.set_ylabel("accuracy (counterfactual replay)")
    meta = report.get("meta", {})
    level = round(100 * (report.get("uncertainty") or {}).get("level", 0.95))
    ax.set_title(f"{meta.get('router', 'router')} on {meta.get('split', '')} (n={meta.get('n', '?')}; "
                 f"bars: {level}% bootstrap intervals)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="lower right")
    return _save_figure(fig, path)


def _axes(size: tuple[float, float]) -> tuple[Any, Any, Any]:
    import matplotlib

    matplotlib.use("Agg")  # headless; must precede pyplot
    import matplotlib.pyplot as plt

    return (plt, *plt.subplots(figsize=size, dpi=120))


def _save_figure(fig: Any, path: str | Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_stream(path, lambda fh: fig.savefig(fh, format=path.suffix.lstrip(".") or "png"))
    plt.close(fig)
    return path


def write_reliability_plot(report: Mapping[str, Any], path: str | Path) -> Path:
    """Observed ESCALATE share vs mean p_escalate per bin, one curve per router with probabilities."""
    _, fig, ax = _axes((5.0, 5.0))
    ax.plot([0, 1], [0, 1], "--", color="gray", lw=1, label="perfectly calibrated")
    for key, r in (report.get("ranking") or {}).items():
        rel = r.get("reliability")
        if not rel:
            continue
        curve = rel["curve"]
        ece = r.get("ece") or {}
        ax.plot([b["mean_p"] for b in curve], [b["observed"] for b in curve], "-o", ms=3,
                label=f"{POLICY_TITLES.get(key, key)} (ECE {ci(ece)})")
    ax.set_xlabel("mean p_escalate in bin")
    ax.set_ylabel("observed ESCALATE share (labeled records)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="upper left")
    ax.set_title("reliability of p_escalate", fontsize=10)
    return _save_figure(fig, path)
