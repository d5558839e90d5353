"""quest_geometric.analysis.stats against SciPy, NumPy and the statistics module."""
import math
import statistics

import numpy as np
import pytest
import torch
from scipy import stats as sps

from quest_geometric.analysis import stats


def test_mean_std_is_the_sample_std():
    xs = [80.0, 84.0, 83.0, 79.5]
    mean, std = stats.mean_std(xs)
    assert mean == pytest.approx(np.mean(xs)) and std == pytest.approx(np.std(xs, ddof=1))
    assert stats.mean_std(xs) == (statistics.fmean(xs), statistics.stdev(xs))
    one = stats.mean_std([3.0])
    assert one[0] == 3.0 and math.isnan(one[1])
    with pytest.raises(ValueError, match="mean_std: 'values' must be at least one value"):
        stats.mean_std([])  # issue 53: a mean of nothing is refused, not NaN


def test_finite_mean_skips_nan_and_inf():
    assert stats.finite_mean([1.0, math.nan, 3.0, math.inf]) == pytest.approx(2.0)
    assert math.isnan(stats.finite_mean([math.nan]))
    assert math.isnan(stats.finite_mean([]))


@pytest.mark.parametrize("n", range(0, 12))
def test_sign_test_equals_scipy_binomtest(n):
    for wins in range(n + 1):
        expected = 1.0 if n == 0 else sps.binomtest(wins, n, 0.5).pvalue
        assert stats.sign_test(wins, n - wins) == pytest.approx(expected, rel=1e-12), (wins, n)


def test_sign_test_hand_values_and_bad_input():
    assert stats.sign_test(5, 0) == pytest.approx(2 / 32)  # the smallest p with 5 seeds
    assert stats.sign_test(4, 1) == pytest.approx(2 * 6 / 32)
    assert stats.sign_test(0, 0) == 1.0
    for bad, err in (((-1, 2), ValueError), ((1.5, 2), TypeError), ((True, 1), TypeError),
                     ((1, -2), ValueError)):
        with pytest.raises(err, match="^sign_test: '(wins|losses)' must be an int >= 0"):
            stats.sign_test(*bad)


def test_bootstrap_interval_equals_a_numpy_percentile_of_the_same_resamples():
    values = [1.0, 2.0, -0.5, 3.0, 1.0, 0.25]
    lo, hi = stats.bootstrap_mean_interval(values, n_boot=2000, seed=7)
    # the same resamples (the documented generator and draw), summarised by NumPy
    idx = torch.randint(0, len(values), (2000, len(values)),
                        generator=torch.Generator().manual_seed(7)).numpy()
    means = np.asarray(values)[idx].mean(axis=1)
    np.testing.assert_allclose([lo, hi], np.percentile(means, [2.5, 97.5]), rtol=1e-12)
    assert min(values) <= lo <= np.mean(values) <= hi <= max(values)
    assert stats.bootstrap_mean_interval(values, n_boot=2000, seed=7) == (lo, hi)  # seeded


def test_bootstrap_interval_agrees_with_scipy_bootstrap():
    rng = np.random.default_rng(0)
    values = rng.normal(1.0, 2.0, size=40)
    lo, hi = stats.bootstrap_mean_interval(values.tolist(), n_boot=20_000, seed=0)
    ref = sps.bootstrap((values,), np.mean, n_resamples=20_000, method="percentile",
                        random_state=1).confidence_interval
    se = values.std(ddof=1) / math.sqrt(len(values))
    # two independent Monte Carlo estimates of the same percentiles
    assert abs(lo - ref.low) < 0.1 * se and abs(hi - ref.high) < 0.1 * se


