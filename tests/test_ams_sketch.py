"""FDA's AMS sketch (:class:`learning.protocols.fda.AmsSketch`, issue 19): hash functions
computed on the fly from seeded polynomials over GF(2³¹ − 1). The sketch is linear, the
same on every node, independent of its chunking, within its (ε, δ) guarantee, and holds
nothing proportional to the model's size (it is pickled into a spoke's Flink state)."""

from __future__ import annotations

import math
import pickle
import tracemalloc

import numpy as np
import pytest
from scipy.stats import binom

from learning.protocols.fda import MERSENNE_31, AmsSketch, median_rows, sketch_shape

P = MERSENNE_31


def cubic(coefficients, l):
    """Row ``j``'s hash ``q_j(l) mod p`` in Python integers."""
    c0, c1, c2, c3 = coefficients
    return (c0 + c1 * l + c2 * l * l + c3 * l ** 3) % P


def test_hashes_are_the_seeded_cubics_even_next_to_the_prime():
    """No int64 overflow: the chunked product equals exact integer arithmetic, also for
    indices just below p (where every power is largest)."""
    sk = AmsSketch(P - 1, 3, 16, seed=7, chunk=500)
    for start, stop in [(0, 300), (123_456_789, 123_457_000), (P - 1001, P - 1)]:
        got = sk.hashes(start, stop)
        want = [[cubic(c, l) for l in range(start, stop)] for c in sk.coefficients]
        assert got.dtype == np.int64 and np.array_equal(got, np.array(want))


