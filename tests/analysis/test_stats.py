"""quest_geometric.analysis.stats against references independent of the SciPy call each
function makes: hand-computed cases, brute-force enumerations in exact arithmetic, closed
forms and textbook values (and NumPy / the statistics module)."""
import itertools
import math
import statistics
from fractions import Fraction

import numpy as np
import pytest
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
def test_sign_test_equals_the_enumerated_sign_patterns(n):
    # all 2^n equally likely sign patterns; p = the share whose split is at least as uneven
    positives = [bin(m).count("1") for m in range(2 ** n)]
    for wins in range(n + 1):
        uneven = sum(abs(2 * k - n) >= abs(2 * wins - n) for k in positives)
        assert stats.sign_test(wins, n - wins) == pytest.approx(uneven / 2 ** n, rel=1e-12)


def test_sign_test_hand_values_and_bad_input():
    assert stats.sign_test(5, 0) == pytest.approx(2 / 32)  # the smallest p with 5 seeds
    assert stats.sign_test(4, 1) == pytest.approx(2 * 6 / 32)
    assert stats.sign_test(0, 0) == 1.0
    for bad, err in (((-1, 2), ValueError), ((1.5, 2), TypeError), ((True, 1), TypeError),
                     ((1, -2), ValueError)):
        with pytest.raises(err, match="^sign_test: '(wins|losses)' must be an int >= 0"):
            stats.sign_test(*bad)


def test_paired_differences_composes_the_parts():
    a = {0: 81.0, 1: 82.0, 2: 79.5, 3: 83.0, 4: 81.0, 9: 50.0}
    r = {0: 80.0, 1: 80.0, 2: 80.0, 3: 80.0, 4: 80.0, 7: 99.0}
    pd = stats.paired_differences(a, r)
    d = [1.0, 2.0, -0.5, 3.0, 1.0]  # the common seeds 0-4
    zeros = [0.0] * 5
    assert (pd["n"], pd["wins"], pd["losses"]) == (5, 4, 1)
    assert pd["mean"] == pytest.approx(statistics.mean(d))
    # by hand: 4 wins, 1 loss -> p = 2 P(X <= 1), X ~ Bin(5, 1/2) = 2 (1 + 5) / 32
    assert pd["sign_p"] == pytest.approx(12 / 32)
    # mean 1.3, sum of squared deviations 0.09 + 0.49 + 3.24 + 2.89 + 0.09 = 6.8, so
    # s = sqrt(6.8 / 4), se = s / sqrt(5); t_{4, 0.975} = 2.776445 (tables)
    se = math.sqrt(1.7 / 5)
    assert pd["ci_low"] == pytest.approx(1.3 - 2.7764451 * se, rel=1e-7)
    assert pd["ci_high"] == pytest.approx(1.3 + 2.7764451 * se, rel=1e-7)
    # Student's t with 4 df in closed form: P(|T| > t) = 1 - (3/4) x (1 - x^2 / 12),
    # x = t / sqrt(1 + t^2 / 4)
    x = (1.3 / se) / math.sqrt(1 + (1.3 / se) ** 2 / 4)
    assert pd["t_p"] == pytest.approx(1 - 0.75 * x * (1 - x * x / 12), rel=1e-10)
    assert pd["perm_p"] == pytest.approx(float(_flip_p([Fraction(v) for v in d])))
    assert stats.paired_differences(a, r)["perm_p"] == stats.paired_permutation_test(d, zeros)["p"]
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
        # closed forms at the ends: P(Bin(n, hi) = 0) = (1 - hi)^n = 0.025 for k = 0
        if k == 0:
            assert hi == pytest.approx(1 - 0.025 ** (1 / n), rel=1e-9)
        if k == n:
            assert lo == pytest.approx(0.025 ** (1 / n), rel=1e-9)
        # its defining tail probabilities
        if 0 < k:
            assert sps.binom.sf(k - 1, n, lo) == pytest.approx((1 - level) / 2, rel=1e-6)
        if k < n:
            assert sps.binom.cdf(k, n, hi) == pytest.approx((1 - level) / 2, rel=1e-6)
    with pytest.raises(ValueError, match="binomial_interval: 'n' must be an int >= 1"):
        stats.binomial_interval(0, 0)  # issue 53: no trial has no interval (was NaN)


