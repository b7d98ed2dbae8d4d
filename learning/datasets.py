"""Small real and seeded synthetic datasets for tests, examples and benchmarks.

Everything here comes from installed packages or :mod:`deploy.assets` (checksummed);
nothing is generated at random without a seed, and every loader returns its records in
one deterministic order.
"""

from __future__ import annotations

import gzip
import itertools
from typing import Iterable

import numpy as np

__all__ = ["shuttle", "phishing", "synth", "SYNTH"]


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


def _arrays(stream: Iterable[tuple[dict, object]]) -> tuple[np.ndarray, np.ndarray]:
    """``(X, y)`` of river ``(x, y)`` pairs, features in the sorted key order of the first
    record (every record must have the same keys); booleans become 0 / 1."""
    rows, labels = [], []
    keys = None
    for x, label in stream:
        if keys is None:
            keys = sorted(x)
        elif len(x) != len(keys):
            raise ValueError(f"record {len(rows)} has keys {sorted(x)}, expected {keys}")
        rows.append([float(x[k]) for k in keys])
        labels.append(int(label) if isinstance(label, (bool, np.bool_)) else label)
    if keys is None:
        raise ValueError("empty stream")
    return np.asarray(rows, dtype=np.float64), np.asarray(labels)


def phishing() -> tuple[np.ndarray, np.ndarray]:
    """River's bundled Phishing websites dataset, in file order.

    Returns
    -------
    X : (1250, 9) float64
        The nine features in sorted name order (``age_of_domain``,
        ``anchor_from_other_domain``, ``empty_server_form_handler``, ``https``,
        ``ip_in_url``, ``is_popular``, ``long_url``, ``popup_window``,
        ``request_from_other_domain``), values in [0, 1].
    y : (1250,) int64
        1 for a phishing site (the file's ``True``), 0 otherwise.

    References
    ----------
    Sahingoz, O. K., Buber, E., Demir, O., Diri, B. (2019) Machine learning based
    phishing detection from URLs. Expert Systems with Applications 117, 345-357.
    """
    from river.datasets import Phishing

    return _arrays(Phishing())


def _waveform(seed: int):
    from river.datasets.synth import Waveform

    return Waveform(seed=seed)


def _rbf(seed: int):
    from river.datasets.synth import RandomRBF

    return RandomRBF(seed_model=seed, seed_sample=seed, n_classes=5, n_features=20)


def _led(seed: int):
    from river.datasets.synth import LED

    return LED(seed=seed, noise_percentage=0.1)


def _hyperplane(seed: int):
    from river.datasets.synth import Hyperplane

    return Hyperplane(seed=seed, n_features=10, mag_change=0.001, noise_percentage=0.05)


#: name → (river generator factory of a seed, n_features, n_classes)
SYNTH = {"waveform": (_waveform, 21, 3), "rbf": (_rbf, 20, 5), "led": (_led, 7, 10),
         "hyperplane": (_hyperplane, 10, 2)}


def synth(name: str, n: int = 50_000, seed: int = 42) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` records of one of river's seeded stream generators.

    ``waveform``: ``Waveform(seed)``, 21 noisy features, 3 classes. ``rbf``:
    ``RandomRBF(seed_model=seed, seed_sample=seed, n_classes=5, n_features=20)``.
    ``led``: ``LED(seed=seed, noise_percentage=0.1)``, 7 binary segments (river's default
    without the 17 irrelevant ones), 10 digits, each segment flipped with probability 0.1.
    ``hyperplane``: ``Hyperplane(seed=seed, n_features=10, mag_change=0.001,
    noise_percentage=0.05)``, a rotating hyperplane (gradual concept drift: the weights
    move by 0.001 per record), 2 classes, 5% of the labels flipped.

    Parameters
    ----------
    name : {"waveform", "rbf", "led", "hyperplane"}
    n : int
        Records, >= 1.
    seed : int
        Seed of the generator (the same ``(name, n, seed)`` gives the same arrays).

    Returns
    -------
    X : (n, n_features) float64
        Features in the generator's key order (0, 1, ...): 21, 20, 7 or 10 of them.
    y : (n,) int64
        Class labels 0 .. n_classes - 1.

    Raises
    ------
    ValueError
        For an unknown ``name`` or ``n`` below 1.

    References
    ----------
    Breiman, L., Friedman, J., Olshen, R., Stone, C. (1984) Classification and Regression
    Trees (Waveform, LED). Wadsworth.
    Bifet, A., Holmes, G., Kirkby, R., Pfahringer, B. (2010) MOA: Massive Online Analysis.
    JMLR 11, 1601-1604 (RandomRBF).
    Hulten, G., Spencer, L., Domingos, P. (2001) Mining time-changing data streams. KDD,
    97-106 (rotating hyperplane).
    """
    if name not in SYNTH:
        raise ValueError(f"unknown generator {name!r}; known: {', '.join(SYNTH)}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    X, y = _arrays(itertools.islice(SYNTH[name][0](seed), n))
    return X, y.astype(np.int64)
