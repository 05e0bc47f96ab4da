"""Writers for routing-evaluation results: eval.json, eval.md and the accuracy-vs-tokens plot.

The input is the plain dict that `evaluate.py` builds (see `build_report`), so reports can be
regenerated from a saved eval.json without rerunning a router.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from router_train.metrics import PolicyMetrics, SweepResult, dumps

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
) -> dict[str, Any]:
    policies: dict[str, Any] = {}
    if routed is not None:
        policies["routed"] = routed.to_dict()
    policies.update({k: v.to_dict() for k, v in baselines.items()})
    return {"meta": dict(meta), "policies": policies, "sweep": sweep.to_dict() if sweep else None}


def write_json(report: Mapping[str, Any], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(report) + "\n")
    return path


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _ordered(policies: Mapping[str, Any]) -> list[str]:
    return [k for k in POLICY_ORDER if k in policies] + [k for k in policies if k not in POLICY_ORDER]


def headline_table(policies: Mapping[str, Mapping[str, Any]]) -> str:
    head = (
        "| policy | accuracy | escalation rate | mean input tokens | mean latency (s) | hard-recall "
        "| false cache hits | false cache misses | RepairRate | RegressRate |"
    )
    lines = [head, "|" + "---|" * 10]
    for key in _ordered(policies):
        m = policies[key]
        lines.append(
            f"| {POLICY_TITLES.get(key, key)} | {_fmt(m['accuracy'])} | {_fmt(m['escalation_rate'])} "
            f"| {_fmt(m['mean_input_tokens'], 1)} | {_fmt(m['mean_latency_s'], 2)} | {_fmt(m['hard_recall'])} "
            f"| {_fmt(m['false_cache_hits'], 1)} | {_fmt(m['false_cache_misses'], 1)} "
            f"| {_fmt(m['repair_rate'])} | {_fmt(m['regress_rate'])} |"
        )
    return "\n".join(lines)


def render_markdown(report: Mapping[str, Any]) -> str:
    meta, policies, sweep = report["meta"], report["policies"], report.get("sweep")
    out = [f"# Routing evaluation: {meta.get('router', 'router')} on `{meta.get('split', '?')}`", ""]
    for key in ("dataset", "split", "router", "threshold", "correctness_rule", "label_rule", "n", "n_error",
                "n_unlabeled", "n_unknown", "router_errors", "routing_wall_s", "mode"):
        if key in meta:
            out.append(f"- {key}: {_fmt(meta[key])}")
    for note in meta.get("notes", []):
        out.append(f"- note: {note}")
    out += ["", headline_table(policies), ""]
    out.append(
        "Accuracy is counterfactual replay: the summary path's correctness when routed ANSWER, the "
        "research path's when ESCALATE. Tokens and latency include the router's own prompt and time."
    )
    if "routed" in policies:
        r = policies["routed"]
        out += ["", f"Unparseable router outputs (counted as ESCALATE): {r['unparseable']}", ""]
        out += ["## Confusion matrix (rows: label, columns: routed)", "",
                "| label | ANSWER | ESCALATE |", "|---|---|---|"]
        for label, row in r["confusion"].items():
            out.append(f"| {label} | {_fmt(row['ANSWER'], 0)} | {_fmt(row['ESCALATE'], 0)} |")
        out += ["", "## Per category", "",
                "| category | n | routed accuracy | summary-only | raw-only | escalation rate | mean input tokens |",
                "|---|---|---|---|---|---|---|"]
        for cat, c in r["per_category"].items():
            out.append(
                f"| {cat} | {c['n']} | {_fmt(c['accuracy'])} | {_fmt(c['summary_only_accuracy'])} "
                f"| {_fmt(c['raw_only_accuracy'])} | {_fmt(c['escalation_rate'])} | {_fmt(c['mean_input_tokens'], 1)} |"
            )
    if sweep:
        rec = sweep["rate_to_recover"]
        out += ["", "## Threshold sweep", "",
                f"- points: {len(sweep['points'])}",
                f"- gap (raw-only - summary-only accuracy): {_fmt(sweep['gap'])}",
                f"- APGR (average gap recovered over escalation rates 0..1; random = 0.5): {_fmt(sweep['apgr'])}",
                f"- AUC of accuracy vs mean input tokens, normalized by the token range: "
                f"{_fmt(sweep['auc_accuracy_tokens'])}"]
        for share, rate in rec.items():
            out.append(f"- escalation rate needed to recover {share}% of the gap: {_fmt(rate)}")
    if meta.get("plot"):
        out += ["", f"![accuracy vs input tokens]({Path(meta['plot']).name})"]
    return "\n".join(out) + "\n"


def write_markdown(report: Mapping[str, Any], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_markdown(report))
    return path


def write_plot(report: Mapping[str, Any], path: str | Path) -> Path:
    """Accuracy vs mean input tokens: the sweep curve, the routed operating point, baselines as points."""
    import matplotlib

    matplotlib.use("Agg")  # headless; must precede pyplot
    import matplotlib.pyplot as plt

    policies, sweep = report["policies"], report.get("sweep")
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    if sweep and sweep["points"]:
        pts = sorted(sweep["points"], key=lambda p: p["mean_input_tokens"])
        ax.plot([p["mean_input_tokens"] for p in pts], [p["accuracy"] for p in pts], "-o", ms=3,
                color="tab:blue", label="router threshold sweep")
    if "summary_only" in policies and "raw_only" in policies:
        s, r = policies["summary_only"], policies["raw_only"]
        ax.plot([s["mean_input_tokens"], r["mean_input_tokens"]], [s["accuracy"], r["accuracy"]], "--",
                color="gray", lw=1, label="random routing")
    markers = {"summary_only": ("s", "tab:orange"), "raw_only": ("^", "tab:red"), "oracle": ("*", "tab:green"),
               "random": ("x", "gray"), "routed": ("D", "tab:blue")}
    for key in _ordered(policies):
        m = policies[key]
        marker, color = markers.get(key, ("o", "black"))
        ax.scatter([m["mean_input_tokens"]], [m["accuracy"]], marker=marker, s=70, color=color, zorder=3,
                   edgecolors="black" if key == "routed" else None, label=POLICY_TITLES.get(key, key))
    ax.set_xlabel("mean input tokens per query (incl. router)")
    ax.set_ylabel("accuracy (counterfactual replay)")
    meta = report.get("meta", {})
    ax.set_title(f"{meta.get('router', 'router')} on {meta.get('split', '')} (n={meta.get('n', '?')})", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def load_json(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
