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

__all__ = ["shuttle", "phishing", "trump_approval", "diabetes", "synth", "SYNTH", "drift",
           "DRIFT", "label_order", "burst_order"]


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


def trump_approval() -> tuple[np.ndarray, np.ndarray]:
    """River's bundled TrumpApproval regression dataset, in file order.

    Returns
    -------
    X : (1001, 6) float64
        The file's columns in its own order: ``ordinal_date``, then the approval polls of
        ``gallup``, ``ipsos``, ``morning_consult``, ``rasmussen`` and ``you_gov``.
    y : (1001,) float64
        The approval rating, 37–48 (%), a drifting series of consecutive days.
    """
    from river.datasets import TrumpApproval

    data = list(TrumpApproval())
    return (np.array([list(x.values()) for x, _ in data], dtype=np.float64),
            np.array([t for _, t in data], dtype=np.float64))


def diabetes(repeats: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled diabetes regression dataset, ``repeats`` times over in file
    order (a stream long enough for four spokes).

    Returns
    -------
    X : (442 · repeats, 10) float64
        Age, sex, body mass index, blood pressure and six serum measurements, each column
        centred and scaled to unit norm by scikit-learn.
    y : (442 · repeats,) float64
        Disease progression one year after baseline, 25–346.

    References
    ----------
    Efron, B., Hastie, T., Johnstone, I., Tibshirani, R. (2004) Least angle regression.
    Annals of Statistics 32(2):407–499.
    """
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    return np.tile(X, (repeats, 1)), np.tile(y, repeats).astype(np.float64)


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


def _agrawal_drift(seed: int, position: int, width: int):
    from river.datasets.synth import Agrawal, ConceptDriftStream

    return ConceptDriftStream(stream=Agrawal(classification_function=0, seed=seed),
                              drift_stream=Agrawal(classification_function=6, seed=seed + 1),
                              position=position, width=width, seed=seed)


def _sea_drift(seed: int, position: int, width: int):
    from river.datasets.synth import SEA, ConceptDriftStream

    return ConceptDriftStream(stream=SEA(variant=2, noise=0.1, seed=seed),
                              drift_stream=SEA(variant=3, noise=0.1, seed=seed + 1),
                              position=position, width=width, seed=seed)


def _sine_drift(seed: int, position: int, width: int):
    from river.datasets.synth import ConceptDriftStream, Sine

    return ConceptDriftStream(stream=Sine(classification_function=0, seed=seed),
                              drift_stream=Sine(classification_function=1, seed=seed + 1),
                              position=position, width=width, seed=seed)


#: name → (river drift stream factory of (seed, position, width), n_features, n_classes)
DRIFT = {"agrawal": (_agrawal_drift, 9, 2), "sea": (_sea_drift, 3, 2),
         "sine": (_sine_drift, 2, 2)}


def drift(name: str, n: int = 4000, seed: int = 42, position: int | None = None,
          width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` records of a seeded stream with one concept drift: river's
    ``ConceptDriftStream``, which switches from one generator to another around record
    ``position`` (a sigmoid of ``width`` records: record ``t`` comes from the new concept
    with probability ``1 / (1 + exp(-4 (t - position) / width))``).

    ``agrawal``: ``Agrawal(classification_function=0)`` (loan approval by age and salary,
    not linearly separable) drifting to ``Agrawal(classification_function=6)`` (by
    disposable income, nearly linear), 9 features in sorted name order (``age``, ``car``,
    ``commission``, ``elevel``, ``hvalue``, ``hyears``, ``loan``, ``salary``,
    ``zipcode``). ``sea``: ``SEA(variant=2, noise=0.1)`` (label ``x0 + x1 > 7``) drifting
    to ``SEA(variant=3, noise=0.1)`` (``x0 + x1 > 9.5``), 3 features in [0, 10], 10% of
    the labels flipped. ``sine``: ``Sine(classification_function=0)`` (SINE1 of Gama et
    al.'s DDM paper: label 1 below the curve ``x1 = sin(x0)``) drifting to
    ``Sine(classification_function=1)`` (the same curve, the labels reversed), 2 features
    in [0, 1]. The new concept's generator is seeded ``seed + 1``.

    Parameters
    ----------
    name : {"agrawal", "sea", "sine"}
    n : int
        Records, >= 1.
    seed : int
        Seed of the generators and of the switch (same arguments, same arrays).
    position, width : int or None
        Centre and width of the drift, records; default ``2n/5`` and ``n/10`` (so that
        the last 20% of the records come from the new concept).

    Returns
    -------
    X : (n, 9), (n, 3) or (n, 2) float64
    y : (n,) int64
        0 / 1.

    Raises
    ------
    ValueError
        For an unknown ``name``, ``n`` below 1, ``width`` below 1 or below ``position /
        177`` (river's ConceptDriftStream would overflow).

    References
    ----------
    Agrawal, R., Imielinski, T., Swami, A. (1993) Database mining: a performance
    perspective. IEEE TKDE 5(6), 914-925.
    Street, W. N., Kim, Y. (2001) A streaming ensemble algorithm (SEA) for large-scale
    classification. KDD, 377-382.
    Gama, J., Medas, P., Castillo, G., Rodrigues, P. (2004) Learning with drift detection.
    SBIA, LNCS 3171, 286-295 (SINE1).
    Bifet, A., Holmes, G., Kirkby, R., Pfahringer, B. (2010) MOA: Massive Online Analysis.
    JMLR 11, 1601-1604 (the concept drift stream).
    """
    if name not in DRIFT:
        raise ValueError(f"unknown drift stream {name!r}; known: {', '.join(DRIFT)}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    position = 2 * n // 5 if position is None else position
    width = max(1, n // 10) if width is None else width
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    if position > 177 * width:  # river's sigmoid, exp(4 (position - t) / width), overflows
        raise ValueError(f"width must be at least position / 177 = {position / 177:.0f} "
                         f"records (river's ConceptDriftStream overflows below), got {width}")
    X, y = _arrays(itertools.islice(DRIFT[name][0](seed, position, width), n))
    return X, y.astype(np.int64)


def label_order(y: np.ndarray) -> np.ndarray:
    """The permutation that sorts records by label, stably (records of a label keep
    their order): a stream in which the classes arrive one after the other.

    Parameters
    ----------
    y : (n,) labels

    Returns
    -------
    (n,) int64 indices: ``X[order], y[order]`` is the sorted stream.
    """
    return np.argsort(np.asarray(y), kind="stable").astype(np.int64)


def burst_order(y: np.ndarray, run: int) -> np.ndarray:
    """The permutation that reorders records into bursts: ``run`` records of one class,
    then ``run`` of the next (classes in sorted order, in turn), each class's records in
    their original order; a class that runs out is skipped (the last bursts are of the
    classes left, so they may merge into longer ones).

    Parameters
    ----------
    y : (n,) labels
    run : int
        Records per burst, >= 1.

    Returns
    -------
    (n,) int64 indices.

    Raises
    ------
    ValueError
        For ``run`` below 1.

    Examples
    --------
    >>> burst_order(np.array([0, 1, 0, 1, 0, 1]), 2).tolist()
    [0, 2, 1, 3, 4, 5]
    """
    if run < 1:
        raise ValueError(f"run must be >= 1, got {run}")
    y = np.asarray(y)
    queues = [np.flatnonzero(y == c) for c in np.unique(y)]
    heads = [0] * len(queues)
    out: list[np.ndarray] = []
    while any(h < len(q) for h, q in zip(heads, queues)):
        for c, q in enumerate(queues):
            if heads[c] < len(q):
                out.append(q[heads[c]:heads[c] + run])
                heads[c] += run
    return np.concatenate(out).astype(np.int64) if out else np.zeros(0, dtype=np.int64)
