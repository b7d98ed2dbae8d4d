"""The spoke operator: a ``KeyedCoProcessFunction`` over (data records, messages), keyed by
spoke (one key per spoke, :func:`operators.routing.spoke_keys`: one spoke per subtask, or
several dealt round-robin over fewer subtasks, ``JobConfig.spoke_parallelism``; the keys are
computed in Java, so no Python key selector runs on the data path).

Input 1 carries training and forecasting records, each the JSON of an object ``{"id",
"features", "label"}`` or a JSON array of them, in batches assembled in Java by
``omldm.RecordBatcher`` (``flink_jobs/java``; bytes, see
:func:`middleware.codec.record_batch`), or, with
``max_batch_delay_ms = 0``, as one string each, tagged by the job's SQL source with the
topic they came from (``T`` training, ``P`` forecasting). They cross from the JVM into
Python once, here: parse, route to every pipeline, preprocess, predict or buffer into a
mini-batch, fit — record by record, in the order they came.

Input 2 carries messages as bytes: hub→spoke envelopes in incarnation frames (first byte
0xFE, :mod:`operators.feedback`, :func:`middleware.codec.frame`, read back from the
``psMessages`` topic: the Kafka feedback loop), spoke→spoke envelopes and their channels'
bookkeeping in sibling frames (first byte 0xFC, :func:`middleware.codec.sibling_frame`, the
same topic) and JSON control requests, one copy per spoke key.

Outputs: predictions (main output, JSON strings; with ``join_predictions`` the predictions
of one element are joined by newlines into one string, one crossing back into Java instead
of one per prediction, and ``omldm.LineSplitter`` splits them again; with
``prediction_arrays`` they leave as JSON arrays, :func:`json_arrays`), spoke→hub messages
(side output ``(hub_key, bytes)``, keyed by hub id downstream), spoke→spoke messages (side
output of sibling frame bytes, written to ``psMessages`` and routed back by destination
spoke), responses and dead letters (JSON).

Everything a spoke holds (pipelines, local models, preprocessor statistics, mini-batch
buffers, protocol state, middleware sequence numbers and pending promises, counters) is one
plain-Python :class:`~operators.spoke_kernel.SpokeKernel` (the logic is there: this module
only hosts it, one kernel per spoke key), kept in the spoke key's ``ValueState`` and handed to the
state after every element. In process mode that is a reference put in PyFlink's write
cache, serialized once per bundle and at every checkpoint barrier (the bundle is finished
before the barrier), so a checkpoint holds each spoke exactly as of the records before the
barrier. In thread mode every update serializes, so it is done only when state must persist
(checkpointing on, see :attr:`flink_jobs.config.JobConfig.persist_state`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator

from pyflink.common import Types
from pyflink.datastream import KeyedCoProcessFunction
from pyflink.datastream.state import ValueStateDescriptor

from operators.metrics import SPOKE_METRICS, OperatorMetrics
from operators.routing import spoke_keys as spoke_keys_of, subtask_index
from operators.service import import_protocols
from operators.snapshot import Snapshot
from operators.spoke_kernel import HUBS, SPOKES, SpokeKernel

__all__ = ["SpokeFunction", "json_arrays", "PREDICTION_ARRAY_CHARS"]

#: The most characters of one JSON array of predictions (``JobConfig.prediction_arrays``):
#: 240,000 characters are at most 960,000 bytes in UTF-8, under the Kafka producer's default
#: ``max.request.size`` and the broker's ``message.max.bytes`` (1 MiB each).
PREDICTION_ARRAY_CHARS = 240_000


def json_arrays(values: list[str], limit: int = PREDICTION_ARRAY_CHARS) -> Iterator[str]:
    """JSON texts as JSON array texts of them: ``['{"id":1}', '{"id":2}']`` →
    ``'[{"id":1},{"id":2}]'``, in order, a new array wherever the next value would take
    one past ``limit`` characters (one value longer than that goes in an array alone).
    Yields nothing for no values."""
    if sum(map(len, values)) + len(values) + 1 <= limit:  # the usual case: one array
        if values:
            yield "[" + ",".join(values) + "]"
        return
    start, size = 0, 1
    for i, v in enumerate(values):
        if i > start and size + len(v) + 1 > limit:
            yield "[" + ",".join(values[start:i]) + "]"
            start, size = i, 1
        size += len(v) + 1
    yield "[" + ",".join(values[start:]) + "]"

log = logging.getLogger(__name__)


class SpokeFunction(KeyedCoProcessFunction):
    """The Flink host of a :class:`SpokeKernel`: input 1 is the data (key: this spoke),
    input 2 the messages (requests replicated to every spoke key; hub→spoke envelopes
    keyed by their destination spoke).

    Parameters
    ----------
    n_spokes, n_hubs, hub_keys, limits, execution_mode
        As for :class:`~operators.spoke_kernel.SpokeKernel`.
    to_hubs_tag, responses_tag, dead_letters_tag : OutputTag
        Side outputs.
    to_spokes_tag : OutputTag, optional
        Side output of sibling frames (bytes): spoke→spoke envelopes, and the resyncs and
        acknowledgements every pipeline's spokes exchange after a restore and at a Query.
        Without it they are dropped, and a protocol that talks to sibling spokes waits for
        good.
    protocol_modules : tuple[str, ...]
        Modules registering user protocols, imported in ``open``.
    persist : bool
        Hand the kernel to keyed state after every element (needed for checkpoints and
        savepoints; free in process mode, a serialization per element in thread mode).
    metrics : bool
        Register the Flink metrics of :mod:`operators.metrics`.
    join_predictions : bool
        Emit the predictions of one element as one string, joined by ``\n``, to be split
        in Java (``omldm.LineSplitter``): one crossing back per element instead of one per
        prediction. Off: one string per prediction.
    prediction_arrays : bool
        Emit the predictions of one element as JSON arrays of them (:func:`json_arrays`,
        at most :data:`PREDICTION_ARRAY_CHARS` characters each), one Kafka record each on
        the predictions topic (``JobConfig.prediction_arrays``); ``join_predictions`` is
        then moot.
    switch_interval_ms : int
        Thread mode: set the interpreter's switch interval (``sys.setswitchinterval``,
        milliseconds) in ``open``; 0 leaves it (:attr:`flink_jobs.config.JobConfig.
        switch_interval_ms`).
    spoke_keys : list[int], optional
        Spoke i's key, for each i (:func:`operators.routing.spoke_keys`); a subtask hosts
        the kernel of every key that reaches it. Default: one spoke per subtask.
    parallelism : int, optional
        This operator's parallelism, the ``parallelism`` those keys were made for; fewer
        than ``n_spokes`` subtasks each host several spokes. Default: ``n_spokes``.
    idle_after_ms : int
        A processing-time timer per spoke key fires every this many milliseconds and calls
        :meth:`SpokeKernel.on_lull` (``JobConfig.idle_after_ms``); 0: no timer.
    """

    def __init__(self, n_spokes: int, n_hubs: int, hub_keys: list[int], to_hubs_tag,
                 responses_tag, dead_letters_tag, limits: dict | None = None,
                 protocol_modules: tuple[str, ...] = (), execution_mode: str = "thread",
                 persist: bool = True, metrics: bool = True, to_spokes_tag=None,
                 join_predictions: bool = False, switch_interval_ms: int = 0,
                 spoke_keys: list[int] | None = None, parallelism: int | None = None,
                 prediction_arrays: bool = False, idle_after_ms: int = 0) -> None:
        self.n_spokes = n_spokes
        self.n_hubs = n_hubs
        self.hub_keys = hub_keys
        self.to_hubs_tag = to_hubs_tag
        self.to_spokes_tag = to_spokes_tag
        self.responses_tag = responses_tag
        self.dead_letters_tag = dead_letters_tag
        self.limits = limits
        self.protocol_modules = protocol_modules
        self.execution_mode = execution_mode
        self.persist = persist
        self.metrics_on = metrics
        self.join_predictions = join_predictions
        self.prediction_arrays = prediction_arrays
        self.switch_interval_ms = switch_interval_ms
        self.spoke_keys = spoke_keys_of(n_spokes) if spoke_keys is None else list(spoke_keys)
        self.parallelism = n_spokes if parallelism is None else parallelism
        self.idle_after_ms = idle_after_ms

    def open(self, runtime_context) -> None:
        import_protocols(self.protocol_modules)
        if self.execution_mode == "thread" and self.switch_interval_ms > 0:
            # one interpreter for every spoke and hub of this TaskManager: a crossing runs
            # to its end instead of handing it over every 5 ms (JobConfig.switch_interval_ms)
            sys.setswitchinterval(self.switch_interval_ms / 1000.0)
        self.subtask = subtask_index(runtime_context)
        self.index_of = {key: i for i, key in enumerate(self.spoke_keys)}
        # several spokes in this subtask: every element says whose it is
        self.shared = self.n_spokes > self.parallelism
        self.metrics = OperatorMetrics(runtime_context, SPOKE_METRICS) if self.metrics_on else None
        self.state = runtime_context.get_state(
            ValueStateDescriptor("spoke", Types.PICKLED_BYTE_ARRAY()))
        # spoke key -> its kernel and the Snapshot handed to keyed state; with one spoke
        # per subtask a single entry
        self.kernels: dict[int, tuple[SpokeKernel, Snapshot]] = {}
        self.hosted: list[SpokeKernel] = []  # the same kernels, for the metrics
        self.key: int | None = None  # the key of the last element's kernel
        self.armed: set = set()  # spoke keys whose lull timer is registered
        self.tags = {HUBS: self.to_hubs_tag, "responses": self.responses_tag,
                     "deadLetters": self.dead_letters_tag, SPOKES: self.to_spokes_tag}

    def _kernel(self, ctx) -> SpokeKernel:
        """The kernel of the element's spoke key, made or restored from keyed state on its
        first element; with one spoke per subtask the key is asked for once."""
        if self.key is None or self.shared:
            key = ctx.get_current_key()
            self.key = key if isinstance(key, int) else key[0]  # Row(k) from Java's keyBy
        held = self.kernels.get(self.key)
        if held is not None:
            return held[0]
        saved = self.state.value() if self.persist else None
        kernel = saved.kernel if saved is not None else None
        if kernel is None:
            kernel = SpokeKernel(self.index_of.get(self.key, self.subtask), self.n_spokes,
                                 self.n_hubs, self.hub_keys, self.limits, self.execution_mode)
        else:
            kernel.restored()
            log.info("spoke %d restored: %d pipeline(s), restore %d", kernel.index,
                     len(kernel.nodes), kernel.restores)
        kernel.subtask = self.subtask
        self.kernels[self.key] = (kernel, Snapshot(kernel))
        self.hosted.append(kernel)
        return kernel

    def _emit(self, kernel: SpokeKernel, refresh: bool = True):
        if self.persist:
            self.state.update(self.kernels[self.key][1])
        if refresh and self.metrics is not None:
            self.metrics.refresh(kernel if len(self.hosted) == 1 else self.hosted)
        if kernel.out:
            out, kernel.out = kernel.out, []
            tags = self.tags
            predictions = [] if self.join_predictions or self.prediction_arrays else None
            for stream, value in out:
                if stream is None:
                    if predictions is None:
                        yield value
                    else:
                        predictions.append(value)
                elif tags[stream] is not None:
                    yield tags[stream], value
            if predictions:
                if self.prediction_arrays:
                    yield from json_arrays(predictions)
                else:
                    yield "\n".join(predictions)

    def process_element1(self, value, ctx):
        kernel = self._kernel(ctx)
        if isinstance(value, str):
            kernel.on_data(value)
        else:
            # a push leaves as soon as it is made, not after the whole batch: in thread
            # mode Java forwards each yielded element at once (process mode's bundles
            # hold them anyway)
            tags = self.tags
            for _ in kernel.batch_steps(bytes(value)):
                for stream, value_ in kernel.take_messages():
                    if tags[stream] is not None:
                        yield tags[stream], value_
        self._arm(ctx)
        yield from self._emit(kernel)

    def process_element2(self, value, ctx):
        kernel = self._kernel(ctx)
        kernel.on_message(bytes(value))
        self._arm(ctx)
        yield from self._emit(kernel)

    def _arm(self, ctx) -> None:
        """Register the lull timer of this element's spoke key unless one is waiting: every
        key gets its first with the Create that reaches every spoke (``requests``), and
        each firing registers the next (:meth:`on_timer`). A restore brings Flink's timers
        back with the state; this set starts empty, so a restored key may get a second,
        which only makes its checks more frequent."""
        if self.idle_after_ms and self.key not in self.armed:
            self.armed.add(self.key)
            timers = ctx.timer_service()
            timers.register_processing_time_timer(
                timers.current_processing_time() + self.idle_after_ms)

    def on_timer(self, timestamp: int, ctx):
        """The lull timer of a spoke key (:meth:`SpokeKernel.on_lull`). The metrics are
        left to the next element: in process mode a counter increased in a timer's
        callback never reached Flink's reporters (a scrape stayed 1,464 records short of
        a Query's ``fitted`` for good, ``tests/test_cluster.py``), and the counters only
        send what changed since their last refresh."""
        kernel = self._kernel(ctx)
        self.armed.discard(self.key)
        kernel.on_lull()
        self._arm(ctx)
        yield from self._emit(kernel, refresh=False)
