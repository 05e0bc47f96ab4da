"""`tiermem-router answer-floor reader=DIR`: the extractive answerer's floor calibrated on conversations."""

from __future__ import annotations

import json
import random
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tiermem.settings.config import AT_LEAST_ONE, check_declared
from tiermem.settings.errors import ConfigError, DataError, MissingFileError, stage_main

METHOD = ("chat: youden on the best sentence's logit; LoCoMo train questions whose gold turn is among the turns "
          "research ranks vs those whose is not, and Molweni's unanswerable questions")


@dataclass
class ChatFloorConfig:
    reader: str = "runs/reader_pretrain"  # the reader directory (a reader-pretrain checkpoint or a unit-reader run)
    data: str = "../shared/data/locomo10_dev.json"  # the development conversations; "" = the shipped sample
    # the conversations calibrated on: the train split of configs/label/locomo_cpu_evidence.yaml; [] = all in `data`
    conversations: list[str] = field(default_factory=lambda: ["conv-26", "conv-41", "conv-43", "conv-44"])
    molweni: str = "../shared/data/molweni_mrc_test.json"  # Molweni MRC JSON; "" or absent = LoCoMo alone
    max_questions: int = field(default=240, metadata={"ge": 0})  # conversation questions sampled (seeded); 0 = all
    # Molweni unanswerable questions sampled (seeded); 0 = all
    max_molweni: int = field(default=160, metadata={"ge": 0})
    turn_k: int = field(default=36, metadata=AT_LEAST_ONE)  # the turns research ranks per question (memory.turn_k)
    seed: int = 0
    force: bool = False  # recalibrate even when the stored floor is for these weights and settings

    def __post_init__(self) -> None:
        if not self.reader:
            raise ConfigError("reader must name a reader directory")
        check_declared(self)


def _sample(items: list[Any], n: int, seed: int) -> list[Any]:
    return items if n == 0 or len(items) <= n else random.Random(seed).sample(items, n)


def conversation_items(cfg: ChatFloorConfig) -> list[tuple[str, list[str], bool]]:
    """(question, the sentences research would rank for it, a gold turn among them) for the conversations."""
    from tiermem.data.conversations import load_conversations
    from tiermem.memory.raw_store import paginate, whitespace_tokens
    from tiermem.memory.turns import TurnIndex
    from tiermem.text.sentences import sentence_spans

    convs = load_conversations(cfg.data or None)
    if cfg.conversations:
        missing = [c for c in cfg.conversations if c not in {x.conv_id for x in convs}]
        if missing and cfg.data:
            raise DataError(f"answer-floor: conversations {missing} are not in {cfg.data}")
        convs = [c for c in convs if c.conv_id in cfg.conversations] or convs  # the shipped sample: all of them
    asked = _sample([(c, q) for c in convs for q in c.questions if q.evidence], cfg.max_questions, cfg.seed)
    indexes = {c.conv_id: TurnIndex(paginate(c.conv_id, c.turns, whitespace_tokens, 10**9)) for c in convs}
    out = []
    for conv, q in asked:
        hits = indexes[conv.conv_id].rank(q.question, None, cfg.turn_k)
        texts = [_view(h.turn, s, e) for h in hits for s, e in sentence_spans(h.turn.text)]
        out.append((q.question, texts, any(h.turn.turn_id in set(q.evidence) for h in hits)))
    return out


def _view(turn: Any, start: int, end: int) -> str:
    from tiermem.memory.summaries import absolutize, day_of

    return ": ".join(x for x in (day_of(turn.timestamp), turn.speaker,
                                 absolutize(turn.text[start:end], turn.timestamp)) if x)


