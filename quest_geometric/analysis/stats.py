r"""Small-sample statistics of the studies: mean and spread over seeds, paired differences,
exact sign and permutation tests and paired t intervals.

The studies (``benchmarks/qsv/ablation_study/``, ``benchmarks/qk_geometry/``) compare
conditions over a handful of seeds, so every test here is exact or a t test, and every
result says how many values it rests on. A percentile bootstrap interval is too narrow with
so few values, so none is offered: the paired claims rest on the sign, permutation and t
tests.
"""
from __future__ import annotations

import math
import statistics
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import torch

from quest_geometric._utils.checks import check_int, check_real, fail

__all__ = [
    "mean_std", "finite_mean", "sign_test", "paired_sign_test", "paired_permutation_test",
    "paired_t_test", "paired_differences", "directional_probability",
    "binomial_interval", "least_squares_slope", "spearman",
]


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    r"""Mean and sample standard deviation :math:`s = \sqrt{\sum_i (x_i - \bar x)^2 / (n - 1)}`
    of ``values`` (:func:`statistics.fmean`, :func:`statistics.stdev`: exactly rounded sums).

    Args:
        values (sequence of float): at least one finite value (e.g. one per seed).

    Returns:
        (float, float): the mean and the standard deviation (NaN for a single value).

    Raises:
        ValueError: no value (a mean of nothing is undefined), or a NaN or infinite one.

    Example:
        >>> mean_std([0.5, 0.7])
        (0.6, 0.14142135623730948)
    """
    vals = _floats(values, "values", "mean_std")
    if not vals:
        raise fail(ValueError, "mean_std", "values", "at least one value",
                   got_text="an empty sequence")
    if not all(map(math.isfinite, vals)):
        raise fail(ValueError, "mean_std", "values", "finite", got_text="NaN or infinite values")
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else math.nan)


