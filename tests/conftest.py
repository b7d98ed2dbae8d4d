"""Shared fixtures: one real local broker for the whole run (tests that touch Kafka or
Flink run against it and a real Flink MiniCluster, never mocks)."""

from __future__ import annotations

import pytest

from deploy.broker import LocalBroker


@pytest.fixture(scope="session")
def broker():
    with LocalBroker() as b:
        yield b