def test_bootstrap_interval_bad_input():
    with pytest.raises(ValueError, match="^bootstrap_mean_interval: 'values' must be non-empty"):
        stats.bootstrap_mean_interval([])
    with pytest.raises(ValueError, match="^bootstrap_mean_interval: 'n_boot' must be an int >= 1"):
        stats.bootstrap_mean_interval([1.0], n_boot=0)
    with pytest.raises(ValueError, match=r"^bootstrap_mean_interval: 'quantiles' must be \(low, "
                                         r"high\) with 0 <= low <= high <= 1, got tuple "
                                         r"\(0.9, 0.1\)$"):
        stats.bootstrap_mean_interval([1.0, 2.0], quantiles=(0.9, 0.1))
    with pytest.raises(ValueError, match="^bootstrap_mean_interval: 'quantiles' must be"):
        stats.bootstrap_mean_interval([1.0, 2.0], quantiles=(0.1, 0.5, 0.9))
    with pytest.raises(TypeError, match="^bootstrap_mean_interval: 'quantiles' must be"):
        stats.bootstrap_mean_interval([1.0, 2.0], quantiles=0.9)


def test_paired_differences_composes_the_parts():
    a = {0: 81.0, 1: 82.0, 2: 79.5, 3: 83.0, 4: 81.0, 9: 50.0}
    r = {0: 80.0, 1: 80.0, 2: 80.0, 3: 80.0, 4: 80.0, 7: 99.0}
    pd = stats.paired_differences(a, r)
    d = [1.0, 2.0, -0.5, 3.0, 1.0]  # the common seeds 0-4
    zeros = [0.0] * 5
    assert (pd["n"], pd["wins"], pd["losses"]) == (5, 4, 1)
    assert pd["mean"] == pytest.approx(statistics.mean(d))
    assert pd["sign_p"] == pytest.approx(sps.binomtest(4, 5, 0.5).pvalue)
    ci = sps.ttest_rel(d, zeros).confidence_interval()
    assert (pd["ci_low"], pd["ci_high"]) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert pd["t_p"] == pytest.approx(sps.ttest_1samp(d, 0.0).pvalue)
    assert pd["perm_p"] == pytest.approx(stats.paired_permutation_test(d, zeros)["p"])
    one = stats.paired_differences({0: 2.0}, {0: 1.0})
    assert one["n"] == 1 and one["mean"] == 1.0 and math.isnan(one["ci_low"])
    assert one["perm_p"] == 1.0 and one["sign_p"] == 1.0
    none = stats.paired_differences({0: 1.0}, {1: 1.0})
    assert none["n"] == 0 and math.isnan(none["mean"]) and math.isnan(none["sign_p"])
    assert math.isnan(none["perm_p"]) and math.isnan(none["t_p"])


@pytest.mark.parametrize("n", [1, 5, 12, 54])
def test_binomial_interval_is_clopper_pearson(n):
    level = 0.95
    for k in range(n + 1):
        lo, hi = stats.binomial_interval(k, n, level)
        # the beta-quantile form of the exact interval
        ref_lo = 0.0 if k == 0 else sps.beta.ppf((1 - level) / 2, k, n - k + 1)
        ref_hi = 1.0 if k == n else sps.beta.ppf(1 - (1 - level) / 2, k + 1, n - k)
        assert lo == pytest.approx(ref_lo, abs=1e-9) and hi == pytest.approx(ref_hi, abs=1e-9)
        # its defining tail probabilities
        if 0 < k:
            assert sps.binom.sf(k - 1, n, lo) == pytest.approx((1 - level) / 2, rel=1e-6)
        if k < n:
            assert sps.binom.cdf(k, n, hi) == pytest.approx((1 - level) / 2, rel=1e-6)
    with pytest.raises(ValueError, match="binomial_interval: 'n' must be an int >= 1"):
        stats.binomial_interval(0, 0)  # issue 53: no trial has no interval (was NaN)


def test_least_squares_slope_equals_linregress():
    rng = np.random.default_rng(3)
    x = np.sort(rng.uniform(0, 600, 13))
    y = 0.01 * x + rng.normal(size=13)
    assert stats.least_squares_slope(x.tolist(), y.tolist()) == pytest.approx(
        sps.linregress(x, y).slope, rel=1e-10)
    assert math.isnan(stats.least_squares_slope([1.0], [2.0]))
    assert math.isnan(stats.least_squares_slope([3.0, 3.0], [1.0, 2.0]))


