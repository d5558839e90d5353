r"""Independent references and fixtures' helpers that several test files share: the
participation ratio :math:`\mathrm{PR} = (\sum_i \lambda_i)^2 / \sum_i \lambda_i^2` of the
eigenvalues :math:`\lambda_i` of a covariance in NumPy (independent of the library's torch
code), and :func:`one_thread` (short training loops run faster so on a busy machine).
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import torch

__all__ = ["np_pr", "np_pr_from_covariance", "one_thread"]


def np_pr_from_covariance(cov: np.ndarray) -> float:
    r"""The participation ratio of a symmetric ``[d, d]`` covariance ``cov``."""
    lam = np.linalg.eigvalsh(cov)
    return float(lam.sum() ** 2 / (lam ** 2).sum())


def np_pr(z: np.ndarray) -> float:
    r"""The participation ratio of samples ``z`` ``[n, d]``: :func:`np_pr_from_covariance`
    of their sample covariance (:func:`numpy.cov`, rows are samples)."""
    return np_pr_from_covariance(np.cov(z, rowvar=False))


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(1)``, restoring the thread count after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
