"""Set-up and run-time helpers: fetching and checking the connector jars and the
Shuttle data file, and starting the embedded Kafka-compatible broker on loopback.

Nothing here is needed on a real cluster, where the operator brings Kafka and the
connector jars (see the README's operations section).
"""

__all__ = ["assets", "broker"]
