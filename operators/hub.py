"""The hub operator: a ``KeyedProcessFunction`` keyed by hub id (one hub per subtask; see
:mod:`operators.routing`). It hosts one hub node per pipeline; hub→spoke envelopes, in
incarnation frames (:mod:`operators.feedback`), go to the main output (the ``psMessages``
Kafka topic, read back by the spokes), responses and weights records (the weights topic,
:mod:`operators.weights`) to side outputs. A weights publication held back by its rate
limit is published by a processing-time timer.

Everything a hub holds (its pipelines' hub nodes with the global model shards, protocol
state, middleware sequence numbers and pending promises, the lifecycle bookkeeping) is one
plain-Python :class:`~operators.hub_kernel.HubKernel` per hub key (the logic is there:
this module only hosts it), kept in that key's ``ValueState`` and handed to
the state after every element (a write-cache reference in process mode, serialized at the
bundle's end and so at every checkpoint barrier).
"""

from __future__ import annotations

import logging

from pyflink.common import Types
from pyflink.datastream import KeyedProcessFunction
from pyflink.datastream.state import ValueStateDescriptor

from operators.hub_kernel import HubKernel
from operators.metrics import HUB_METRICS, OperatorMetrics
from operators.routing import subtask_index
from operators.service import import_protocols
from operators.snapshot import Snapshot

__all__ = ["HubFunction"]

log = logging.getLogger(__name__)


class HubFunction(KeyedProcessFunction):
    """The Flink host of the :class:`~operators.hub_kernel.HubKernel` of each hub key on
    this subtask.

    Parameters
    ----------
    n_spokes : int
    hub_keys : list[int]
        ``hub_keys[j]`` is the Flink key of hub j.
    responses_tag : OutputTag
    weights_tag : OutputTag or None
        Where weights records go (bytes); None: nowhere (``limits["weights_every_ms"]``
        None).
    limits : dict
        As for :class:`HubKernel`.
    protocol_modules : tuple[str, ...]
        Modules registering user protocols, imported in ``open``.
    persist : bool
        Hand each kernel to keyed state after every element (checkpoints, savepoints).
    metrics : bool
        Register the Flink metrics of :mod:`operators.metrics`.
    """

    def __init__(self, n_spokes: int, hub_keys: list[int], responses_tag, weights_tag=None,
                 limits: dict | None = None, protocol_modules: tuple[str, ...] = (),
                 persist: bool = True, metrics: bool = True) -> None:
        self.n_spokes = n_spokes
        self.hub_keys = hub_keys
        self.responses_tag = responses_tag
        self.weights_tag = weights_tag
        self.limits = limits
        self.protocol_modules = protocol_modules
        self.persist = persist
        self.metrics_on = metrics

    def open(self, runtime_context) -> None:
        import_protocols(self.protocol_modules)
        self.subtask = subtask_index(runtime_context)
        self.metrics = OperatorMetrics(runtime_context, HUB_METRICS) if self.metrics_on else None
        self.index_of = {k: j for j, k in enumerate(self.hub_keys)}
        self.state = runtime_context.get_state(
            ValueStateDescriptor("hub", Types.PICKLED_BYTE_ARRAY()))
        self.kernels: dict[int, HubKernel] = {}
        self.snapshots: dict[int, Snapshot] = {}
        self.timer_at: dict[int, int] = {}  # hub key -> when its weights timer fires (ms)

    def _kernel(self, key: int) -> HubKernel:
        kernel = self.kernels.get(key)
        if kernel is None:
            hub = self.index_of[key]
            saved = self.state.value() if self.persist else None
            kernel = saved.kernel if saved is not None else None
            if kernel is None:
                kernel = HubKernel(hub, self.n_spokes, self.limits, self.subtask)
            else:
                kernel.restored()
                kernel.subtask = self.subtask
                log.info("hub %d restored: %d pipeline(s), restore %d", hub, len(kernel.nodes),
                         kernel.restores)
            self.kernels[key] = kernel
            self.snapshots[key] = Snapshot(kernel)
        return kernel

    def process_element(self, value, ctx):
        key = value[0]
        kernel = self._kernel(key)
        kernel.on_message(bytes(value[1]))
        yield from self._after(key, kernel, ctx)

    def on_timer(self, timestamp: int, ctx):
        """A held-back weights publication is due. The metrics are left to the next
        element: in process mode what a timer's callback does to a counter never reaches
        Flink's reporters (seen on the spokes' lull timers, ``operators.spoke``)."""
        key = ctx.get_current_key()
        kernel = self._kernel(key)
        kernel.flush_weights()
        yield from self._after(key, kernel, ctx, refresh=False)

    def _after(self, key: int, kernel: HubKernel, ctx, refresh: bool = True):
        if self.persist:
            self.state.update(self.snapshots[key])
        if refresh and self.metrics is not None:
            self.metrics.refresh(kernel)
        due = kernel.weights_due_in()
        if due is not None:
            timers = ctx.timer_service()
            now = timers.current_processing_time()
            if self.timer_at.get(key, 0) <= now:  # no timer of ours is waiting
                self.timer_at[key] = now + int(due * 1000) + 1
                timers.register_processing_time_timer(self.timer_at[key])
        if kernel.out:
            out, kernel.out = kernel.out, []
            for stream, v in out:
                if stream is None:
                    yield v
                elif stream == "weights":
                    if self.weights_tag is not None:
                        yield self.weights_tag, v
                else:
                    yield self.responses_tag, v
