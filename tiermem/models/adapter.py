"""A LoRA router's adapter loaded as it was trained: over the base it was trained on (the digest of the base's config,
`data.base_config_sha256`), every trained weight in place and none left over (docs/serving.md)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from tiermem.models.trunk_file import config_items
from tiermem.runs.run_meta import RUN_META_FILE, RunMeta
from tiermem.settings.errors import RouterLoadError

BASE_KEY = "base_config_sha256"  # tiermem_router.json data.<this>: the digest of the trained-on base's config


def base_config_digest(config: Any) -> str:
    return hashlib.sha256(json.dumps(config_items(config), sort_keys=True, default=str).encode()).hexdigest()


def check_base(base: Any, run_dir: str | Path, meta: RunMeta) -> None:
    """The base about to carry the adapter is the one it was trained on (by its config's digest)."""
    recorded = meta.data.get(BASE_KEY)
    where = Path(run_dir) / RUN_META_FILE
    if not isinstance(recorded, str):
        raise RouterLoadError(f"{where}: records no identity of the base model (data.{BASE_KEY}): saved before "
                              "base models were checked; retrain the router so that its base can be proven")
    actual = base_config_digest(base.config)
    if actual != recorded:
        raise RouterLoadError(f"router {run_dir}: the base model {base.name_or_path} is not the one it was trained "
                              f"on (its config's digest {actual[:16]} differs from the {recorded[:16]} recorded in "
                              f"{where}); load it over the base named {meta.base_model!r} as it was")


def load_adapter(base: Any, run_dir: str | Path, meta: RunMeta, trainable: bool = False) -> Any:
    """PeftModel of the run's adapter over `base`, after its base is checked and with its weights checked whole."""
    from peft import PeftModel

    check_base(base, run_dir, meta)
    model = PeftModel.from_pretrained(base, str(run_dir), is_trainable=trainable)
    check_adapter_weights(model, run_dir)
    return model


def check_adapter_weights(model: Any, run_dir: str | Path) -> None:
    """Every adapter weight the config's model holds is in the weights file, and none of the file's is left unread."""
    from peft.utils import get_peft_model_state_dict, load_peft_weights

    saved = set(load_peft_weights(str(run_dir), device="cpu"))
    # embedding layers left out: "auto" would look the base up on the hub; a resized embedding PEFT saved beside
    # the adapter (no lora_ in its name) is loaded into the base, not into an adapter weight
    expected = set(get_peft_model_state_dict(model, save_embedding_layers=False))
    missing, unused = sorted(expected - saved), sorted(k for k in saved - expected if "lora_" in k)
    if missing or unused:
        raise RouterLoadError(f"router {run_dir}: its adapter weights do not fit its adapter_config.json: "
                              f"{len(missing)} weight(s) the config's model needs are not in the weights file "
                              f"{missing[:3]}, {len(unused)} of the file's fit nowhere in it {unused[:3]}; the "
                              "config or the weights changed after training: restore them or retrain")
