"""Job wiring: the Flink topology (:mod:`flink_jobs.job`), its configuration
(:mod:`flink_jobs.config`), the driver-side session used by the demo and the tests
(:mod:`flink_jobs.session`), and the ``omldm`` command line (:mod:`flink_jobs.cli`)."""

__all__ = ["config", "job", "session", "demo", "cli", "kafka_io"]
