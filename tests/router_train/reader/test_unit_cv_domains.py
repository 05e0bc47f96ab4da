"""The unit reader's CV over two domains: each grid point keeps each domain's mean fold AUROC, and the choice
goes to the best worst domain, not the best pooled mean."""

from router_train.reader.unit_cv import choose, summary


def test_the_choice_goes_to_the_best_worst_domain():
    domains = {"a1": "locomo", "a2": "locomo", "b1": "realmem"}
    strong_on_one = summary({"a1": 0.95, "a2": 0.95, "b1": 0.50}, domains)
    even = summary({"a1": 0.75, "a2": 0.75, "b1": 0.70}, domains)
    assert strong_on_one["mean"] > even["mean"]
    assert even["by_domain"] == {"locomo": 0.75, "realmem": 0.7} and even["worst_domain"] == 0.7
    grid = [{"finetune_layers": 1, "epochs": 1, "text_weight": 1.0, "name": "strong", **strong_on_one},
            {"finetune_layers": 1, "epochs": 1, "text_weight": 1.0, "name": "even", **even}]
    assert choose({"grid": grid})["name"] == "even"
    one = {"a1": "locomo", "a2": "locomo"}  # one domain: the pooled mean, as before
    assert "by_domain" not in summary({"a1": 0.9, "a2": 0.8}, one)
    plain = [{k: v for k, v in g.items() if k not in ("by_domain", "worst_domain")} for g in grid]
    assert choose({"grid": plain})["name"] == "strong"


def test_grouped_folds_hold_validation_out_whole_and_spread_each_domain():
    """Issue 65: cv_folds k: the validation conversations are one fold (its reader trained on exactly the train
    split: the final reader), the train conversations dealt into k - 1 folds domain after domain."""
    from router_train.reader.unit_cv import fold_groups

    def rec(conv, source):
        return {"conv_id": conv, "source": source}

    records = [rec(c, "locomo") for c in ("l1", "l2", "l3", "l4", "lv")] + [
        rec(c, "realmem") for c in ("r1", "r2", "rv")]
    train = {"l1", "l2", "l3", "l4", "r1", "r2"}
    folds = fold_groups(records, train, 4)
    assert folds == [["lv", "rv"], ["l1", "l4"], ["l2", "r1"], ["l3", "r2"]]
    assert fold_groups(records, train, 0) == [[c] for c in sorted({r["conv_id"] for r in records})]
    assert fold_groups(records, train, 20) == fold_groups(records, train, 0)  # more folds than conversations
