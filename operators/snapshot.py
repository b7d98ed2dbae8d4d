"""What spokes and hubs put in Flink keyed state: their kernel, pickled with cloudpickle.

PyFlink's ``PICKLED_BYTE_ARRAY`` state type pickles with the standard :mod:`pickle`, which
cannot serialize the closures that promises and ``then`` callbacks hold (papers/002
§3.1.3). :class:`Snapshot` reduces to cloudpickle bytes instead, and only when the state
backend serializes it: once per bundle and at each checkpoint barrier in process mode.

Checkpoints and savepoints are written and read by the job itself (Flink state, never a
Kafka topic); like the job's code they must come from a trusted place, and they restore
only into the same omldm version (docs/operations.md).
"""

from __future__ import annotations

from typing import Any

import cloudpickle

__all__ = ["Snapshot"]


def _load(data: bytes) -> "Snapshot":
    return Snapshot(cloudpickle.loads(data))


class Snapshot:
    """A holder of one kernel (:class:`~operators.spoke.SpokeKernel` or
    :class:`~operators.hub.HubKernel`) for ``ValueState(PICKLED_BYTE_ARRAY)``.

    >>> import pickle
    >>> pickle.loads(pickle.dumps(Snapshot({"f": lambda x: x + 1}))).kernel["f"](1)
    2
    """

    __slots__ = ("kernel",)

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def __reduce__(self):
        return _load, (cloudpickle.dumps(self.kernel),)
