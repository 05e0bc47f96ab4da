"""Eval per domain: every router scored again on each domain's records alone (replayed, not asked again), with
the paired difference main - each other router; one domain: no per-domain section."""

import json

import pytest

from evaluation import evaluate as E
from evaluation.domains import main_minus, split_by_domain
from router_train import fit_features
from tests.helpers.domain_data import domain_dataset
from tiermem.stats import auroc


def test_eval_on_two_domains_reports_each_beside_the_pool(tmp_path):
    a, b = domain_dataset(tmp_path, "locomo", 0), domain_dataset(tmp_path, "realmem", 1)
    data = json.dumps([str(a), str(b)])
    for kind, out in (("features", "features"), ("top1-score", "top1")):
        assert fit_features.main([f"kind={kind}", f"data={data}", f"output_dir={tmp_path / out}"]) == 0
    out = tmp_path / "eval"
    assert E.main([f"data={data}", f"output_dir={out}", "router.kind=top1-score", f"router.path={tmp_path / 'top1'}",
                   "bootstrap.n_boot=50", "compare=" + json.dumps(
                       [{"name": "features", "kind": "features", "path": str(tmp_path / "features")}])]) == 0
    report = json.loads((out / "eval.json").read_text())
    by_domain = report["by_domain"]
    assert sorted(by_domain) == ["locomo", "realmem"]
    preds = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    for domain, entry in by_domain.items():
        assert entry["n"] == 60 and entry["n_conversations"] == 4
        rows = [p for p in preds if p["router"] == "routed" and p["conv_id"].startswith(domain)]
        by_hand = auroc([p["score"] for p in rows], [p["label"] == "ESCALATE" for p in rows])
        assert entry["routers"]["routed"]["auroc"]["estimate"] == pytest.approx(by_hand)
        diff = main_minus(entry, "features")
        assert diff["estimate"] == pytest.approx(
            by_hand - entry["routers"]["features"]["auroc"]["estimate"])
        assert diff["lo"] <= diff["estimate"] <= diff["hi"]
    md = (out / "eval.md").read_text()
    assert "### Per domain" in md and "| realmem | features |" in md
    one = tmp_path / "eval_one"
    assert E.main([f"data={a}", f"output_dir={one}", "router.kind=top1-score", f"router.path={tmp_path / 'top1'}",
                   "bootstrap.n_boot=0"]) == 0
    assert json.loads((one / "eval.json").read_text())["by_domain"] is None
    assert "### Per domain" not in (one / "eval.md").read_text()


def test_records_without_a_source_are_one_unknown_domain():
    assert list(split_by_domain([{"qid": "1"}, {"qid": "2", "source": "realmem"}])) == ["realmem", "unknown"]
