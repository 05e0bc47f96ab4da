"""A model directory checked before it is loaded (`load_reader`: config, tokenizer, weights of the config's shape,
finite), a ModelDirError naming directory and file otherwise (docs/probes.md), and `refuse_output_over_input`."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tiermem.runs.safe_io import read_json_state
from tiermem.settings.errors import RouterLoadError, RunDirError

TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model")
VOCAB_SLACK = 0.02  # a config may pad its vocabulary rows past the tokenizer's (to a multiple of 64, ...)
_IGNORED_EXTRA = ("position_ids",)  # buffers older checkpoints saved and models no longer keep


class ModelDirError(RouterLoadError):
    """A model directory that cannot be loaded as it is: a file missing, unreadable or not fitting the others."""


def model_dir(spec: str | Path, what: str) -> Path:
    """The directory a model spec names, with config.json and weights; `what` names the setting (`base=`)."""
    from tiermem.models.specs import resolve_model

    if not str(spec).strip():
        raise ModelDirError(f"{what} is empty; give a model directory or spec (an empty path would be the working "
                            "directory)")
    path = resolve_model(str(spec))
    if not path.is_dir():
        raise ModelDirError(f"{what}{spec}: {path} is not a directory")
    config = path / "config.json"
    if not config.is_file():
        raise ModelDirError(f"{what}{spec}: {config} not found: not a model directory (a reader-pretrain checkpoint, "
                            "a unit-reader run or a saved transformers model)")
    read_json_state(config, ModelDirError, f"model config ({what}{spec})", "rebuild or re-download the model")
    if not any((path / name).is_file() for name in ("model.safetensors", "pytorch_model.bin",
                                                    "model.safetensors.index.json")):
        raise ModelDirError(f"{what}{spec}: no weights in {path} (model.safetensors or pytorch_model.bin)")
    return path


def _tokenizer_size(path: Path, what: str) -> int:
    from transformers import AutoTokenizer

    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ModelDirError(f"{what}{path}: no tokenizer files ({', '.join(TOKENIZER_FILES)}); a model is read only "
                            "with its own tokenizer: copy its tokenizer files in (tokenizer.save_pretrained)")
    try:
        return len(AutoTokenizer.from_pretrained(str(path)))
    except Exception as exc:  # a tokenizer file transformers cannot read: which directory, and why
        raise ModelDirError(f"{what}{path}: its tokenizer files cannot be loaded ({type(exc).__name__}: {exc})"
                            ) from None


def _expected_weights(path: Path, num_labels: int) -> tuple[dict[str, tuple[int, ...]], str, Any]:
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    config = AutoConfig.from_pretrained(str(path))
    config.num_labels = num_labels  # set after loading: a span-head checkpoint's config says 2 (start, end)
    with torch.device("meta"):
        model = AutoModelForSequenceClassification.from_config(config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}, model.base_model_prefix, config


def _stored_weights(weights: Path, what: str) -> dict[str, tuple[int, ...]]:
    """Each weight's shape in `weights`, every tensor checked finite (one NaN in the span head makes every span margin
    NaN, one Inf in the classifier a floor of -Infinity); an unreadable or non-finite file is a ModelDirError."""
    import pickle

    from safetensors import SafetensorError

    kind = "safetensors file" if weights.suffix == ".safetensors" else "PyTorch weights file (read with weights_only)"
    stat = weights.stat()
    try:
        found, bad = _read_weights(weights, (stat.st_mtime_ns, stat.st_size))
    except (SafetensorError, OSError, pickle.UnpicklingError, RuntimeError, ValueError, EOFError) as exc:
        # a pickle needing more than tensors is refused by weights_only before any of its code runs
        raise ModelDirError(f"{what}{weights}: not a readable {kind} ({type(exc).__name__}: {str(exc)[:200]}); "
                            "rebuild or re-download the model, or save it as model.safetensors") from None
    if bad:
        raise ModelDirError(f"{what}{weights}: {len(bad)} weight(s) hold NaN or infinite values "
                            f"({', '.join(bad[:3])}): the model diverged or the file was altered; retrain or "
                            "re-download it")
    return found


@functools.lru_cache(maxsize=16)
def _read_weights(weights: Path, state: tuple[int, int]) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    # cached per state of the file: a stage that checks a directory, then loads it, reads each tensor once
    import torch
    from safetensors import safe_open

    if weights.suffix == ".safetensors":
        with safe_open(str(weights), "pt") as fh:
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 (not a dict)
    else:
        tensors = torch.load(str(weights), map_location="cpu", weights_only=True)
        if not isinstance(tensors, dict) or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
            raise ValueError("not a mapping of weight names to tensors")
    bad = sorted(k for k, v in tensors.items() if v.is_floating_point() and not bool(torch.isfinite(v).all()))
    return {k: tuple(v.shape) for k, v in tensors.items()}, bad


def _check_weights_fit(path: Path, what: str, head_optional: bool, num_labels: int = 1) -> Any:
    """Every weight the config's model needs in the weights file, of the config's shape, finite; returns the config."""
    try:
        expected, prefix, config = _expected_weights(path, num_labels)
    except Exception as exc:  # an unknown model_type, a config field of the wrong type
        raise ModelDirError(f"{what}{path}: config.json does not describe a model transformers can build "
                            f"({type(exc).__name__}: {exc})") from None
    weights = next((path / n for n in ("model.safetensors", "pytorch_model.bin") if (path / n).is_file()), None)
    if weights is None:
        return config  # sharded weights (model.safetensors.index.json): left to transformers (wrapped by load_reader)
    found = _stored_weights(weights, what)
    strip = f"{prefix}."
    found = {k[len(strip):] if k.startswith(strip) else k: v for k, v in found.items()}
    base = {k[len(strip):]: v for k, v in expected.items() if k.startswith(strip)}
    head = {k: v for k, v in expected.items() if not k.startswith(strip)}
    # the reader's optional span head (tiermem.models.cross_encoder.SPAN_KEYS): checked when present, never required
    span = {"qa_outputs.weight": (2, config.hidden_size), "qa_outputs.bias": (2,)}
    missing = sorted(k for k in base if k not in found)
    if not head_optional or any(k in found for k in head):
        missing += sorted(k for k in head if k not in found)
    wrong = sorted(k for k, v in {**base, **head, **span}.items() if k in found and found[k] != v)
    extra = sorted(k for k in found if k not in base and k not in head and k not in span
                   and not k.endswith(_IGNORED_EXTRA))
    if missing or wrong or extra:
        shown = "; ".join(part for part in (
            f"missing {len(missing)} weight(s) ({', '.join(missing[:3])})" if missing else "",
            f"{len(wrong)} of another shape ({', '.join(wrong[:3])})" if wrong else "",
            f"{len(extra)} the config has no place for ({', '.join(extra[:3])})" if extra else "") if part)
        raise ModelDirError(f"{what}{path}: config.json does not fit {weights.name}: {shown}")
    return config


def check_model_dir(spec: str | Path, what: str = "", head_optional: bool = False) -> Path:
    """The checks of the module docstring; returns the model's directory."""
    path = model_dir(spec, what)
    config = _check_weights_fit(path, what, head_optional)
    size, vocab = _tokenizer_size(path, what), getattr(config, "vocab_size", None)
    if isinstance(vocab, int) and not vocab * (1 - VOCAB_SLACK) <= size <= vocab:
        raise ModelDirError(f"{what}{path}: its tokenizer has {size} tokens, its config.json vocab_size {vocab}: "
                            "not the model's own tokenizer (copy the tokenizer files of the model it was saved from)")
    return path


