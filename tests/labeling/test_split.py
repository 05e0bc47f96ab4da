import pytest

from labeling.split import SplitSpec, assign_splits, check_records_disjoint

CONVS = [f"conv-{i}" for i in range(10)]


def test_ratio_split_is_seeded_disjoint_and_covers_all():
    a = assign_splits(CONVS, SplitSpec(ratios=[0.6, 0.2, 0.2], seed=1))
    b = assign_splits(list(reversed(CONVS)), SplitSpec(ratios=[0.6, 0.2, 0.2], seed=1))
    c = assign_splits(CONVS, SplitSpec(ratios=[0.6, 0.2, 0.2], seed=2))
    assert a == b  # input order does not matter, the seed does
    assert a != c
    assert sorted(a) == CONVS
    assert sorted(a.values()).count("train") == 6 and list(a.values()).count("test") == 2


def test_small_ratio_split_gives_every_split_a_conversation():
    a = assign_splits(CONVS[:3], SplitSpec(ratios=[0.8, 0.1, 0.1]))
    assert sorted(a.values()) == ["test", "train", "validation"]
    b = assign_splits(CONVS[:4], SplitSpec(ratios=[1, 0, 0]))
    assert set(b.values()) == {"train"}


def test_explicit_lists():
    spec = SplitSpec(train=CONVS[:5], validation=CONVS[5:8], test=CONVS[8:] + ["conv-absent"])
    a = assign_splits(CONVS, spec)
    assert a["conv-0"] == "train" and a["conv-6"] == "validation" and a["conv-9"] == "test"
    with pytest.raises(ValueError, match="both train and test"):
        assign_splits(CONVS, SplitSpec(train=CONVS, test=["conv-3"]))
    with pytest.raises(ValueError, match="in no split list"):
        assign_splits(CONVS, SplitSpec(train=CONVS[:9]))


def test_bad_ratios():
    with pytest.raises(ValueError):
        SplitSpec(ratios=[0.5, 0.5])


def test_records_disjoint_guard():
    ok = [{"conv_id": "a", "split": "train"}, {"conv_id": "a", "split": "train"}, {"conv_id": "b", "split": "test"}]
    check_records_disjoint(ok)
    with pytest.raises(AssertionError, match="conversation 'a'"):
        check_records_disjoint(ok + [{"conv_id": "a", "split": "test"}])
