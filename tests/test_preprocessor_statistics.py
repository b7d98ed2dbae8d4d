"""Mergeable preprocessor statistics (learning/preprocessors/moments.py): the statistics
of records learned by several instances, merged with Chan et al.'s parallel update (1983),
equal those of one instance that learned them all, and so do the transforms of instances
that load them. Properties are checked with hypothesis on random shards and mini-batches.
"""

from __future__ import annotations

from functools import reduce

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from learning.preprocessors import (FeatureSelector, MinMaxScaler, PolynomialFeatures,
                                    RunningMeanVariance, StandardScaler, StatImputer)

STATEFUL = [StandardScaler, MinMaxScaler, RunningMeanVariance, StatImputer]
RTOL = 1e-9
SETTINGS = settings(max_examples=60, deadline=None)

# |x| <= 1e3 on a grid of 1/16: a feature is constant or spread by >= 1/16, so scaling
# is well conditioned and one pass and merged statistics agree to ~1e-9 relative.
GRID = st.integers(-16_000, 16_000).map(lambda k: k / 16)
FLOATS = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, allow_subnormal=False)
# the grid, a value missing (NaN) one time in three: what the imputer takes
MISSING = st.one_of(GRID, GRID, st.just(np.nan))


def _split(draw, n: int, max_parts: int, min_parts: int = 1) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` covering ``range(n)`` in order, empty parts allowed."""
    k = draw(st.integers(min_parts, max_parts))
    cuts = sorted(draw(st.lists(st.integers(0, n), min_size=k - 1, max_size=k - 1)))
    bounds = [0, *cuts, n]
    return list(zip(bounds, bounds[1:]))


@st.composite
def streams(draw, elements=GRID, min_shards: int = 1, max_shards: int = 5,
            max_records: int = 40):
    """``(X, shards)``: ``X (n, d) float64`` and, per shard, its mini-batches in order
    (the shards' concatenation is ``X``)."""
    d = draw(st.integers(1, 5))
    n = draw(st.integers(0, max_records))
    X = draw(arrays(np.float64, (n, d), elements=elements))
    shards = []
    for a, b in _split(draw, n, max_shards, min_shards):
        shards.append([X[a + i:a + j] for i, j in _split(draw, b - a, 4)])
    return X, shards


def _learned(cls, batches):
    p = cls()
    for B in batches:
        p.learn_transform(B)
    return p


def _merge_all(cls, stats):
    return reduce(cls.merge_statistics, stats, {"n": 0})


def _scale(X: np.ndarray) -> float:
    return max(1.0, float(np.abs(X).max(initial=0.0)))


def assert_same_statistics(got: dict, want: dict, scale: float, n_total: int) -> None:
    """Equal counts, keys and (up to rounding, relative to the data's scale) arrays."""
    assert set(got) == set(want)
    assert type(got["n"]) is int and got["n"] == want["n"]
    for key in set(want) - {"n"}:
        assert got[key].dtype == np.float64 and got[key].ndim == 1
        atol = RTOL * (n_total * scale * scale if key == "m2" else scale)
        np.testing.assert_allclose(got[key], want[key], rtol=RTOL, atol=atol, err_msg=key)


def assert_same_transform(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL)


# --- properties ---------------------------------------------------------------------------

@pytest.mark.parametrize("cls", STATEFUL)
@pytest.mark.parametrize("elements", [GRID, FLOATS], ids=["grid", "floats"])
@SETTINGS
@given(data=st.data())
def test_merged_shards_equal_one_pass(cls, elements, data):
    X, shards = data.draw(streams(elements=elements))
    one = _learned(cls, [B for batches in shards for B in batches])
    merged = _merge_all(cls, [_learned(cls, batches).statistics() for batches in shards])
    assert_same_statistics(merged, one.statistics(), _scale(X), X.shape[0])


@pytest.mark.parametrize("cls", STATEFUL)
@SETTINGS
@given(stream=streams(min_shards=2, max_shards=2))
def test_subtract_inverts_merge(cls, stream):
    X, (batches_a, batches_b) = stream
    a = _learned(cls, batches_a).statistics()
    b = _learned(cls, batches_b).statistics()
    total = cls.merge_statistics(a, b)
    rest = cls.subtract_statistics(total, a)
    if cls is MinMaxScaler:  # extremes are not subtracted: the count is, and merging is exact
        assert rest["n"] == b["n"]
        assert_same_statistics(cls.merge_statistics(a, rest), total, 1.0, 0)
    else:
        assert_same_statistics(rest, b, _scale(X), X.shape[0])
    assert cls.subtract_statistics(total, total) == {"n": 0}


@pytest.mark.parametrize("cls", STATEFUL)
@SETTINGS
@given(stream=streams(), more=arrays(np.float64, (3, 5), elements=GRID))
def test_loaded_statistics_transform_like_one_pass(cls, stream, more):
    X, shards = stream
    one = _learned(cls, [B for batches in shards for B in batches])
    p = cls()
    p.load_statistics(_merge_all(cls, [_learned(cls, b).statistics() for b in shards]))
    assert_same_transform(p.transform(X), one.transform(X))
    # learning goes on from the loaded statistics as from one's
    more = more[:, :X.shape[1]]
    got_test, got = p.prequential_transform(more[:2])
    want_test, want = one.prequential_transform(more[:2])
    assert_same_transform(got_test, want_test)
    assert_same_transform(got, want)
    assert_same_transform(p.learn_transform(more[2:]), one.learn_transform(more[2:]))
    assert_same_transform(p.transform(X), one.transform(X))


@pytest.mark.parametrize("cls", STATEFUL)
@SETTINGS
@given(stream=streams(min_shards=6, max_shards=6))
def test_hub_merges_spokes_deltas_like_one_pass(cls, stream):
    """3 spokes, 2 synchronizations: each spoke sends the statistics of its records since
    the global statistics it last installed, the hub merges them into the global ones,
    every spoke installs those, and then scales like one instance that learned it all."""
    X, shards = stream
    spokes = [cls() for _ in range(3)]
    one = cls()
    G = base = {"n": 0}
    for sync in range(2):
        for i, spoke in enumerate(spokes):
            for B in shards[3 * sync + i]:
                spoke.learn_transform(B)
                one.learn_transform(B)
        deltas = [cls.subtract_statistics(s.statistics(), base) for s in spokes]
        G = reduce(cls.merge_statistics, deltas, G)
        for spoke in spokes:
            spoke.load_statistics(G)
        base = G
        seen = np.vstack([B for part in shards[:3 * sync + 3] for B in part] or [X[:0]])
        for spoke in spokes:
            assert_same_statistics(spoke.statistics(), one.statistics(), _scale(X),
                                   X.shape[0])
            assert_same_transform(spoke.transform(seen), one.transform(seen))


@SETTINGS
@given(data=st.data())
def test_the_imputers_statistics_of_records_with_missing_values_merge_as_one_pass(data):
    """Per feature its own count of values present: merged shards, a hub's merges of
    spokes' deltas and loaded statistics fill missing values as one instance that learned
    every record."""
    X, shards = data.draw(streams(elements=MISSING, min_shards=2))
    cls = StatImputer
    one = _learned(cls, [B for batches in shards for B in batches])
    stats = [_learned(cls, batches).statistics() for batches in shards]
    merged = _merge_all(cls, stats)
    assert_same_statistics(merged, one.statistics(), _scale(np.nan_to_num(X)), X.shape[0])
    rest = cls.subtract_statistics(merged, stats[0])
    assert_same_statistics(rest, _merge_all(cls, stats[1:]), _scale(np.nan_to_num(X)),
                           X.shape[0])
    p = cls()
    p.load_statistics(merged)
    assert_same_transform(p.transform(X), one.transform(X))
    assert not np.isnan(p.transform(X)).any()


# --- plain checks -------------------------------------------------------------------------

@pytest.mark.parametrize("p", [FeatureSelector(indices=[1, 0]), PolynomialFeatures(degree=2)],
                         ids=["selector", "polynomial"])
def test_stateless_preprocessors_have_no_statistics(p):
    X = np.array([[1.0, 2.0], [3.0, 4.0]])
    out = p.learn_transform(X)
    assert p.statistics() is None
    cls = type(p)
    assert cls.merge_statistics(None, None) is None
    assert cls.subtract_statistics(None, None) is None
    p.load_statistics(None)
    p.load_statistics({"n": 0})
    np.testing.assert_array_equal(p.transform(X), out)
    with pytest.raises(ValueError, match="keeps no statistics"):
        p.load_statistics({"n": 2, "mean": np.zeros(2), "m2": np.zeros(2)})


@pytest.mark.parametrize("cls", STATEFUL)
def test_merge_helpers_accept_none_and_empty(cls):
    s = _learned(cls, [np.array([[1.0, 2.0], [3.0, 5.0]])]).statistics()
    for empty in (None, {"n": 0}):
        assert_same_statistics(cls.merge_statistics(s, empty), s, 1.0, 0)
        assert_same_statistics(cls.merge_statistics(empty, s), s, 1.0, 0)
        assert_same_statistics(cls.subtract_statistics(s, empty), s, 1.0, 0)
        assert cls.merge_statistics(empty, None) == {"n": 0}
        assert cls.subtract_statistics(empty, {"n": 0}) == {"n": 0}


@pytest.mark.parametrize("cls", STATEFUL)
def test_empty_statistics_round_trip(cls):
    p = cls()
    assert p.statistics() == {"n": 0}
    p.load_statistics({"n": 0})
    assert p.statistics() == {"n": 0} and p.n_features is None
    X = np.array([[1.0, 2.0], [3.0, 5.0]])
    p.learn_transform(X)
    p.load_statistics({"n": 0})  # back to no records; the width stays
    assert p.statistics() == {"n": 0} and p.n_features == 2
    np.testing.assert_array_equal(p.transform(X), cls().transform(X))
    p.load_statistics(None)
    assert p.statistics() == {"n": 0}
    np.testing.assert_array_equal(p.learn_transform(X), cls().learn_transform(X))


@pytest.mark.parametrize("cls", STATEFUL)
def test_load_statistics_rejects_bad_statistics(cls):
    p = _learned(cls, [np.array([[1.0, 2.0], [3.0, 5.0]])])
    good = p.statistics()
    a, b = [k for k in good if k != "n"]
    wide = {"n": 2, a: np.zeros(3), b: np.ones(3)}
    with pytest.raises(ValueError, match="3 features, expected 2"):
        p.load_statistics(wide)
    with pytest.raises(ValueError, match="n must be an integer >= 0"):
        p.load_statistics({**good, "n": -1})
    with pytest.raises(ValueError, match="finite"):
        p.load_statistics({**good, a: np.array([np.nan, 0.0])})
    with pytest.raises(ValueError, match="required"):
        p.load_statistics({"n": 2, a: good[a]})
    with pytest.raises(ValueError, match="unknown statistic"):
        p.load_statistics({**good, "var": good[a]})
    assert_same_statistics(p.statistics(), good, 1.0, 0)  # nothing changed
    with pytest.raises(ValueError, match="cannot combine"):
        cls.merge_statistics(good, wide)
    with pytest.raises(ValueError, match="more records"):
        cls.subtract_statistics(good, {**good, "n": 3})
    cls().load_statistics(wide)  # a fresh instance takes any width


def test_load_statistics_rejects_inconsistent_values():
    with pytest.raises(ValueError, match="m2 must be >= 0"):
        StandardScaler().load_statistics({"n": 1, "mean": [0.0], "m2": [-1.0]})
    with pytest.raises(ValueError, match="max must be >= min"):
        MinMaxScaler().load_statistics({"n": 1, "min": [1.0], "max": [0.0]})


@pytest.mark.parametrize("cls", STATEFUL)
def test_statistics_are_copies(cls):
    p = _learned(cls, [np.array([[1.0, 2.0], [3.0, 5.0]])])
    s = p.statistics()
    before = p.statistics()
    for key in set(s) - {"n"}:
        s[key][:] = 99.0
    assert_same_statistics(p.statistics(), before, 1.0, 0)
    q = cls()
    q.load_statistics(before)
    for key in set(before) - {"n"}:
        before[key][:] = -7.0
    assert_same_statistics(q.statistics(), p.statistics(), 1.0, 0)
    merged = cls.merge_statistics(p.statistics(), None)
    for key in set(merged) - {"n"}:
        merged[key][:] = 5.0
    assert_same_statistics(p.statistics(), q.statistics(), 1.0, 0)


@pytest.mark.parametrize("cls", STATEFUL)
def test_json_state_survives_loaded_statistics(cls):
    p = cls()
    p.load_statistics(_learned(cls, [np.array([[1.0, 2.0], [3.0, 5.0], [0.5, 1.0]])])
                      .statistics())
    q = cls.from_json(p.to_json())
    assert_same_statistics(q.statistics(), p.statistics(), 1.0, 0)


def test_constant_feature_stays_exactly_constant():
    """A constant feature keeps m2 == 0 exactly through subtract and merge, so it scales
    to 0, not to rounding noise divided by rounding noise."""
    spoke = StandardScaler()
    spoke.learn_transform(np.array([[0.1, 1.0], [0.1, 2.0], [0.1, 4.0]]))
    base = spoke.statistics()
    spoke.learn_transform(np.array([[0.1, 3.0]]))
    delta = StandardScaler.subtract_statistics(spoke.statistics(), base)
    assert delta["mean"][0] == 0.1 and delta["m2"][0] == 0.0
    spoke.load_statistics(StandardScaler.merge_statistics(base, delta))
    assert spoke.var[0] == 0.0
    assert spoke.transform(np.array([[0.1, 2.5]]))[0, 0] == 0.0
