r"""Independent references and fixtures' helpers that several test files share.

* :func:`np_pr` and :func:`np_pr_from_covariance`: the participation ratio
  :math:`\mathrm{PR} = (\sum_i \lambda_i)^2 / \sum_i \lambda_i^2` of the eigenvalues
  :math:`\lambda_i` of a covariance, computed with NumPy (a reference independent of the
  library's torch code);
* :func:`one_thread`: a context manager that runs a block on one torch thread (short
  training loops run faster so on a shared, busy machine), restoring the count after.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import torch

__all__ = ["np_pr", "np_pr_from_covariance", "one_thread"]


def np_pr_from_covariance(cov: np.ndarray) -> float:
    r"""The participation ratio of a covariance matrix from its eigenvalues (NumPy).

    Args:
        cov (numpy.ndarray): a symmetric ``[d, d]`` covariance.
    """
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