def _floats(values: Any, arg: str, where: str) -> list[float]:
    """``values`` as a list of floats (a :class:`TypeError` naming ``arg`` otherwise)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray,
                                                                   torch.Tensor)):
        raise fail(TypeError, where, arg, "a sequence of numbers", values)
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        raise fail(TypeError, where, arg, "a sequence of numbers", values) from None


def finite_mean(values: Sequence[float]) -> float:
    """Mean of the finite values of ``values`` (NaN and infinities skipped; NaN when none is
    finite, e.g. results written before a metric existed).

    Args:
        values (sequence of float): the values.
    """
    vals = [float(v) for v in values if math.isfinite(float(v))]
    return statistics.fmean(vals) if vals else math.nan


def sign_test(wins: int, losses: int) -> float:
    r"""Two-sided exact sign test of ``wins`` positive against ``losses`` negative paired
    differences (ties already dropped).

    .. math::
        p = \min\Bigl(1,\; 2 \sum_{i=0}^{\min(w, l)} \binom{n}{i} 2^{-n}\Bigr),
        \qquad n = w + l,

    the probability under :math:`X \sim \mathrm{Binomial}(n, 1/2)` of a split at least as
    uneven as the one observed, computed by :func:`scipy.stats.binomtest`
    ``(w, n, 0.5).pvalue``.

    Args:
        wins (int): differences above zero (:math:`\ge 0`).
        losses (int): differences below zero (:math:`\ge 0`); :math:`p = 1` when
            :math:`n = 0` (which SciPy refuses).
    """
    from scipy.stats import binomtest

    check_int(wins, "wins", 0, where="sign_test")
    check_int(losses, "losses", 0, where="sign_test")
    return float(binomtest(wins, wins + losses, 0.5).pvalue) if wins + losses else 1.0


def _paired(a: Sequence[float], b: Sequence[float], where: str) -> np.ndarray:
    """The finite paired differences ``a - b`` (float64), checked."""
    arrays = []
    for name, v in (("a", a), ("b", b)):
        if isinstance(v, (str, bytes)):
            raise fail(TypeError, where, name, "a sequence of numbers", v)
        try:
            arrays.append(np.asarray(v, dtype=np.float64).ravel())
        except (TypeError, ValueError):
            raise fail(TypeError, where, name, "a sequence of numbers", v) from None
    x, y = arrays
    if x.size == 0:
        raise fail(ValueError, where, "a", "non-empty", a)
    _check_pairs(x, y, where, ("a", "b"))
    return x - y


def _check_pairs(x: np.ndarray, y: np.ndarray, where: str, names: tuple[str, str]) -> None:
    """``x`` and ``y`` have the same length and finite values."""
    if len(x) != len(y):
        raise fail(ValueError, where, names[1], f"paired with '{names[0]}' (the same length, "
                   f"{len(x)})", got_text=f"{len(y)} values")
    for name, v in zip(names, (x, y)):
        if not np.isfinite(v).all():
            raise fail(ValueError, where, name, "finite", got_text="NaN or infinite values")


def paired_sign_test(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    r"""Two-sided exact sign test of the paired differences :math:`d_i = a_i - b_i`.

    Ties (:math:`d_i = 0`) are dropped; of the others :math:`w` are positive and :math:`l`
    negative, and :math:`p` is :func:`sign_test` ``(w, l)``.

    Args:
        a (sequence of float): the condition's values (e.g. accuracy per seed).
        b (sequence of float): the paired reference values.

    Returns:
        dict: ``n`` (pairs), ``wins`` (:math:`a > b`), ``losses``, ``ties``, ``p``.

    Raises:
        ValueError: ``a`` and ``b`` empty, of different lengths or not finite.
        TypeError: ``a`` or ``b`` not a sequence of numbers.

    Examples:
        >>> paired_sign_test([2.0, 3.0, 4.0], [1.0, 1.0, 1.0])["p"]
        0.25
    """
    d = _paired(a, b, "paired_sign_test")
    wins, losses = int((d > 0).sum()), int((d < 0).sum())
    return {"n": int(d.size), "wins": wins, "losses": losses, "ties": int(d.size) - wins - losses,
            "p": sign_test(wins, losses)}


#: The largest number of pairs :func:`paired_permutation_test` enumerates (2^20 flips).
MAX_EXACT_PAIRS = 20


def paired_permutation_test(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    r"""Exact two-sided paired permutation (sign-flip) test of the mean difference.

    Under exchangeability of each pair, all :math:`2^n` sign patterns :math:`\epsilon` of the
    differences :math:`d_i = a_i - b_i` are equally likely; they are enumerated and

    .. math::
        p = \frac{1}{2^n} \#\Bigl\{\epsilon : \Bigl|\sum_i \epsilon_i d_i\Bigr|
        \ge \Bigl|\sum_i d_i\Bigr|\Bigr\},

    with a relative tolerance of :math:`10^{-9} \sum_i |d_i|` so that sums equal in exact
    arithmetic count as equal; hence :math:`p \ge 2^{1-n}` whenever some :math:`d_i \ne 0`.
    Written out rather than :func:`scipy.stats.permutation_test`
    (``permutation_type='samples'``): SciPy's tolerance is relative to the observed sum, so it
    misses exact ties near a zero sum (accuracies such as :math:`k/36`), and it enumerates the
    flips in Python (seconds at 20 pairs, where one product takes milliseconds).

    Args:
        a (sequence of float): the condition's values.
        b (sequence of float): the paired reference values (at most :data:`MAX_EXACT_PAIRS`).

    Returns:
        dict: ``n``, ``mean`` (:math:`\bar d`), ``p`` and ``flips`` (:math:`2^n`).

    Raises:
        ValueError: as :func:`paired_sign_test`, or more than :data:`MAX_EXACT_PAIRS` pairs.
        TypeError: ``a`` or ``b`` not a sequence of numbers.

    Examples:
        >>> paired_permutation_test([2.0, 3.0, 4.0], [1.0, 1.0, 1.0])["p"]
        0.25
    """
    d = _paired(a, b, "paired_permutation_test")
    n = d.size
    if n > MAX_EXACT_PAIRS:
        raise fail(ValueError, "paired_permutation_test", "a", f"at most {MAX_EXACT_PAIRS} "
                   "pairs (enumerated exactly)", got_text=f"{n} pairs")
    bits = (np.arange(2 ** n, dtype=np.int64)[:, None] >> np.arange(n)) & 1
    sums = (1.0 - 2.0 * bits) @ d  # bit 1 flips the sign of that difference
    observed = abs(float(d.sum()))
    tol = 1e-9 * max(float(np.abs(d).sum()), 1e-300)
    count = int((np.abs(sums) >= observed - tol).sum())
    return {"n": int(n), "mean": float(d.mean()), "p": count / 2 ** n, "flips": 2 ** n}


def paired_t_test(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> dict[str, Any]:
    r"""Paired :math:`t`-test of the mean difference :math:`\bar d`, :math:`d_i = a_i - b_i`,
    with its confidence interval.

    .. math::
        t = \frac{\bar d}{s_d / \sqrt n}, \qquad
        \bar d \pm t_{n-1,\,(1+\mathrm{level})/2}\, \frac{s_d}{\sqrt n},

    :math:`s_d` the sample standard deviation of the differences, :math:`p` two-sided on
    :math:`n - 1` degrees of freedom (:func:`scipy.stats.ttest_1samp` of the differences,
    which is ``ttest_rel``). It assumes roughly normal differences: with a handful of seeds
    read it beside the exact tests.

    Args:
        a (sequence of float): the condition's values.
        b (sequence of float): the paired reference values (at least 2 pairs).
        level (float): the interval's confidence level in :math:`(0, 1)`.
            (default: ``0.95``)

    Returns:
        dict: ``n``, ``mean``, ``sd`` (:math:`s_d`), ``se``, ``t``, ``df``, ``p``,
        ``ci_low``, ``ci_high``, ``level``; with :math:`s_d = 0`, ``t`` and ``p`` are NaN and
        the interval is the point :math:`\bar d`.

    Raises:
        ValueError: fewer than 2 pairs, unpaired or non-finite values, or ``level``
            outside :math:`(0, 1)`.
        TypeError: ``a`` or ``b`` not a sequence of numbers, or ``level`` not a number.
    """
    from scipy.stats import ttest_1samp

    d = _paired(a, b, "paired_t_test")
    if d.size < 2:
        raise fail(ValueError, "paired_t_test", "a", "at least 2 pairs",
                   got_text=f"{d.size} pair")
    if not 0.0 < check_real(level, "level", where="paired_t_test") < 1.0:
        raise fail(ValueError, "paired_t_test", "level", "a number in (0, 1)", level)
    n = int(d.size)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd == 0.0:
        return {"n": n, "mean": mean, "sd": 0.0, "se": 0.0, "t": math.nan, "df": n - 1,
                "p": math.nan, "ci_low": mean, "ci_high": mean, "level": float(level)}
    res = ttest_1samp(d, 0.0)
    ci = res.confidence_interval(confidence_level=level)
    return {"n": n, "mean": mean, "sd": sd, "se": sd / math.sqrt(n), "t": float(res.statistic),
            "df": n - 1, "p": float(res.pvalue), "ci_low": float(ci.low),
            "ci_high": float(ci.high), "level": float(level)}


def paired_differences(values: Mapping[int, float], reference: Mapping[int, float],
                       level: float = 0.95) -> dict[str, float]:
    r"""Per-seed differences :math:`d_s = a_s - r_s` over the seeds both have, with the
    three paired tests valid at a handful of seeds: :func:`paired_t_test` (``ci_low``,
    ``ci_high``, ``t_p``), :func:`paired_permutation_test` (``perm_p``) and
    :func:`paired_sign_test` (``wins``, ``losses``, ``sign_p``).

    Args:
        values (dict): seed -> value of the condition.
        reference (dict): seed -> value of the reference.
        level (float): the interval's confidence level. (default: ``0.95``)

    Returns:
        dict: ``n``, ``mean``, ``ci_low``, ``ci_high``, ``t_p``, ``perm_p``, ``wins``,
        ``losses``, ``sign_p`` (NaN without a common seed, the :math:`t` columns with one,
        ``perm_p`` beyond :data:`MAX_EXACT_PAIRS`).
    """
    common = sorted(set(values) & set(reference))
    out: dict[str, Any] = {"n": len(common), "mean": math.nan, "ci_low": math.nan,
                           "ci_high": math.nan, "t_p": math.nan, "perm_p": math.nan,
                           "wins": 0, "losses": 0, "sign_p": math.nan}
    if not common:
        return out
    a = [float(values[s]) for s in common]
    r = [float(reference[s]) for s in common]
    sign = paired_sign_test(a, r)
    out.update(mean=float(np.mean(np.subtract(a, r))), wins=sign["wins"],
               losses=sign["losses"], sign_p=sign["p"],
               perm_p=(paired_permutation_test(a, r)["p"] if len(common) <= MAX_EXACT_PAIRS
                       else math.nan))
    if len(common) > 1:
        t = paired_t_test(a, r, level)
        out.update(ci_low=t["ci_low"], ci_high=t["ci_high"], t_p=t["p"])
    return out


def least_squares_slope(x: Sequence[float], y: Sequence[float]) -> float:
    r"""Least-squares slope :math:`\hat\beta = \sum_i (x_i - \bar x)(y_i - \bar y) /
    \sum_i (x_i - \bar x)^2` of ``y`` against ``x`` (:func:`numpy.polyfit` of degree 1).

    Args:
        x (sequence of float): the abscissae (e.g. training steps).
        y (sequence of float): the values, paired with ``x`` (the same length).

    Returns:
        float: the slope; NaN with fewer than two points or a constant ``x``.

    Raises:
        ValueError: ``x`` and ``y`` of different lengths, or a NaN or infinite value.
    """
    x = np.asarray(_floats(x, "x", "least_squares_slope"), dtype=float)
    y = np.asarray(_floats(y, "y", "least_squares_slope"), dtype=float)
    _check_pairs(x, y, "least_squares_slope", ("x", "y"))
    if len(x) < 2 or np.ptp(x) == 0:
        return math.nan
    return float(np.polyfit(x, y, 1)[0])


def spearman(x: Sequence[Optional[float]], y: Sequence[Optional[float]]
             ) -> tuple[float, float, int]:
    r"""Spearman's rank correlation :math:`\rho` of the pairs where both values are defined
    and finite, with its two-sided p-value (:func:`scipy.stats.spearmanr`).

    Undefined values are dropped pair by pair (the studies record a metric as :obj:`None`
    or NaN where it does not exist), and the number of pairs used is returned.

    Args:
        x (sequence of float or None): the first variable.
        y (sequence of float or None): the second, paired with ``x`` (the same length).

    Returns:
        (float, float, int): :math:`\rho`, the p-value (both NaN with fewer than 3 pairs or a
        constant variable) and the number of pairs used.

    Raises:
        ValueError: ``x`` and ``y`` of different lengths.
    """
    from scipy.stats import spearmanr

    for name, v in (("x", x), ("y", y)):
        if isinstance(v, (str, bytes)) or not hasattr(v, "__len__"):
            raise fail(TypeError, "spearman", name, "a sequence of numbers or None", v)
    if len(x) != len(y):
        raise fail(ValueError, "spearman", "y", f"paired with 'x' (the same length, {len(x)})",
                   got_text=f"{len(y)} values")
    pairs = [(a, b) for a, b in zip(x, y) if a is not None and b is not None
             and math.isfinite(a) and math.isfinite(b)]
    if len(pairs) < 3 or len({p[0] for p in pairs}) < 2 or len({p[1] for p in pairs}) < 2:
        return math.nan, math.nan, len(pairs)  # too few points or a constant variable
    res = spearmanr([p[0] for p in pairs], [p[1] for p in pairs])
    return float(res.statistic), float(res.pvalue), len(pairs)


def binomial_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    r"""Exact (Clopper-Pearson) interval :math:`[p_\mathrm{lo}, p_\mathrm{hi}]` of a binomial
    share :math:`k / n`, with :math:`P(\mathrm{Bin}(n, p_\mathrm{lo}) \ge k) =
    P(\mathrm{Bin}(n, p_\mathrm{hi}) \le k) = (1 - \mathrm{level}) / 2` (SciPy's
    ``binomtest(k, n).proportion_ci(method='exact')``).

    Args:
        k (int): successes, :math:`0 \le k \le n`.
        n (int): trials, :math:`n \ge 1`.
        level (float): confidence level in :math:`(0, 1)`. (default: ``0.95``)

    Raises:
        ValueError: :math:`n = 0`, or :math:`k` outside :math:`[0, n]`.

    Example:
        >>> lo, hi = binomial_interval(3, 4)
    """
    from scipy.stats import binomtest

    n = check_int(n, "n", 1, where="binomial_interval")
    k = check_int(k, "k", 0, where="binomial_interval")
    if k > n:
        raise fail(ValueError, "binomial_interval", "k", f"at most n = {n}", k)
    level = check_real(level, "level", where="binomial_interval")
    if not 0.0 < level < 1.0:
        raise fail(ValueError, "binomial_interval", "level", "in (0, 1)", level)
    ci = binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return float(ci.low), float(ci.high)


def directional_probability(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    r"""Paired sign test of ``a < b`` across seeds.

    With :math:`d_s = a_s - b_s`, ties are dropped; among the :math:`n` remaining seeds
    :math:`k` have :math:`d_s < 0`. The directional probability is :math:`k/n` and the
    one-sided p-value :math:`P(X \ge k)`, :math:`X \sim \mathrm{Binomial}(n, 1/2)`
    (:func:`scipy.stats.binomtest` with ``alternative='greater'``).

    Args:
        a (sequence of float): per-seed values of the first condition.
        b (sequence of float): the paired values of the second.

    Returns:
        dict: ``n_seeds``, ``n_untied``, ``k_less`` (seeds with a < b), ``share_less``
        (:math:`k/n`), ``p_value``, ``signs`` (per seed: -1, 0 or +1), ``mean_diff``.
    """
    from scipy.stats import binomtest

    diffs = _paired(a, b, "directional_probability").tolist()
    signs = [int(np.sign(d)) for d in diffs]
    n = sum(1 for s in signs if s != 0)
    k = sum(1 for s in signs if s < 0)
    p = float(binomtest(k, n, 0.5, alternative="greater").pvalue) if n else math.nan
    return {"n_seeds": len(diffs), "n_untied": n, "k_less": k,
            "share_less": k / n if n else math.nan, "p_value": p, "signs": signs,
            "mean_diff": float(np.mean(diffs))}

