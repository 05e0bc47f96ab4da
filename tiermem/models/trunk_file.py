"""A frozen trunk's state file: its fingerprint (the model's config and weights the states come from), the checks
on reading it back, and the proof a file is the one a run wrote (its sha256 in that run's tiermem_router.json)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from tiermem.runs.run_meta import RUN_META_FILE, RunMetaError, read_run_meta, sha256_file
from tiermem.settings.errors import MissingFileError, StoreError

FORMAT, VERSION = "tiermem-trunk-states", 2
RECORD_KEY = "trunk_states"  # tiermem_router.json data.<this>: the state file a run wrote or read
# config keys that do not change what the bottom layers compute: names, versions, runtime switches, labels and
# special-token ids (a trainer sets some of them on the config it trains, so they differ between stages)
_RUNTIME_KEYS = {"transformers_version", "dtype", "torch_dtype", "use_cache", "output_attentions",
                 "output_hidden_states", "return_dict", "torchscript", "architectures", "id2label", "label2id",
                 "problem_type", "initializer_range", "tie_word_embeddings", "attn_implementation",
                 "return_dict_in_generate", "tokenizer_class", "chunk_size_feed_forward"}


class TrunkCacheError(StoreError):
    """A trunk-state file not as FrozenTrunk.save wrote it for this model, or unlike the sha256 its run recorded."""


def config_items(config: Any) -> dict[str, Any]:
    return {k: v for k, v in sorted(config.to_dict().items()) if not k.startswith("_") and k not in _RUNTIME_KEYS
            and not k.endswith(("_token_id", "_token_ids"))}


def trunk_fingerprint(model: Any, split: int, inner: Any) -> str:
    """What the trunk's output depends on: the model's config, the split, and every byte of the embeddings' and the
    bottom `split` layers' weights (LoRA weights left out: the trunk runs below the adapter)."""
    digest = hashlib.sha256(f"{FORMAT}/{VERSION}:{model.config.model_type}:{split}\n".encode())
    digest.update(json.dumps(config_items(model.config), sort_keys=True, default=str).encode())
    for module in [inner.embed_tokens, *list(inner.layers)[:split]]:
        for name, param in sorted(module.named_parameters()):
            if "lora_" in name:
                continue
            data = param.detach().cpu().contiguous()
            digest.update(f"{name}:{data.dtype}:{tuple(data.shape)}\n".encode())
            digest.update(data.view(torch.uint8).numpy())
    return digest.hexdigest()[:32]


def load_trunk_states(path: Path, device: Any, vocab: int, hidden: int, dtype: Any) -> dict[str, Any]:
    """`{"format", "version", "fingerprint", "writer", "states": {token ids: tensor}}`, every state checked against
    the model (`vocab` size, `hidden` width, `dtype`). weights_only=True: the unpickler builds tensors and plain
    containers only, so a planted file can never run code (torch < 2.6 defaults to a full unpickler)."""
    try:
        saved = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # UnpicklingError for forbidden globals; RuntimeError / EOFError for a torn file
        raise TrunkCacheError(f"{path}: not a trunk-state file written by tiermem ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''}); delete it to recompute") from None
    states = saved.get("states") if isinstance(saved, dict) else None
    if not (isinstance(saved, dict) and isinstance(saved.get("fingerprint"), str) and isinstance(states, dict)):
        raise TrunkCacheError(f"{path}: not a trunk-state file written by tiermem (expected fingerprint and "
                              "states); delete it to recompute")
    if saved.get("format") != FORMAT or saved.get("version") != VERSION:
        raise TrunkCacheError(f"{path}: a trunk-state file of another format ({saved.get('format')!r} version "
                              f"{saved.get('version')!r}, this version reads {FORMAT!r} {VERSION}); delete it to "
                              "recompute")
    for i, (key, state) in enumerate(states.items()):
        problem = _state_problem(key, state, vocab, hidden, dtype)
        if problem:
            raise TrunkCacheError(f"{path}: state {i} {problem}; delete the file to recompute")
    return saved


def _state_problem(key: Any, state: Any, vocab: int, hidden: int, dtype: Any) -> str | None:
    if not (isinstance(key, tuple) and key and all(isinstance(t, int) and not isinstance(t, bool) for t in key)):
        return "is not keyed by a sequence of token ids"
    if not all(0 <= t < vocab for t in key):
        return f"holds a token id outside the model's vocabulary of {vocab}"
    if not isinstance(state, torch.Tensor):
        return f"is a {type(state).__name__}, not a tensor"
    if tuple(state.shape) != (len(key), hidden):
        return f"has shape {tuple(state.shape)}, not ({len(key)}, {hidden}) for its {len(key)} tokens"
    if state.dtype != dtype:
        return f"has dtype {state.dtype}, not the model's {dtype}"
    if not bool(torch.isfinite(state).all()):
        return "holds NaN or infinite values"
    return None


def trunk_record(path: Path, run_dir: str | Path, fingerprint: str, sequences: int, written: bool) -> dict[str, Any]:
    """tiermem_router.json data.trunk_states: the file (by name when it lies in the run directory), its sha256,
    fingerprint and number of sequences, and whether this run wrote it (else it only read it)."""
    inside = path.resolve().parent == Path(run_dir).resolve()
    return {"file": path.name if inside else str(path.resolve()), "sha256": sha256_file(path),
            "fingerprint": fingerprint, "sequences": sequences, "written": written}


def _recorded_file(run_dir: Path, record: Any) -> Path | None:
    if not (isinstance(record, dict) and record.get("written") is True and isinstance(record.get("file"), str)
            and isinstance(record.get("sha256"), str)):
        return None
    return (run_dir / record["file"]).resolve()


def proof(path: Path, writer: Any) -> tuple[Path, str] | None:
    """(the run directory recording `path` as written by it: the writer named in the file, else its directory; the
    sha256 recorded), None when neither records it; TrunkCacheError when the file's sha256 differs."""
    candidates = [Path(writer)] if isinstance(writer, str) and writer else []
    candidates.append(path.parent)
    for run_dir in dict.fromkeys(c.resolve() for c in candidates):
        if not (run_dir / RUN_META_FILE).is_file():
            continue
        try:
            record = read_run_meta(run_dir).data.get(RECORD_KEY)
        except (RunMetaError, MissingFileError, OSError):  # metadata that cannot be read proves nothing
            continue
        if _recorded_file(run_dir, record) != path.resolve():
            continue
        actual = sha256_file(path)
        if actual != record["sha256"]:
            raise TrunkCacheError(f"{path}: sha256 {actual} differs from the {record['sha256']} that "
                                  f"{run_dir / RUN_META_FILE} recorded when its run wrote the file: its states "
                                  "changed after that run; delete it to recompute (or rerun that run)")
        return run_dir, actual
    return None
