"""Small Kafka helpers for the driver side (demo, command line, tests): topics, a
producer of JSON, and readers that follow a topic from its beginning.

Readers use ``assign()`` + ``seek_to_beginning()`` and count the records they observe;
they never derive counts from offsets (the local broker's offsets are not record counts,
DESIGN.md) and never use consumer groups (the local broker serves them nothing).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator

import orjson
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

__all__ = ["create_topics", "JsonProducer", "TopicReader", "predictions_in"]


def create_topics(bootstrap_servers: str, topics: list[str], partitions: int = 1, **client) -> None:
    """Create topics that do not exist yet (one partition each by default); ``client``
    holds kafka-python connection options (security)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers, client_id="omldm-admin", **client)
    try:
        existing = set(admin.list_topics())
        new = [NewTopic(t, partitions, 1) for t in topics if t not in existing]
        if new:
            try:
                admin.create_topics(new)
            except TopicAlreadyExistsError:
                pass
    finally:
        admin.close()


class JsonProducer:
    """Writes JSON values (orjson) or raw bytes to topics; ``flush()`` before counting.

    ``client``: kafka-python producer settings (``KafkaConnection.client_kwargs("producer")``);
    they win over this class's own (``acks=1``, ``linger_ms``, ``batch_size``, ...), as a
    user's Kafka properties win everywhere (:mod:`flink_jobs.connection`)."""

    def __init__(self, bootstrap_servers: str, linger_ms: int = 5,
                 max_request_size: int = 256 * 1024 * 1024, **client) -> None:
        settings = {"linger_ms": linger_ms, "batch_size": 256 * 1024, "acks": 1,
                    "enable_idempotence": False, "max_request_size": max_request_size, **client}
        self._p = KafkaProducer(bootstrap_servers=bootstrap_servers, **settings)
        self.sent: dict[str, int] = {}

    def send(self, topic: str, value: Any) -> None:
        data = value if isinstance(value, (bytes, bytearray)) else orjson.dumps(value)
        self._p.send(topic, data)
        self.sent[topic] = self.sent.get(topic, 0) + 1

    def flush(self) -> None:
        self._p.flush()

    def close(self) -> None:
        self._p.flush()
        self._p.close()


def predictions_in(value: Any) -> list | tuple:
    """The predictions one decoded record of the predictions topic holds: a JSON array's
    elements (written with ``JobConfig.prediction_arrays``), or the record's one prediction."""
    return value if isinstance(value, list) else (value,)


class TopicReader:
    """Follows every partition of one topic from the beginning (or from its end).

    ``poll()`` returns the values that arrived since the last call (bytes, or decoded
    JSON with ``json=True``; with ``arrays=True`` too, a record holding a JSON array gives
    its elements, in order: a predictions topic written with ``JobConfig.prediction_arrays``);
    ``count`` is the number of values returned so far.
    ``isolation_level="read_committed"`` reads only records of committed transactions
    (the outputs of a job with ``exactly_once_outputs``), each once its transaction
    commits; ``"read_uncommitted"`` (the default) reads everything as soon as it is written.

    Raises
    ------
    ValueError
        On another ``isolation_level``.
    RuntimeError
        When the topic does not appear within 10 s.
    """

    ISOLATION_LEVELS = ("read_uncommitted", "read_committed")

    def __init__(self, bootstrap_servers: str, topic: str, json: bool = True,
                 from_end: bool = False, isolation_level: str = "read_uncommitted",
                 arrays: bool = False, **client) -> None:
        if isolation_level not in self.ISOLATION_LEVELS:
            raise ValueError(f"isolation_level must be one of {self.ISOLATION_LEVELS}, "
                             f"got {isolation_level!r}")
        self.topic = topic
        self.json = json
        self.arrays = json and arrays
        settings = {"enable_auto_commit": False, "fetch_max_wait_ms": 50,
                    "isolation_level": isolation_level, **client}  # a user's properties win
        self.isolation_level = settings["isolation_level"]
        self.count = 0
        self._c = KafkaConsumer(bootstrap_servers=bootstrap_servers, **settings)
        parts = None
        deadline = time.monotonic() + 10
        while not parts and time.monotonic() < deadline:
            parts = self._c.partitions_for_topic(topic)
            if not parts:
                time.sleep(0.1)
        if not parts:
            raise RuntimeError(f"topic {topic!r} not found")
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        self._c.assign(tps)
        if from_end:
            self._c.seek_to_end(*tps)
            for tp in tps:
                self._c.position(tp)  # resolve now, before anything new is written
        else:
            self._c.seek_to_beginning(*tps)

    def poll(self, timeout_ms: int = 200) -> list[Any]:
        out = []
        for recs in self._c.poll(timeout_ms=timeout_ms, max_records=100_000).values():
            for r in recs:
                if not self.json:
                    out.append(r.value)
                    continue
                value = orjson.loads(r.value)
                if self.arrays:
                    out.extend(predictions_in(value))
                else:
                    out.append(value)
        self.count += len(out)
        return out

    def wait_for(self, predicate: Callable[[Any], bool], timeout: float) -> Any:
        """The first value (from now on) satisfying ``predicate``.

        Raises
        ------
        TimeoutError
            When none arrives within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for v in self.poll():
                if predicate(v):
                    return v
        raise TimeoutError(f"nothing matching on {self.topic!r} within {timeout} s")

    def drain(self, idle_ms: int = 300) -> Iterator[Any]:
        """Everything until a poll comes back empty."""
        while True:
            batch = self.poll(idle_ms)
            if not batch:
                return
            yield from batch

    def close(self) -> None:
        self._c.close()