def test_spearman_is_the_pearson_correlation_of_ranks_over_defined_pairs():
    x = [0.3, 1.2, None, 0.7, 2.5, math.nan, 1.9, 0.1]
    y = [1.0, 0.5, 3.0, 0.8, 0.2, 1.0, 0.4, math.inf]
    rho, p, n = stats.spearman(x, y)
    keep = [(a, b) for a, b in zip(x, y) if a is not None and b is not None
            and math.isfinite(a) and math.isfinite(b)]
    assert n == len(keep) == 5
    ra = sps.rankdata([a for a, _ in keep])
    rb = sps.rankdata([b for _, b in keep])
    assert rho == pytest.approx(np.corrcoef(ra, rb)[0, 1])
    assert 0.0 <= p <= 1.0
    assert all(math.isnan(v) for v in stats.spearman([1.0, 2.0], [3.0, 4.0])[:2])  # too few
    assert all(math.isnan(v) for v in stats.spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])[:2])


def test_directional_probability_is_the_one_sided_binomial_tail():
    a, b = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2.0, 3.0, 4.0, 4.0, 4.0, 7.0]  # 4 less, 1 tie, 1 more
    res = stats.directional_probability(a, b)
    assert (res["n_seeds"], res["n_untied"], res["k_less"]) == (6, 5, 4)
    assert res["signs"] == [-1, -1, -1, 0, 1, -1]
    assert res["p_value"] == pytest.approx(sum(math.comb(5, i) for i in (4, 5)) / 32)
    assert res["mean_diff"] == pytest.approx(np.mean(np.subtract(a, b)))
    with pytest.raises(ValueError, match=r"^directional_probability: 'b' must be paired with 'a' "
                                         r"\(the same length, 1\), got 2 values$"):
        stats.directional_probability([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="^directional_probability: 'a' must be finite"):
        stats.directional_probability([math.nan], [1.0])
    with pytest.raises(TypeError, match="^directional_probability: 'a' must be a sequence of "
                                        "numbers"):
        stats.directional_probability("12", [1.0, 2.0])


# --- paired tests valid at a handful of seeds --------------------------------------------

_A = [97.5, 98.33, 97.22, 96.94, 97.5]      # the committed digits QSV seeds 0-4
_B = [95.83, 95.56, 97.22, 95.0, 98.06]     # standard attention, the same seeds


def test_paired_sign_test_counts_and_matches_binomtest():
    res = stats.paired_sign_test(_B, _A)
    # differences -1.67, -2.77, 0 (tie, dropped), -1.94, +0.56: 1 win, 3 losses
    assert (res["n"], res["wins"], res["losses"], res["ties"]) == (5, 1, 3, 1)
    assert res["p"] == pytest.approx(sps.binomtest(1, 4, 0.5).pvalue)
    assert res["p"] == pytest.approx(2 * (1 + 4) / 16)  # by hand: 2 P(X <= 1), X ~ Bin(4, 1/2)
    with pytest.raises(ValueError, match="^paired_sign_test: 'b' must be paired with 'a'"):
        stats.paired_sign_test([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="^paired_sign_test: 'a' must be finite, got NaN"):
        stats.paired_sign_test([math.nan], [1.0])
    with pytest.raises(TypeError, match="^paired_sign_test: 'a' must be a sequence of numbers"):
        stats.paired_sign_test("12", "34")
    with pytest.raises(TypeError, match="^paired_sign_test: 'b' must be a sequence of numbers"):
        stats.paired_sign_test([1.0], ["x"])


def test_paired_permutation_test_by_hand():
    # d = (1, 2, 3): |sum| = 6 is reached only by all + or all -: p = 2/8
    res = stats.paired_permutation_test([2.0, 3.0, 4.0], [1.0, 1.0, 1.0])
    assert (res["n"], res["flips"], res["mean"]) == (3, 8, pytest.approx(2.0))
    assert res["p"] == pytest.approx(2 / 8)
    # d = (1, 1, 2): sums of +-1 +-1 +-2 with |s| >= 4: (+,+,+), (-,-,-) -> 2/8; with
    # |s| >= 2 (d = (1, -1, 2)): (+,-,+)=2, (-,+,+)=2, (+,+,+)=4, (-,-,-)=-4, (+,-,-)=-2,
    # (-,+,-)=-2 -> 6/8
    assert stats.paired_permutation_test([1, 1, 2], [0, 0, 0])["p"] == pytest.approx(2 / 8)
    assert stats.paired_permutation_test([1, -1, 2], [0, 0, 0])["p"] == pytest.approx(6 / 8)
    # all differences zero: every flip ties the observed sum
    assert stats.paired_permutation_test([1.0, 2.0], [1.0, 2.0])["p"] == 1.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_paired_permutation_test_equals_scipy_exact(seed):
    rng = np.random.default_rng(seed)
    n = [5, 8, 10][seed]
    a, b = rng.normal(0.3, 1.0, n), rng.normal(0.0, 1.0, n)
    ref = sps.permutation_test((a, b), lambda x, y, axis: np.mean(x - y, axis=axis),
                               permutation_type="samples", n_resamples=np.inf,
                               alternative="two-sided").pvalue
    assert stats.paired_permutation_test(a.tolist(), b.tolist())["p"] == pytest.approx(ref)


def test_paired_permutation_test_on_the_digits_seeds():
    # standard attention vs QSV, 5 seeds: enumerated here from the flips themselves
    d = np.subtract(_B, _A)
    flips = [np.dot([1 - 2 * ((m >> i) & 1) for i in range(5)], d) for m in range(32)]
    expected = sum(abs(s) >= abs(d.sum()) - 1e-9 for s in flips) / 32
    assert stats.paired_permutation_test(_B, _A)["p"] == pytest.approx(expected)


def test_paired_permutation_test_limits():
    assert stats.MAX_EXACT_PAIRS == 20
    with pytest.raises(ValueError, match="^paired_permutation_test: 'a' must be at most 20 pairs "
                                         r"\(enumerated exactly\), got 21 pairs$"):
        stats.paired_permutation_test([0.0] * 21, [1.0] * 21)
    with pytest.raises(ValueError, match="^paired_permutation_test: 'a' must be non-empty"):
        stats.paired_permutation_test([], [])


def test_paired_t_test_equals_ttest_rel_and_the_textbook_interval():
    res = stats.paired_t_test(_B, _A)
    ref = sps.ttest_rel(_B, _A)
    d = np.subtract(_B, _A)
    se = d.std(ddof=1) / math.sqrt(5)
    half = sps.t.ppf(0.975, 4) * se
    assert res["t"] == pytest.approx(ref.statistic) and res["p"] == pytest.approx(ref.pvalue)
    assert (res["n"], res["df"]) == (5, 4)
    assert res["mean"] == pytest.approx(d.mean()) and res["se"] == pytest.approx(se)
    assert res["ci_low"] == pytest.approx(d.mean() - half)
    assert res["ci_high"] == pytest.approx(d.mean() + half)
    assert res["p"] == pytest.approx(2 * sps.t.sf(abs(d.mean() / se), 4))
    r90 = stats.paired_t_test(_B, _A, level=0.9)
    assert r90["ci_high"] - r90["ci_low"] == pytest.approx(2 * sps.t.ppf(0.95, 4) * se)


def test_paired_t_test_degenerate_and_bad_input():
    flat = stats.paired_t_test([2.0, 3.0], [1.0, 2.0])  # both differences 1
    assert flat["ci_low"] == flat["ci_high"] == 1.0 and math.isnan(flat["p"])
    with pytest.raises(ValueError, match="^paired_t_test: 'a' must be at least 2 pairs, got 1 "):
        stats.paired_t_test([1.0], [2.0])
    for bad, err in ((0.0, ValueError), (1.0, ValueError), (math.nan, ValueError),
                     (True, TypeError), ("0.9", TypeError)):
        with pytest.raises(err, match="^paired_t_test: 'level' must be"):
            stats.paired_t_test([1.0, 2.0], [0.0, 0.5], level=bad)