def test_sketch_is_the_definition():
    """``ξ_j[b] = Σ_{h_j(l) = b} s_j(l) v_l`` with cell ``g = ⌊2·cols·q_j(l)/2³¹⌋``,
    bucket ``g // 2`` and sign ``+1`` for even ``g``."""
    size, rows, cols = 700, 3, 10
    sk = AmsSketch(size, rows, cols, seed=3, chunk=128)
    v = np.random.default_rng(0).standard_normal(size)
    want = np.zeros((rows, cols))
    for j, c in enumerate(sk.coefficients):
        for l in range(size):
            g = 2 * cols * cubic(c, l) >> 31
            want[j, g // 2] += v[l] if g % 2 == 0 else -v[l]
    np.testing.assert_allclose(sk(v), want, rtol=1e-12, atol=1e-12)


def test_linear():
    sk = AmsSketch(5000, 5, 128)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(5000), rng.standard_normal(5000)
    np.testing.assert_allclose(sk(a) + sk(b), sk(a + b), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sk(-2.5 * a), -2.5 * sk(a), rtol=1e-12, atol=1e-12)
    assert not sk(np.zeros(5000)).any()


def test_same_seed_same_sketch_on_every_node():
    """Spokes build their sketches independently; the hub adds them up."""
    v = np.random.default_rng(2).standard_normal(3000)
    one, other = AmsSketch(3000, 5, 128, seed=4), AmsSketch(3000, 5, 128, seed=4)
    assert np.array_equal(one(v), other(v))
    assert np.array_equal(pickle.loads(pickle.dumps(one))(v), one(v))
    assert not np.allclose(AmsSketch(3000, 5, 128, seed=5)(v), one(v))


@pytest.mark.parametrize("chunk", [1, 7, 640, 2999, 3000, 1 << 20])
def test_chunk_size_changes_only_rounding(chunk):
    size = 3000
    v = np.random.default_rng(3).standard_normal(size)
    ref = AmsSketch(size, 5, 128)
    sk = AmsSketch(size, 5, 128, chunk=chunk)
    # the hashes are exact integers, whatever the chunking
    whole = ref.hashes(0, size)
    parts = np.concatenate([sk.hashes(s, min(s + chunk, size)) for s in range(0, size, chunk)],
                           axis=1)
    assert np.array_equal(whole, parts)
    np.testing.assert_allclose(sk(v), ref(v), rtol=1e-12, atol=1e-12)


def test_buckets_and_signs_are_balanced():
    """Each ``(bucket, sign)`` cell is about equally likely, and signs of distinct indices
    are uncorrelated (4-wise independence makes them pairwise independent)."""
    rows, cols, n = 5, 16, 200_000
    sk = AmsSketch(n, rows, cols, seed=11)
    g = 2 * cols * sk.hashes(0, n) >> 31
    counts = np.stack([np.bincount(row, minlength=2 * cols) for row in g])
    expected = n / (2 * cols)
    assert np.abs(counts - expected).max() < 6 * np.sqrt(expected)
    signs = 1 - 2 * (g & 1)
    for shift in (1, 2, 1000):  # neighbouring and distant indices
        corr = (signs[:, :-shift] * signs[:, shift:]).mean(axis=1)
        assert np.abs(corr).max() < 6 / np.sqrt(n)


def vectors(rng, size):
    """Dense Gaussian, sparse heavy-tailed, and a few heavy entries over noise."""
    yield rng.standard_normal(size)
    v = np.zeros(size)
    v[rng.choice(size, 50, replace=False)] = rng.standard_cauchy(50)
    yield v
    v = 0.01 * rng.standard_normal(size)
    v[rng.choice(size, 4, replace=False)] += rng.uniform(1, 3, 4)
    yield v


def test_estimate_within_eps_with_probability_one_minus_delta():
    """Default precision ε = δ = 0.25 (5 × 128): over 600 (vector, seed) pairs, the median
    estimate misses ``(1 ± ε)‖v‖²`` at most a δ fraction of the time (plus slack); each
    row alone at most 1/4 of the time (Chebyshev with ``Var ≤ 2‖v‖⁴/cols``), and the rows
    are unbiased."""
    eps = delta = 0.25
    rows, cols = sketch_shape(eps)
    size, trials = 2000, 200
    rng = np.random.default_rng(12)
    misses, row_misses, ratios = 0, 0, []
    for seed in range(trials):
        sk = AmsSketch(size, rows, cols, seed=seed)
        for v in vectors(rng, size):
            norm2 = float(v @ v)
            xi = sk(v)
            misses += abs(AmsSketch.estimate(xi) - norm2) > eps * norm2
            row = np.einsum("ij,ij->i", xi, xi) / norm2
            row_misses += int((np.abs(row - 1) > eps).sum())
            ratios.extend(row)
    n = 3 * trials
    assert misses / n <= delta + 3 * np.sqrt(delta * (1 - delta) / n)
    assert row_misses / (n * rows) <= 0.25 + 3 * np.sqrt(0.25 * 0.75 / (n * rows))
    # mean of 3000 row ratios, each with standard deviation at most sqrt(2/cols) = 0.125
    assert abs(np.mean(ratios) - 1) < 4 * 0.125 / np.sqrt(len(ratios))


def test_holds_nothing_proportional_to_the_model():
    """A 10-million-parameter model's sketch pickles to a few hundred bytes (the dense
    hash arrays were 800 MB), and it is built without touching the indices."""
    sk = AmsSketch(10_000_000, *sketch_shape(0.25))
    assert len(pickle.dumps(sk)) < 2048
    assert all(np.asarray(value).size < 100 for value in vars(sk).values())


def test_temporaries_are_bounded_by_the_chunk():
    """tracemalloc's peak while sketching does not grow with the model's size."""
    chunk = 16384
    peaks = []
    for size in (200_000, 2_000_000):
        sk = AmsSketch(size, 5, 128, chunk=chunk)
        v = np.ones(size)
        tracemalloc.start()
        base, _ = tracemalloc.get_traced_memory()
        sk(v)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        peaks.append(peak - base)
    assert max(peaks) < 40 * 5 * chunk  # a few (rows × chunk) int64/float64 arrays
    assert abs(peaks[1] - peaks[0]) < 64 * 1024


def test_rejects_what_it_cannot_hash():
    with pytest.raises(ValueError, match="size must be < 2147483647"):
        AmsSketch(P, 5, 128)
    with pytest.raises(ValueError, match="cols must be >= 1, got 0"):
        AmsSketch(10, 5, 0)
    with pytest.raises(ValueError, match=r"v must have shape \(10,\), got \(11,\)"):
        AmsSketch(10, 5, 4)(np.zeros(11))


@pytest.mark.parametrize("delta", [0.5, 0.25, 0.1, 0.05, 0.01, 1e-3, 1e-6])
def test_median_rows_meet_delta_by_the_binomial_tail(delta):
    """The median of ``median_rows(δ)`` rows, each wrong with probability 1/4, is wrong with
    probability at most δ (the exact binomial tail); the count is odd and never below the
    usual ``2⌈ln(1/δ)⌉ + 1``, which alone falls short below δ ≈ 0.1."""
    rows = median_rows(delta)
    usual = 2 * math.ceil(math.log(1 / delta)) + 1
    assert rows % 2 == 1 and rows >= usual
    assert binom.sf((rows + 1) // 2 - 1, rows, 0.25) <= delta
    if rows > usual:  # raised: two rows fewer would not do
        assert binom.sf((rows - 1) // 2 - 1, rows - 2, 0.25) > delta
    assert sketch_shape(0.25) == (5, 128)


def test_median_of_the_raised_rows_misses_at_most_delta():
    """With the real sketch: rows of 128 columns (each within ε = 0.25 with probability
    3/4) and the 9 rows δ = 0.05 needs (the usual form gave 7, whose median misses with
    probability 0.071): over 900 (vector, seed) pairs the median misses at most δ of the
    time, plus three standard errors."""
    eps, delta = 0.25, 0.05
    rows = median_rows(delta)
    assert rows == 9
    size, trials = 1000, 300
    rng = np.random.default_rng(5)
    misses = 0
    for seed in range(trials):
        sk = AmsSketch(size, rows, 128, seed=1000 + seed)
        for v in vectors(rng, size):
            norm2 = float(v @ v)
            misses += abs(AmsSketch.estimate(sk(v)) - norm2) > eps * norm2
    n = 3 * trials
    assert misses / n <= delta + 3 * np.sqrt(delta * (1 - delta) / n)


def test_median_rows_refuses_delta_outside_zero_one():
    with pytest.raises(ValueError, match="delta must be in"):
        median_rows(1.0)