def test_least_squares_slope_equals_linregress():
    # by hand: x (0, 1, 2, 3), y (1, 3, 2, 5): means 1.5 and 2.75,
    # S_xy = 2.625 - 0.125 - 0.375 + 3.375 = 5.5, S_xx = 5, slope 1.1
    assert stats.least_squares_slope([0, 1, 2, 3], [1, 3, 2, 5]) == pytest.approx(1.1)
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
    assert res["p"] == pytest.approx(2 * (1 + 4) / 16)  # by hand: 2 P(X <= 1), X ~ Bin(4, 1/2)
    with pytest.raises(ValueError, match="^paired_sign_test: 'b' must be paired with 'a'"):
        stats.paired_sign_test([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="^paired_sign_test: 'a' must be finite, got NaN"):
        stats.paired_sign_test([math.nan], [1.0])
    with pytest.raises(TypeError, match="^paired_sign_test: 'a' must be a sequence of numbers"):
        stats.paired_sign_test("12", "34")
    with pytest.raises(TypeError, match="^paired_sign_test: 'b' must be a sequence of numbers"):
        stats.paired_sign_test([1.0], ["x"])


def _flip_p(d):
    """The permutation p of the differences ``d`` (Fractions) by brute force: the share of
    the 2^n sign flips with |sum| >= |observed sum|, in exact arithmetic."""
    observed = abs(sum(d))
    hits = sum(abs(sum(s * v for s, v in zip(signs, d))) >= observed
               for signs in itertools.product((1, -1), repeat=len(d)))
    return Fraction(hits, 2 ** len(d))


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
    # all differences zero: every flip ties the observed sum; one pair: both flips tie
    assert stats.paired_permutation_test([1.0, 2.0], [1.0, 2.0])["p"] == 1.0
    assert stats.paired_permutation_test([3.0], [1.0])["p"] == 1.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_paired_permutation_test_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = [5, 8, 10][seed]
    a, b = rng.normal(0.3, 1.0, n), rng.normal(0.0, 1.0, n)
    exact = _flip_p([Fraction(x) - Fraction(y) for x, y in zip(a.tolist(), b.tolist())])
    assert stats.paired_permutation_test(a.tolist(), b.tolist())["p"] == float(exact)


def test_paired_permutation_test_counts_exact_ties_of_accuracies():
    # accuracies k / N in percent: sums of differences that are equal as fractions differ in
    # floating point (e.g. a zero observed sum comes out near 1e-15); counted as ties, as the
    # brute force over the exact fractions counts them
    rng = np.random.default_rng(0)
    for _ in range(60):
        n, N = int(rng.integers(2, 10)), int(rng.choice([36, 50, 360, 1000]))
        ka, kb = rng.integers(int(0.9 * N), N + 1, n), rng.integers(int(0.9 * N), N + 1, n)
        exact = _flip_p([Fraction(100 * (int(x) - int(y)), N) for x, y in zip(ka, kb)])
        got = stats.paired_permutation_test((ka / N * 100).tolist(), (kb / N * 100).tolist())
        assert got["p"] == float(exact), (ka, kb, N)
    # one such case: accuracies (36, 35, 31, 30) / 36 against (34, 33, 33, 32) / 36, so
    # d = 100 (2, 2, -2, -2) / 36 sums to zero exactly (2.8e-14 in floating point) and every
    # flip is at least as extreme: p = 1 (a tolerance relative to that sum gave 0.75)
    ka, kb = [36, 35, 31, 30], [34, 33, 33, 32]
    got = stats.paired_permutation_test([k / 36 * 100 for k in ka], [k / 36 * 100 for k in kb])
    assert got["p"] == 1.0


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


def test_paired_t_test_by_hand():
    # d = (1, 2, 3): mean 2, s_d = 1, se = 1 / sqrt(3), t = 2 sqrt(3), df 2; Student's t
    # with 2 df in closed form: P(|T| > t) = 1 - t / sqrt(t^2 + 2) = 1 - sqrt(12 / 14), and
    # t_{2, 0.975} = 0.95 / sqrt(2 * 0.975 * 0.025) = 4.302653 (tables: 4.303)
    res = stats.paired_t_test([2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    assert (res["n"], res["df"], res["mean"], res["sd"]) == (3, 2, 2.0, 1.0)
    assert res["t"] == pytest.approx(2 * math.sqrt(3))
    assert res["p"] == pytest.approx(1 - math.sqrt(12 / 14), rel=1e-10)
    half = 0.95 / math.sqrt(2 * 0.975 * 0.025) / math.sqrt(3)
    assert (res["ci_low"], res["ci_high"]) == (pytest.approx(2 - half), pytest.approx(2 + half))


def test_paired_t_test_is_the_textbook_interval():
    res = stats.paired_t_test(_B, _A)
    d = np.subtract(_B, _A)
    se = d.std(ddof=1) / math.sqrt(5)
    half = sps.t.ppf(0.975, 4) * se  # the t distribution's quantile, not the t-test
    assert res["t"] == pytest.approx(d.mean() / se)
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
