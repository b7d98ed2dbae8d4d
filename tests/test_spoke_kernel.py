"""The Flink spoke and hub kernels wired together in plain Python (what the job's operators
host, without Flink): a pipeline waiting on its hubs pauses only its own stream."""

from __future__ import annotations

import orjson

from operators.feedback import FRAME, is_frame
from operators.hub import HubKernel
from operators.spoke import SpokeKernel


class Wire:
    """Two spoke kernels and one hub kernel; :meth:`pump` moves messages until quiet."""

    def __init__(self) -> None:
        self.spokes = [SpokeKernel(i, 2, 1, hub_keys=[0]) for i in range(2)]
        self.hub = HubKernel(hub=0, n_spokes=2)
        self.predictions: list[dict] = []
        self.responses: list[dict] = []

    def pump(self) -> None:
        moved = True
        while moved:
            moved = False
            for spoke in self.spokes:
                out, spoke.out = spoke.out, []
                for stream, value in out:
                    moved = True
                    if stream == "hubs":
                        self.hub.on_message(value[1])
                    elif stream is None:
                        self.predictions.append(orjson.loads(value))
                    elif stream == "responses":
                        self.responses.append(orjson.loads(value))
            out, self.hub.out = self.hub.out, []
            for stream, value in out:
                moved = True
                if stream is None:
                    assert is_frame(value)
                    self.spokes[FRAME.unpack_from(value)[6]].on_message(value)
                else:
                    self.responses.append(orjson.loads(value))

    def request(self, req: dict) -> None:
        for spoke in self.spokes:
            spoke.on_message(orjson.dumps(req))
        self.pump()

    def data(self, spoke: int, tag: str, rec: dict) -> None:
        self.spokes[spoke].on_data(tag + orjson.dumps(rec).decode())
        self.pump()


def create(pid: int, protocol: str) -> dict:
    return {"id": pid, "request": "Create", "requestId": f"c{pid}",
            "learner": {"name": "PA", "hyperParameters": {"C": 0.01}},
            "trainingConfiguration": {"protocol": protocol, "miniBatchSize": 2, "miniBatches": 1}}


def record(i: int) -> dict:
    return {"id": i, "features": [float(i % 3), 1.0 - (i % 2)], "label": i % 2}


def test_a_paused_pipeline_holds_its_records_and_the_others_go_on():
    """A BSP round waits for spoke 1, which has no records yet: on spoke 0 the BSP
    pipeline holds what comes (in order), while the Independent pipeline fits and answers
    every record; once spoke 1 pushes, the round ends and the held records are fitted."""
    w = Wire()
    w.request(create(0, "Synchronous"))
    w.request(create(1, "Independent"))
    assert sum(r["status"] == "ok" for r in w.responses) == 2
    for i in range(2):  # one mini-batch on spoke 0: BSP pushes and waits for spoke 1
        w.data(0, "T", record(i))
    bsp, alone = w.spokes[0].nodes[0], w.spokes[0].nodes[1]
    assert bsp.ctx.pauses == 1 and bsp.fitted == 2
    for i in range(2, 12):
        w.data(0, "T", record(i))
    w.data(0, "P", {"id": 99, "features": [1.0, 0.0]})
    assert alone.fitted == 12 and bsp.fitted == 2 and len(bsp.ctx.backlog) == 11
    assert [p["pipeline"] for p in w.predictions] == [1]  # BSP's prediction waits its turn
    assert bsp.statistics()["held"] == 11
    i = 100
    while bsp.ctx.backlog:  # each mini-batch of spoke 1 closes one round on spoke 0
        rounds = bsp.rounds
        w.data(1, "T", record(i))
        w.data(1, "T", record(i + 1))
        i += 2
        assert bsp.rounds == rounds + 1
        assert bsp.fitted == min(2 + 2 * bsp.rounds, 12)  # one held mini-batch per round
    assert bsp.fitted == 12 and bsp.rounds == 6
    assert sorted(p["pipeline"] for p in w.predictions) == [0, 1]
    assert w.spokes[0].paused == bsp.ctx.pauses == 0
