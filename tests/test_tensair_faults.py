"""TensAIR (papers/000 Algorithm 1) across a TaskManager kill, on the real standalone
session cluster of tests/test_faults.py (its fixtures and :class:`Scenario`): the replicas'
updates travel spoke→spoke through ``psMessages`` in sibling frames
(:mod:`operators.feedback`), so after the restore each replica applies every other
replica's updates exactly once, and none that the dead timeline sent.

The job (process mode, 3 spokes, 1 hub, checkpoints every 2 s, restarts after 5 s) counts a warm-up of 2,000
Shuttle records, then the feeder writes 12,000 more; 1 s after its burst of 2,000, the
TaskManager running a spoke is killed (with its Python workers); a standby TaskManager
started before the feed gives the restart its 3 slots at once. At the end: every training record
fitted once and every forecasting record predicted once (the Query's counts), and for each
pair of replicas, the updates j applied from i equal those i made: ``clock_j[i] ==
clock_i[i]`` in the Query's per-spoke ``clock`` once the loop drained, and they are the
same updates (the replicas' ``spread`` is rounding only; one update of a dead timeline
applied in place of the live one with its sequence number would keep the clocks equal and
set the replicas apart). Dead sibling messages dropped and frames sent again are printed.
"""

from __future__ import annotations

import time

import pytest

from test_faults import Scenario, cluster, data  # noqa: F401 (fixtures)

pytestmark = pytest.mark.cluster

SPOKES = 3
#: the job's restart delay: the default 1 s restarts before the JobManager has noticed the
#: lost TaskManager (2 s heartbeats, about 3 s), and each attempt that deploys to its slots
#: fails again (3 failovers, the same exact counts); 5 s makes it one
RESTART_DELAY = "5 s"


class TensAIRScenario(Scenario):
    """:class:`Scenario` with the job's restart delay set to :data:`RESTART_DELAY`."""

    def submit(self, *extra: str) -> str:
        return super().submit(f"-Drestart-strategy.fixed-delay.delay={RESTART_DELAY}", *extra)


def settled(sc: Scenario, final: dict, timeout: float = 60) -> dict:
    """Query until the replicas' vector clocks agree (the last updates are still in the
    loop when the counts are reached), or ``timeout`` seconds; the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        clocks = [s["clock"] for s in final["spokes"]]
        if all(clocks[j][i] == clocks[i][i] for i in range(SPOKES) for j in range(SPOKES)) \
                or time.monotonic() > deadline:
            return final
        time.sleep(1.0)
        final = sc.s.query(0, timeout=60)


def test_replicas_apply_every_update_once_across_a_taskmanager_kill(cluster, broker, data):
    t_start = time.monotonic()
    sc = TensAIRScenario(cluster, broker, data, "tensair-kill", protocol="TensAIR", interval_ms=2000,
                  spokes=SPOKES)
    try:
        sc.start()
        victim = cluster.taskmanager_pids_of_job(sc.job, vertex="spokes")[0]
        # a standby: 3 spokes need 3 slots, so the restart finds them at once (without it,
        # each attempt before a replacement registers fails and counts as a failover)
        cluster.start_taskmanager()
        sc.feed()
        t0 = time.monotonic()
        cluster.kill_taskmanager(victim, with_workers=True)
        sc.recovered(t0)
        row = sc.finish("TaskManager of a TensAIR spoke killed", lambda f: settled(sc, f))
    finally:
        sc.close()
    final = row["final"]
    sc.check(row)  # fitted and predicted exactly once each
    clocks = [s["clock"] for s in final["spokes"]]
    service = final["service"]
    proto = final["protocol"]
    print(f"failovers {row['failovers']} (numRestarts {row['numRestarts']}); clocks {clocks}; updates {proto['updates']}, sent {proto['updatesSent']}, applied "
          f"{proto['updatesApplied']}; dead sibling messages dropped "
          f"{service['deadSiblingMessagesDropped']} (all feedback {service['deadMessagesDropped']}), "
          f"sibling frames resent {service['siblingFramesResent']}, duplicates dropped "
          f"{proto['duplicatesDropped']}, spoke restores {service['restores']}, spread "
          f"{proto['spread']:.2e}; "
          f"test {time.monotonic() - t_start:.0f} s")
    for i in range(SPOKES):
        for j in range(SPOKES):
            assert clocks[j][i] == clocks[i][i], (j, i, clocks)
    assert proto["updatesApplied"] == (SPOKES - 1) * proto["updatesSent"]
    # the same updates, too: a dead timeline's update applied instead of the live one with
    # its sequence number leaves the clocks equal but the replicas apart
    assert proto["spread"] < 1e-6, proto["spread"]
    assert sum(clocks[i][i] for i in range(SPOKES)) == proto["updates"] > 0
    assert row["failovers"] == 1, row
    assert service["restores"] == SPOKES  # each spoke kernel restored once
    assert service["deadSiblingMessagesDropped"] >= 0
