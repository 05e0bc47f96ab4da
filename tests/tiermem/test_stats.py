"""tiermem.stats: hand-checked ranking metrics, bootstrap coverage, and agreement with metrics.sweep."""

import math
import random

import numpy as np
import pytest

from evaluation import metrics as M
from evaluation import sweep as SW
from tiermem import stats as S

SCORES = [0.9, 0.8, 0.8, 0.3, 0.1]
POS = [True, False, True, False, True]


def test_auroc_matches_a_hand_computation_with_ties():
    # positives 0.9, 0.8, 0.1; negatives 0.8, 0.3. Pairs won: (0.9,0.8) (0.9,0.3) (0.8,0.3) = 3,
    # tied (0.8,0.8) = 1/2, lost (0.1,0.8) (0.1,0.3) = 0  ->  3.5 / 6
    assert S.auroc(SCORES, POS) == pytest.approx(3.5 / 6)
    assert S.auroc([1, 2, 3, 4], [False, False, True, True]) == 1.0
    assert S.auroc([5, 5, 5, 5], [False, True, True, False]) == 0.5  # all tied: chance
    with pytest.raises(ValueError, match="both classes"):
        S.auroc([1, 2], [True, True])


def test_average_precision_matches_a_hand_computation():
    # ranked groups: 0.9 (P) -> precision 1; 0.8 (P+N) -> 2/3; 0.3 (N); 0.1 (P) -> 3/5
    assert S.average_precision_reps(SCORES, POS, S.ones(len(SCORES)))[0] == pytest.approx((1 + 2 / 3 + 3 / 5) / 3)


def test_reliability_and_ece_by_hand():
    p = [0.05, 0.15, 0.85, 0.95]
    y = [False, True, True, True]
    rel = S.reliability(p, y, bins=2)  # bins [0, .5): mean p .1, observed .5; [.5, 1]: mean p .9, observed 1
    assert [b["n"] for b in rel["curve"]] == [2, 2]
    assert rel["ece"] == pytest.approx(0.5 * abs(0.5 - 0.1) + 0.5 * abs(1.0 - 0.9))


def test_apgr_agrees_with_metrics_sweep():
    rng = random.Random(0)
    recs = []
    for i in range(80):
        s_ok, r_ok = rng.random() < 0.3, rng.random() < 0.8
        recs.append({"qid": str(i), "label": "ANSWER" if s_ok else ("ESCALATE" if r_ok else None),
                     "s_ok": s_ok, "r_ok": r_ok, "cost_summary_input_tokens": 100, "cost_research_input_tokens": 900,
                     "cost_summary_wall_s": 1, "cost_research_wall_s": 5})
    cases = M.load_cases(recs).cases
    scores = [round(rng.gauss(0, 1), 1) for _ in cases]  # rounded: ties exercised
    want = SW.sweep(cases, scores).apgr
    got = S.apgr_reps(scores, [c.s_ok for c in cases], [c.r_ok for c in cases], S.ones(len(cases)))[0]
    assert got == pytest.approx(want)


def test_bootstrap_counts_resample_whole_clusters():
    clusters = ["a"] * 3 + ["b"] * 5 + ["c"] * 2
    counts = S.bootstrap_counts(clusters, n_boot=200, seed=1)
    assert counts.shape == (200, 10)
    # every replicate draws 3 clusters' worth of questions: its total is a sum of 3 cluster sizes
    sizes = {3, 5, 2}
    totals = {int(t) for t in counts.sum(axis=1)}
    possible = {a + b + c for a in sizes for b in sizes for c in sizes}
    assert totals <= possible and len(totals) > 3
    assert (S.bootstrap_counts(clusters, 5, seed=7) == S.bootstrap_counts(clusters, 5, seed=7)).all()  # seeded


def test_cluster_bootstrap_intervals_cover_at_about_the_nominal_rate():
    """Clustered Bernoulli data (cluster success rates vary): the 95% interval of the mean covers the population
    mean in about 95% of simulated samples (the two-stage bootstrap is slightly conservative)."""
    mu, sims, covered = 0.4, 200, 0
    widths_naive, widths_cluster = [], []
    for seed in range(sims):
        rng = np.random.default_rng(seed)
        k, m = 25, 12
        p = rng.beta(2 * mu / 0.6, 2 * (1 - mu) / 0.6, size=k)  # mean mu, strong between-cluster spread
        y = (rng.random((k, m)) < p[:, None]).astype(float).ravel()
        clusters = np.repeat(np.arange(k), m)
        reps = S.weighted_mean(y, S.bootstrap_counts(clusters.tolist(), n_boot=300, seed=seed))
        iv = S.interval(float(y.mean()), reps)
        covered += iv["lo"] <= mu <= iv["hi"]
        widths_cluster.append(iv["hi"] - iv["lo"])
        naive = S.weighted_mean(y, S.bootstrap_counts(list(range(len(y))), n_boot=300, seed=seed))
        lo, hi = np.percentile(naive, [2.5, 97.5])
        widths_naive.append(hi - lo)
    assert 0.9 <= covered / sims <= 0.995
    # ignoring the clusters would understate the uncertainty of clustered data
    assert np.mean(widths_cluster) > 1.3 * np.mean(widths_naive)


def test_paired_differences_of_a_router_with_itself_are_zero():
    counts = S.bootstrap_counts(["a", "a", "b", "b", "c"], 50, 0)
    a = S.auroc_reps(SCORES, POS, counts)
    assert np.allclose(np.nan_to_num(a - a), 0.0)


def test_interval_handles_undefined_replicates():
    iv = S.interval(0.5, np.array([np.nan, 0.4, 0.6, 0.5]))
    assert iv["n_boot"] == 3 and iv["lo"] < 0.5 < iv["hi"]
    assert S.interval(None, np.array([0.1])) is None
    assert S.interval(0.5, np.array([np.nan]))["lo"] is None
    assert not math.isnan(S.weighted_ratio([1, 0], [1, 1], S.ones(2))[0])
