"""The model card (README.md with YAML metadata) for a router run directory.

Every number and name comes from tiermem_router.json; nothing is hard-coded here except the wording.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from serving import contract
from serving.artifacts import RunMeta, read_run_meta

# The packaged default is a converted copy of this hub model; a card must name a hub id, not our spec.
PACKAGED_HUB_IDS = {"packaged:smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct"}


def base_model_hub_id(spec: str) -> str | None:
    if spec in PACKAGED_HUB_IDS:
        return PACKAGED_HUB_IDS[spec]
    if spec.count("/") == 1 and not spec.startswith((".", "/", "~")) and not Path(spec).exists():
        return spec
    return None  # a local directory: nothing the hub could link to


def _table(rows: dict[str, Any]) -> str:
    if not rows:
        return "_none recorded_"
    lines = ["| metric | value |", "|---|---|"]
    for key, value in rows.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                lines.append(f"| {key}.{sub} | {_fmt(v)} |")
        else:
            lines.append(f"| {key} | {_fmt(value)} |")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


def render_card(meta: RunMeta, repo_id: str, license: str = "apache-2.0", datasets: list[str] | None = None,
                tags: list[str] | None = None) -> Any:
    from huggingface_hub import ModelCard, ModelCardData

    base_id = base_model_hub_id(meta.base_model)
    data = ModelCardData(
        base_model=base_id, library_name="peft" if meta.adapter else "transformers", pipeline_tag="text-generation",
        license=license, datasets=list(datasets or []) or None,
        tags=sorted({"tiermem", "router", "agent-memory", "lora" if meta.adapter else "merged", meta.stage,
                     *(tags or [])}),
    )
    cal = meta.calibration
    if cal:
        target = cal.get("target", {})
        calibration = (f"Threshold **{_fmt(cal.get('threshold'))}** chosen for {target.get('kind')} = "
                       f"{_fmt(target.get('value'))} on `{cal.get('data')}` [{cal.get('split')}].\n\n"
                       + _table(cal.get("achieved", {})))
    else:
        calibration = "Not calibrated: the default threshold 0.5 applies (run `make calibrate`)."
    base_line = f"`{meta.base_model}`" + (f" (hub: `{base_id}`)" if base_id and base_id != meta.base_model else "")
    vllm_base = base_id or "<base model>"
    body = f"""# {repo_id}

A **sufficiency router** for a two-tier agent memory (tiermem-router). Given a question and the top-k retrieved
Tier-1 summaries (with dates, in rank order) it answers `{{"action": "ANSWER" | "ESCALATE", "reason": "..."}}`:
ANSWER when the summaries state the answer exactly and completely, ESCALATE when the agent should read the linked
Tier-2 raw pages (bounded multi-hop research, then answer).

- Weights: {"a PEFT LoRA adapter over " + base_line if meta.adapter else "merged weights (base " + base_line + ")"}
- Training stage: `{meta.stage}`
- Router contract: `{meta.contract_version}` (the prompt and output format; a router is refused by a runtime that
  speaks another contract version)

## Training data and label rule

{_table(meta.data)}

Labels are hindsight labels: ANSWER when the summary-only path was right, ESCALATE when only the research path was
right, under the label rule named above; questions where both paths failed are dropped.

## Training configuration

{_table({k: v for k, v in meta.training.items() if not isinstance(v, dict | list)})}

## Validation metrics

{_table(meta.metrics)}

## Calibration

{calibration}

The decision is `p_escalate >= threshold`, where `p_escalate` is the softmax over the first tokens of "ANSWER"
and "ESCALATE" right after the output prefix `{contract.OUTPUT_PREFIX}`. The stored threshold is the default;
it can be overridden per call.

## How to use

In the tiermem runtime:

```python
from serving.router import Router

router = Router.from_pretrained("{repo_id}")          # fast path: one forward pass, no generation
decision = router.route("When did Caroline move?", [{{"text": "Caroline moved to Boston.", "date": "2023-05-08"}}])
print(decision.action, decision.p_escalate)
```

As an HTTP endpoint: `tiermem-router serve router={repo_id}` (POST /route).

With vLLM (the adapter is selected by model name; log-probs of the action tokens give `p_escalate`):

```bash
vllm serve {vllm_base} --enable-lora --lora-modules router={repo_id}
```

```python
from serving.router import RemoteRouter
router = RemoteRouter(base_url="http://127.0.0.1:8000/v1", model="router")
```

## Limitations

- The router only sees the retrieved summaries; it cannot know what retrieval missed, so a retrieval failure can
  look like a sufficient set of summaries.
- Labels inherit the judges' errors and the label rule; metrics above are on the validation split named in the
  training data, not on other benchmarks or domains.
- Prompts must be rendered by the same contract version (`{meta.contract_version}`); other prompt formats are out
  of distribution.
- Unparseable outputs are treated as ESCALATE (faithfulness first), which trades tokens for safety.
"""
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}")


def write_model_card(run_dir: str | Path, repo_id: str, **kwargs: Any) -> Path:
    meta = read_run_meta(run_dir)
    card = render_card(meta, repo_id, **kwargs)
    path = Path(run_dir) / "README.md"
    card.save(path)
    return path