def molweni_items(path: str, n: int, seed: int) -> list[tuple[str, list[str], bool]]:
    """(question, every sentence of its dialogue as `speaker: sentence`, False) for Molweni's unanswerable ones."""
    from router_train.reader.chat_reading import read_molweni
    from router_train.reader.checks import check_reading_questions
    from tiermem.text.sentences import sentence_spans

    dialogues = read_molweni(path)
    check_reading_questions([q for d in dialogues for q in d.questions], path)  # as reader-pretrain checks them
    items = []
    for dialogue in dialogues:
        texts = [f"{who}: {what[s:t]}" for who, what in dialogue.turns for s, t in sentence_spans(what)]
        items += [(q.question, texts, False) for q in dialogue.questions if not q.answerable]
    return _sample(items, n, seed)


def best_logits(reader: Any, items: list[tuple[str, list[str], bool]]) -> list[float]:
    """Each item's best logit over its sentences, every pair scored in shared batches (-inf for nothing read)."""
    flat = [(i, q, t) for i, (q, texts, _) in enumerate(items) for t in texts]
    logits = reader.logits([p[1] for p in flat], [p[2] for p in flat]) if flat else []
    best = [float("-inf")] * len(items)
    for (i, _, _), v in zip(flat, logits, strict=True):
        best[i] = max(best[i], float(v))
    return best


def settings(cfg: ChatFloorConfig) -> dict[str, Any]:
    """What the floor depends on besides the weights: a stored floor with other settings is recalibrated."""
    return {k: v for k, v in asdict(cfg).items() if k not in ("reader", "force")}


def calibrate_on_chats(cfg: ChatFloorConfig, reader: Any = None) -> dict[str, Any]:
    """Score the chat questions with the reader in `cfg.reader` (or `reader`, already loaded) and write its floor;
    a directory that is not a reader-pretrain or unit-reader run is refused before anything is read."""
    from tiermem.runs.rundir import updating_run

    with updating_run(cfg.reader, "answer-floor", kinds=("reader-pretrain", "unit-reader")):
        return _calibrate(cfg, Path(cfg.reader), reader)


def _calibrate(cfg: ChatFloorConfig, reader_dir: Path, reader: Any) -> dict[str, Any]:
    from router_train.reader.answer_floor import calibrated_floor, current_floor, write_floor

    if reader is None:  # the loader `ask` uses: a reader `ask` would refuse is never calibrated
        from tiermem.models.model_dir import load_reader
        from tiermem.models.specs import setup_cpu_threads

        setup_cpu_threads()
        reader = load_reader(reader_dir, "reader=")
    elif not (reader_dir / "model.safetensors").is_file():
        raise MissingFileError(f"answer-floor: no reader at {reader_dir} (model.safetensors)")
    stored = None if cfg.force else current_floor(reader_dir)
    if stored and stored.get("method") == METHOD and stored.get("settings") == settings(cfg):
        return {**stored, "current": True}
    items = conversation_items(cfg)
    counts = {"conversation_questions": len(items), "conversation_answerable": sum(a for _, _, a in items)}
    molweni = cfg.molweni if cfg.molweni and Path(cfg.molweni).is_file() else ""
    if cfg.molweni and not molweni:
        print(f"answer-floor: no Molweni data at {cfg.molweni!r}; calibrating on the conversations alone")
    unanswerable = molweni_items(molweni, cfg.max_molweni, cfg.seed) if molweni else []
    counts["molweni_unanswerable"] = len(unanswerable)
    items += unanswerable
    floor = calibrated_floor(best_logits(reader, items), [a for _, _, a in items])
    floor.update({"method": METHOD, "settings": settings(cfg), **counts})
    return write_floor(reader_dir, floor)


@stage_main("answer-floor")
def main(argv: list[str]) -> int:
    from tiermem.settings.config import parse_cli

    cfg = parse_cli(ChatFloorConfig, argv)
    floor = calibrate_on_chats(cfg)
    if floor.get("current"):
        print(f"answer-floor: {cfg.reader}/answer_floor.json is current (floor {floor['floor']}, same weights and "
              "settings); force=true recalibrates")
    else:
        print(json.dumps(floor, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
