"""Small real datasets for tests, examples and benchmarks."""

from __future__ import annotations

import gzip

import numpy as np

__all__ = ["shuttle"]


def shuttle() -> tuple[np.ndarray, np.ndarray]:
    """The Statlog Shuttle anomaly dataset as shipped by river >= 0.26, in file order.

    The file is fetched and checksummed by :func:`deploy.assets.shuttle_csv`.

    Returns
    -------
    X : (49097, 9) float64
        Features ``f1`` .. ``f9`` (integers in the file).
    y : (49097,) int64
        ``anomaly``: 1 for an anomaly (3,511 records), 0 otherwise.

    Raises
    ------
    deploy.assets.AssetError
        If the file cannot be fetched or fails its checksum.

    References
    ----------
    Dua, D., Graff, C. (2019) UCI Machine Learning Repository: Statlog (Shuttle).
    """
    from deploy.assets import shuttle_csv

    with gzip.open(shuttle_csv(), "rt", encoding="ascii") as f:
        header = f.readline().strip().split(",")
        data = np.loadtxt(f, delimiter=",", dtype=np.int64)
    if header[-1] != "anomaly" or data.ndim != 2 or data.shape[1] != len(header):
        raise ValueError(f"unexpected shuttle file layout: header {header}, shape {data.shape}")
    return data[:, :-1].astype(np.float64), data[:, -1].copy()
