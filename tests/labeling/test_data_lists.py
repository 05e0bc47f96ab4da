"""`data: [a, b]`: several labeled datasets pooled split by split, each record keeping its domain (`source`)."""

import pytest

from labeling.dataset import RecordError, data_label, data_paths, domain_of, load_dataset_dict, load_split, same_data
from tests.helpers.domain_data import domain_dataset
from tiermem.settings.config import ConfigError


def test_a_list_pools_each_split_and_keeps_each_records_domain(tmp_path):
    a, b = domain_dataset(tmp_path, "locomo", 0), domain_dataset(tmp_path, "realmem", 1, n_points=2)
    pooled = load_split([str(a), str(b)], "validation")
    assert len(pooled) == len(load_split(str(a), "validation")) + len(load_split(str(b), "validation"))
    assert [domain_of(r) for r in pooled] == ["locomo"] * 60 + ["realmem"] * 60
    whole = load_dataset_dict([str(a), str(b)])
    assert sorted(whole) == ["test", "train", "validation"] and len(whole["train"]) == 120
    assert set(whole["test"]["source"]) == {"locomo", "realmem"}
    assert whole["train"]["n_points"] == [None] * 60 + [2] * 60  # a field of one dataset only is kept
    assert data_label([str(a), str(b)]) == f"[{a}, {b}]" and data_label(str(a)) == str(a)


def test_a_dataset_named_twice_or_a_question_in_two_datasets_is_refused(tmp_path):
    a = domain_dataset(tmp_path, "locomo", 0)
    with pytest.raises(ConfigError, match="more than once"):
        load_split([str(a), str(a)], "train")
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(a, copy)
    with pytest.raises(RecordError, match="duplicate record"):
        load_split([str(a), str(copy)], "train")
    for bad in ([], [""], [3], None):
        with pytest.raises(ConfigError):
            data_paths(bad)


def test_same_data_compares_the_lists_in_order(tmp_path):
    a, b = str(domain_dataset(tmp_path, "x", 0)), str(domain_dataset(tmp_path, "y", 1))
    assert same_data([a, b], [a, b]) and not same_data([a, b], [b, a]) and not same_data(a, [a, b])
    assert same_data(a, str(tmp_path / "label_x" / ".." / "label_x" / "dataset"))


def test_every_training_and_eval_config_takes_a_list(tmp_path):
    from evaluation.calibrate import CalibrateConfig
    from evaluation.evaluate import EvalConfig
    from router_train.fit_features import FitFeaturesConfig
    from router_train.lm.sft import SFTRecipeConfig
    from router_train.reader.unit_reader import UnitReaderConfig
    from tiermem.settings.config import parse_cli

    for cls in (FitFeaturesConfig, UnitReaderConfig, SFTRecipeConfig, CalibrateConfig, EvalConfig):
        assert parse_cli(cls, ["data=[x/dataset, y/dataset]"]).data == ["x/dataset", "y/dataset"]
        assert parse_cli(cls, ["data=x/dataset"]).data == "x/dataset"
        with pytest.raises(ConfigError):
            parse_cli(cls, ["data=[]"])
