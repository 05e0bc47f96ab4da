"""The reader's span head: the best-span-vs-no-answer margin on a hand-computed case, token targets of answer
spans (and no answer at [CLS]), a checkpoint that loads as a standard transformers question-answering model with
the same start/end logits, and a multi-source pre-training (SQuAD + chat) with held-out AUROC per source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.tiny_bert import tiny_bert

FIXTURES = Path(__file__).parents[2] / "helpers" / "fixtures" / "reading"


def test_span_margin_is_best_span_minus_no_answer():
    import torch

    from tiermem.models.cross_encoder import span_scores

    # tokens: [CLS] q [SEP] t1 t2 t3 [SEP]; text tokens 3..5
    start = torch.tensor([[1.0, 9.0, 0.0, 2.0, 0.5, 0.0, 9.0]])
    end = torch.tensor([[1.0, 9.0, 0.0, 0.0, 3.0, 1.0, 9.0]])
    mask = torch.tensor([[False, False, False, True, True, True, False]])
    margin, s, e = span_scores(start, end, mask, max_tokens=30)
    # best: start t1 (2.0) + end t2 (3.0) = 5.0; no answer 1.0 + 1.0; the question's and [SEP]'s 9s are not text
    assert margin.item() == pytest.approx(3.0) and (s.item(), e.item()) == (3, 4)
    margin, s, e = span_scores(start, end, mask, max_tokens=1)  # one-token spans only: t2+t2 = 3.5
    assert margin.item() == pytest.approx(1.5) and (s.item(), e.item()) == (4, 4)
    empty = torch.zeros_like(mask)
    assert span_scores(start, end, empty)[0].item() < -10  # nothing to point at: far below any trained margin


def test_span_token_targets(tmp_path):
    from router_train.reader.finetune import span_targets
    from tiermem.models.cross_encoder import CrossEncoder

    reader = CrossEncoder.load(tiny_bert(tmp_path / "tiny"), span_head=True)
    pairs = [("Where did Mia meet Sam?", "Mia: I met Sam at the park yesterday", 1.0, (15, 26)),
             ("Where did Mia meet Sam?", "Mia: I met Sam yesterday", 0.0, None)]
    enc = reader.tokenizer([p[0] for p in pairs], [p[1] for p in pairs], return_offsets_mapping=True)
    (s, e), nothing = span_targets(enc, pairs)
    tokens = reader.tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    assert tokens[s: e + 1] == ["at", "the", "park"] and nothing == (0, 0)


def test_the_checkpoint_loads_as_a_question_answering_model(tmp_path):
    import torch
    from transformers import AutoModelForQuestionAnswering

    from tiermem.models.cross_encoder import CrossEncoder

    reader = CrossEncoder.load(tiny_bert(tmp_path / "tiny"), span_head=True)
    reader.save(tmp_path / "out")
    again = CrossEncoder.load(tmp_path / "out")
    assert again.has_spans
    qa = AutoModelForQuestionAnswering.from_pretrained(str(tmp_path / "out")).eval()
    enc = again.encode(["Where did Mia meet Sam?"], ["Mia: I met Sam at the park yesterday"])
    with torch.no_grad():
        out = qa(**enc)
        _, start, end = again.forward(enc)  # from_pretrained loads in eval mode
    assert torch.allclose(out.start_logits, start) and torch.allclose(out.end_logits, end)
    (s, e, margin), = again.best_spans(["Where did Mia meet Sam?"], ["Mia: I met Sam at the park yesterday"])
    assert 0 <= s < e <= len("Mia: I met Sam at the park yesterday") and margin == margin  # finite, in the text
    assert not CrossEncoder.load(tiny_bert(tmp_path / "plain")).has_spans  # a classifier-only checkpoint


def test_pretraining_reads_every_source_and_reports_each(tmp_path, monkeypatch):
    from router_train.reader.pretrain import PRETRAIN_FILE, main
    from tiermem.models.cross_encoder import CrossEncoder

    monkeypatch.setenv("TIERMEM_CACHE", str(tmp_path / "cache"))
    base = tiny_bert(tmp_path / "tiny")
    chat = f"chat_data=[molweni:{FIXTURES / 'molweni_small.json'},friendsqa:{FIXTURES / 'friendsqa_small.json'}]"
    args = [f"data={FIXTURES / 'squad2_small.json'}", f"base={base}", "heldout_articles=1", "heldout_dialogues=1",
            "batch_size=8", "learning_rate=1e-3", "erased_negatives=true", chat]
    assert main([*args, f"output_dir={tmp_path / 'a'}"]) == 0
    meta = json.loads((tmp_path / "a" / PRETRAIN_FILE).read_text())
    by_source = meta["heldout"]["by_source"]
    assert set(by_source) == {"squad", "molweni", "friendsqa"}
    assert set(meta["heldout_by_source"]["molweni"]) <= {"molweni:0", "molweni:1"}
    assert all(0.0 <= v <= 1.0 for row in by_source.values() for k, v in row.items()
               if k.endswith("auroc") and v is not None)
    assert "span_pair_auroc" in by_source["squad"] and CrossEncoder.load(tmp_path / "a").has_spans
    # the key covers every source: another chat file is another entry, not a hit
    other = tmp_path / "molweni_other.json"
    doc = json.loads((FIXTURES / "molweni_small.json").read_text())
    doc["data"]["dialogues"][1]["qas"][0]["question"] = "What does bo propose ?"
    other.write_text(json.dumps(doc))
    swapped = [a if not a.startswith("chat_data") else chat.replace(str(FIXTURES / "molweni_small.json"), str(other))
               for a in args]
    assert main([*swapped, f"output_dir={tmp_path / 'b'}"]) == 0
    assert not json.loads((tmp_path / "b" / PRETRAIN_FILE).read_text()).get("cache_key") == meta["cache_key"]
