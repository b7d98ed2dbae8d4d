"""Keys and indices that Flink's partitioning needs, computed without guessing.

Flink assigns a key to key group ``murmur(hash(key)) % max_parallelism`` and a key group
to subtask ``group * parallelism // max_parallelism`` (``KeyGroupRangeAssignment``). Small
integer keys 0..m-1 can therefore share a subtask while another stays idle. :func:`hub_keys`
picks, for each hub index j, the smallest non-negative int key that lands on subtask j.

PyFlink's ``key_by(..., key_type=Types.INT())`` hands Java the key wrapped twice in a
one-field ``Row`` (``Row(Row(k))``), whose ``hashCode`` is ``62 + k`` (``RowUtils.deepHashCodeRow``: kind INSERT = 0, then 31 * 1 + field per level).
Measured on Flink 2.0.1 over keys 0..63 and checked by ``tests/test_flink_routing.py``.
"""

from __future__ import annotations

__all__ = ["MAX_PARALLELISM", "KEY_HASH_OFFSET", "murmur_hash", "operator_index", "hub_keys", "spoke_keys",
           "subtask_index"]

MAX_PARALLELISM = 128
KEY_HASH_OFFSET = 62  # Java hashCode of PyFlink's Row(Row(k)) key is k + 62
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _to_int32(x: int) -> int:
    x &= _M32
    return x - (1 << 32) if x & 0x80000000 else x


def murmur_hash(code: int) -> int:
    """Flink's ``MathUtils.murmurHash(int)`` (non-negative int)."""
    c = code & _M32
    c = (c * 0xCC9E2D51) & _M32
    c = _rotl(c, 15)
    c = (c * 0x1B873593) & _M32
    c = _rotl(c, 13)
    c = (c * 5 + 0xE6546B64) & _M32
    c ^= 4
    c ^= c >> 16
    c = (c * 0x85EBCA6B) & _M32
    c ^= c >> 13
    c = (c * 0xC2B2AE35) & _M32
    c ^= c >> 16
    v = _to_int32(c)
    if v >= 0:
        return v
    return -v if v != -(1 << 31) else 0


def operator_index(key: int, parallelism: int, max_parallelism: int = MAX_PARALLELISM) -> int:
    """The subtask that a PyFlink ``key_by`` with ``Types.INT()`` key ``key`` goes to."""
    group = murmur_hash(key + KEY_HASH_OFFSET) % max_parallelism
    return group * parallelism // max_parallelism


def hub_keys(n_hubs: int, max_parallelism: int = MAX_PARALLELISM) -> list[int]:
    """``keys[j]``: an int key that Flink routes to subtask j of an n_hubs-wide operator
    (the smallest such key)."""
    return spoke_keys(n_hubs, n_hubs, max_parallelism)


def spoke_keys(n_spokes: int, parallelism: int | None = None,
               max_parallelism: int = MAX_PARALLELISM) -> list[int]:
    """``keys[i]``: an int key that Flink routes to subtask ``i % parallelism`` of a
    ``parallelism``-wide operator, all distinct: spoke i's key when ``n_spokes`` spokes are
    dealt round-robin over that many subtasks (``None``: one spoke per subtask, the keys of
    :func:`hub_keys`).

    >>> [operator_index(k, 3) for k in spoke_keys(3)]
    [0, 1, 2]
    >>> [operator_index(k, 2) for k in spoke_keys(5, 2)]
    [0, 1, 0, 1, 0]

    Raises
    ------
    ValueError
        Unless ``1 <= parallelism <= n_spokes``.
    """
    width = n_spokes if parallelism is None else parallelism
    if not 1 <= width <= n_spokes:
        raise ValueError(f"spoke parallelism must be between 1 and the spokes ({n_spokes}), got {width}")
    keys: list[int] = []
    k = 0
    for i in range(n_spokes):
        while operator_index(k, width, max_parallelism) != i % width or k in keys:
            k += 1
        keys.append(k)
        k = 0
    return keys


def subtask_index(runtime_context) -> int:
    """This subtask's index, in both process and thread mode (in thread mode the public
    ``get_index_of_this_subtask`` fails on a pemja object; DESIGN.md gotchas)."""
    try:
        return runtime_context.get_index_of_this_subtask()
    except Exception:
        return runtime_context._runtime_context.getTaskInfo().getIndexOfThisSubtask()
