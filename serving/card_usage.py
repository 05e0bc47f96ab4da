"""The router card's "How to use" section: the tiermem runtime, plain PEFT and vLLM, for the router as published."""

from __future__ import annotations

from tiermem.runs.run_meta import RunMeta


def is_lm(meta: RunMeta) -> bool:
    """An LM router (adapter or merged weights) rather than a score router."""
    return meta.router_kind == "local"


def usage_section(meta: RunMeta, ref: str, base_id: str | None) -> str:
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
    if not is_lm(meta):
        return f"""In the tiermem runtime (`tiermem_router.json` names the kind, `{meta.router_kind}`):

```python
from serving.router import Router

router = Router.from_pretrained("{ref}")
decision = router.route("When did Caroline move?",
                        [{{"text": "Caroline moved to Boston.", "date": "2023-05-08", "score": 0.71}}])
print(decision.action, decision.score, decision.score_parts)   # the score's parts: what carries the decision
```

As an HTTP endpoint: `tiermem-router serve router={ref}` (POST /route; each summary needs its `score`).
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
