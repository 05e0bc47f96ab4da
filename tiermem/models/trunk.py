"""A frozen trunk: the bottom layers' output kept per sequence, so the passes of an adapter on the top layers run
only those (decoders that do not rescale `inputs_embeds`: docs/DESIGN.md)."""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from tiermem.models.torch_state import padded
from tiermem.models.trunk_file import (
    FORMAT,
    VERSION,
    TrunkCacheError,
    load_trunk_states,
    proof,
    trunk_fingerprint,
)
from tiermem.runs.safe_io import write_stream
from tiermem.settings.errors import MissingFileError, UsageError

SUPPORTED = ("llama", "qwen2", "qwen3", "mistral", "smollm3")


def decoder_of(model: Any) -> Any:
    """The inner decoder (the module holding .layers, .norm, .embed_tokens) of a plain or PEFT-wrapped causal LM."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(inner, "model", inner)
    if not hasattr(inner, "layers"):
        raise UsageError(f"{type(model).__name__}: no decoder layers found")
    return inner


TOP_LAYER_PARAMS = ("trainable", "lora")


def top_layers_holding(model: Any, params: str = "trainable") -> int | None:
    """N when every selected parameter sits in the top N decoder layers (0 < N < the number of layers), else None.
    `params`: "trainable" (requires_grad: training) or "lora" (the LoRA weights: a loaded adapter, serving's trunk)."""
    if params not in TOP_LAYER_PARAMS:
        raise ValueError(f"params must be one of {TOP_LAYER_PARAMS}, got {params!r}")
    try:
        n = len(decoder_of(model).layers)
    except ValueError:
        return None
    lowest = n
    for name, param in model.named_parameters():
        if not (param.requires_grad if params == "trainable" else "lora_" in name):
            continue
        match = re.search(r"\.layers\.(\d+)\.", name)
        if match is None:
            return None
        lowest = min(lowest, int(match.group(1)))
    return n - lowest if 0 < lowest < n else None


def supports_trunk(model: Any) -> bool:
    return getattr(model.config, "model_type", None) in SUPPORTED


@contextmanager
def _layers(inner: Any, keep: slice):
    full = inner.layers
    inner.layers = torch.nn.ModuleList(list(full)[keep])
    try:
        yield
    finally:
        inner.layers = full


class FrozenTrunk:
    """Memoized output of the bottom `len(layers) - top_layers` layers, keyed by the exact token sequence.
    `cache_file`: states kept between runs; `prefix_file`: another run's, read only; `writer`: this stage's run dir.
    A file is read only when its writer recorded its sha256 (trunk_file.proof): an unrecorded cache file is
    recomputed and rewritten, one another run recorded is never rewritten, an unrecorded prefix file is refused."""

    def __init__(self, model: Any, top_layers: int, batch_size: int = 8, cache_file: str | Path | None = None,
                 prefix_file: str | Path | None = None, writer: str | Path | None = None) -> None:
        if not supports_trunk(model):
            raise UsageError(f"model type {model.config.model_type!r} is not supported by the frozen trunk")
        self.inner = decoder_of(model)
        n = len(self.inner.layers)
        if not 1 <= top_layers < n:
            raise UsageError(f"top_layers must be in [1, {n - 1}], got {top_layers}")
        self.split = n - top_layers
        self.batch_size = batch_size
        self.cache: dict[tuple[int, ...], torch.Tensor] = {}
        self.misses = 0
        self.writer = str(Path(writer).resolve()) if writer else None
        self.notes: list[str] = []  # what the stage should say about the files it was given
        # Reused across stages (SFT, then the expected-reward refinement of the same adapter): the fingerprint holds
        # what the states depend on, so another base model, config or split never reads them.
        self.cache_file = Path(cache_file) if cache_file else None
        self.fingerprint = trunk_fingerprint(model, self.split, self.inner)
        self.writable = self.cache_file is not None
        self.saved: int | None = None  # sequences the cache file held when read or last written
        if self.cache_file is not None and self.cache_file.is_file():
            saved = self._read(self.cache_file, required=False)
            if saved is not None:
                self.cache = saved["states"]
                self.saved = len(self.cache)
        # Another run's states (SFT's rows, for GRPO's prompts that end where SFT's completions begin), read only:
        # the trunk is causal, so a sequence's states are the first positions of any longer sequence's states.
        self.prefix_states: dict[tuple[int, ...], torch.Tensor] = {}
        self.reused = 0
        if prefix_file is not None:
            path = Path(prefix_file)
            if not path.is_file():
                raise MissingFileError(f"{path}: no trunk-state file there (a run with loss.trunk_cache writes one)")
            self.prefix_states = self._read(path, required=True)["states"]

    def _read(self, path: Path, required: bool) -> dict[str, Any] | None:
        """The file's states, checked against this model, when its writer recorded them."""
        weight = self.inner.embed_tokens.weight
        saved = load_trunk_states(path, weight.device, weight.shape[0], weight.shape[1], weight.dtype)
        if saved["fingerprint"] != self.fingerprint:
            raise UsageError(f"{path}: trunk states of another model (its config or bottom-layer weights differ) "
                             f"or split, not this model's bottom layers; delete the file to recompute")
        found = proof(path, saved.get("writer"))
        if found is None:
            if required:
                raise TrunkCacheError(f"{path}: no run records this trunk-state file (its writer's "
                                      "tiermem_router.json holds no sha256 of it: a run stopped before its metadata, "
                                      "or a file no run wrote); give the trunk file of a finished SFT run")
            self.notes.append(f"{path}: no run records this trunk-state file (a run stopped before its metadata?): "
                              "its states are recomputed and the file rewritten")
            return None
        run_dir, _ = found
        if self.writer is not None and run_dir != Path(self.writer):
            self.writable = False  # that run's record of the file stays true: new states stay in memory
            self.notes.append(f"{path}: states read from the file {run_dir} wrote; it is left as that run recorded it")
        return saved

    def _reuse_prefixes(self, rows: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        """Fill the cache with every row that starts a longer sequence of `prefix_states` or of the cache itself (a
        report scoring the prompt of a row this run trained on); returns the rows left."""
        left = []
        by_length: dict[int, list[tuple[int, ...]]] = {}
        for r in rows:
            by_length.setdefault(len(r), []).append(r)
        for n, group in by_length.items():
            starts = {k[:n]: (source, k) for source in (self.cache, self.prefix_states) for k in source
                      if len(k) >= n}
            for r in group:
                donor = starts.get(r)
                if donor is None:
                    left.append(r)
                else:  # a view of the donor's first positions: no copy
                    self.cache[r] = donor[0][donor[1]][:n]
                    self.reused += 1
        return left

    def save(self) -> None:
        """Write the states when the cache holds sequences the file does not and the file is this run's to write."""
        if not self.writable or (self.saved == len(self.cache) and self.cache_file.is_file()):
            return
        self.cache_file.parent.mkdir(parents=True, exist_ok=True)
        header = {"format": FORMAT, "version": VERSION, "fingerprint": self.fingerprint, "writer": self.writer}
        write_stream(self.cache_file, lambda fh: torch.save({**header, "states": self.cache}, fh))
        self.saved = len(self.cache)

    @torch.no_grad()
    def _compute(self, rows: list[tuple[int, ...]]) -> None:
        device = self.inner.embed_tokens.weight.device
        captured: list[torch.Tensor] = []
        with _layers(self.inner, slice(0, self.split)):
            hook = self.inner.layers[-1].register_forward_hook(
                lambda _m, _i, out: captured.append(out[0] if isinstance(out, tuple) else out))
            try:
                for start in range(0, len(rows), self.batch_size):
                    chunk = rows[start:start + self.batch_size]
                    ids, mask = padded(chunk, 0)
                    captured.clear()
                    self.inner(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False)
                    for i, r in enumerate(chunk):  # right padding: real positions never attend to pads
                        self.cache[r] = captured[-1][i, : len(r)].detach().clone()
            finally:
                hook.remove()
        self.misses += len(rows)

    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Trunk output [B, T, D] for a padded batch (zeros at pads). A row's tokens are its unmasked positions, so
        right and left padding both work (the states are computed unpadded, from position 0)."""
        keep = attention_mask.bool()
        rows = [tuple(input_ids[b][keep[b]].tolist()) for b in range(input_ids.size(0))]
        todo = self._reuse_prefixes(list(dict.fromkeys(r for r in rows if r not in self.cache)))
        if todo:
            self._compute(todo)
        first = self.cache[rows[0]]
        out = torch.zeros(len(rows), input_ids.size(1), first.size(-1), dtype=first.dtype, device=first.device)
        for b, r in enumerate(rows):
            out[b, keep[b]] = self.cache[r]
        return out

    def logits(self, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               logits_to_keep: int | torch.Tensor = 0) -> torch.Tensor:
        """The full model's logits, running only the top layers on cached input; a left-padded batch gets each row's
        true positions, since its trunk states were computed from position 0."""
        hidden = self.hidden(input_ids, attention_mask)
        extra = {}
        if bool((attention_mask[:, 0] == 0).any()):
            extra["position_ids"] = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        with _layers(self.inner, slice(self.split, None)):
            return model(inputs_embeds=hidden, attention_mask=attention_mask, logits_to_keep=logits_to_keep,
                         use_cache=False, **extra).logits

