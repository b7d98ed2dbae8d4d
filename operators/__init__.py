"""Kernels that host middleware nodes: the Flink operators (``spoke.py``: a
``CoProcessFunction`` over the connected data and message streams; ``hub.py``: a
``KeyedProcessFunction`` keyed by hub id) and an in-process kernel for tests (``local.py``).

Operators hold no ML logic: they translate Flink callbacks into node calls and node sends
into Flink outputs (papers/002 §3.2).
"""

__all__ = []
