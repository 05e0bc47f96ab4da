"""What reading adds, for a unit-reader router: AUROC of the reader's text part alone, of the score without it and of
the whole score, pre-trained beside fine-tuned, with bootstrap intervals and the paired difference."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tiermem import contract

ZERO_SHOT = "zero-shot (pre-trained only)"
FINE_TUNED = "fine-tuned on the conversations"


def reading_steps(router: Any, records: Sequence[dict[str, Any]], n_boot: int = 1000, seed: int = 0
                  ) -> dict[str, Any] | None:
    from tiermem.stats import auroc_reps, bootstrap_counts, interval, ones

    if getattr(router, "kind", None) != "unit-reader":
        return None
    labeled = [r for r in records if r.get("label") in contract.ACTIONS]
    y = [r["label"] == "ESCALATE" for r in labeled]
    if not 0 < sum(y) < len(y):
        return None
    extra = getattr(getattr(router, "meta", None), "extra", None) or {}
    chosen = ((getattr(router.meta, "metrics", None) or {}).get("chosen") or {})
    variants = {FINE_TUNED if chosen.get("finetune_layers", 1) else ZERO_SHOT: router}
    note = None
    if chosen.get("finetune_layers", 1):
        zs = router.zero_shot()
        if zs is not None:
            variants = {ZERO_SHOT: zs, **variants}
        else:
            note = (f"the zero-shot reader is not shown: the run kept no zero-shot head or its base "
                    f"{extra.get('reader_base')!r} is not here")
    else:
        note = "cross-validation chose the pre-trained reader as it is: fine-tuning on the conversations scored lower"
    # n_boot 0: point estimates only (no replicates, no interval)
    counts = (bootstrap_counts([str(r.get("conv_id")) for r in labeled], n_boot, seed) if n_boot > 0
              else np.zeros((0, len(labeled))))
    rows, reps = {}, {}
    for name, r in variants.items():
        parts = r.reading_parts([x["question"] for x in labeled], [x["router_summaries"] for x in labeled])
        row = {}
        for part in ("text_alone", "without_text", "full"):
            score = parts[part]
            point = float(auroc_reps(score, y, ones(len(y)))[0])
            rep = auroc_reps(score, y, counts)
            reps[(name, part)] = rep
            row[part] = interval(point, rep)
        rows[name] = row
    out: dict[str, Any] = {"n_labeled": len(labeled), "rows": rows, "note": note}
    if len(rows) == 2:
        out["fine_tuned_minus_zero_shot"] = {
            part: interval(rows[FINE_TUNED][part]["estimate"] - rows[ZERO_SHOT][part]["estimate"],
                           reps[(FINE_TUNED, part)] - reps[(ZERO_SHOT, part)]) for part in ("text_alone", "full")}
    return out