def load_reader(spec: str | Path, what: str = "", batch_size: int = 64, head_optional: bool = False,
                span_head: bool = False) -> Any:
    """A checked model directory loaded as the reader (CrossEncoder); a load that still fails is a ModelDirError."""
    from tiermem.models.cross_encoder import CrossEncoder

    path = check_model_dir(spec, what, head_optional)
    try:
        return CrossEncoder.load(path, batch_size=batch_size, span_head=span_head)
    except (OSError, ValueError, RuntimeError, KeyError, TypeError) as exc:
        raise ModelDirError(f"{what}{path}: the model could not be loaded ({type(exc).__name__}: {exc})") from None


def _within(a: Path, b: Path) -> bool:
    return a == b or b in a.parents


def refuse_output_over_input(output_dir: str | Path, stage: str,
                             inputs: Mapping[str, str | Path | list[str] | None], cache: Path | None = None) -> None:
    """A stage's output directory may not be (or hold, or sit inside) a directory it reads a model or data from,
    nor the model cache: its writes would replace what it is reading, or sit among the cache's entries."""
    if not str(output_dir).strip():
        return  # the claim names an empty output_dir
    out = Path(output_dir).expanduser().resolve()
    named = [(name, item) for name, given in inputs.items()
             for item in (given if isinstance(given, list) else [given])]  # `data: [a, b]`: each dataset
    for name, given in named:
        if given is None or not str(given).strip() or not Path(given).expanduser().exists():
            continue
        source = Path(given).expanduser().resolve()
        if _within(out, source) or _within(source, out):
            raise RunDirError(f"{stage}: output_dir={output_dir} {'is' if out == source else 'overlaps'} its input "
                              f"{name}={given} ({source}); the run would overwrite what it reads: choose another "
                              "output_dir")
    if cache is not None:
        root = cache.expanduser().resolve()
        if _within(out, root) or _within(root, out):
            where = "is" if out == root else "is inside" if _within(out, root) else "holds"
            raise RunDirError(f"{stage}: output_dir={output_dir} {where} the model cache "
                              f"{root} (TIERMEM_CACHE); its entries are the stage's to manage: choose another "
                              "output_dir")
