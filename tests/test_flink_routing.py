"""Flink routes each hub key to its own subtask (DESIGN.md pitfall: small integer keys can
share a subtask), checked on a real MiniCluster for several hub counts."""

from __future__ import annotations

import os
import site
import sys

import pytest

from operators.routing import MAX_PARALLELISM, hub_keys, operator_index, spoke_keys, subtask_index


def test_hub_keys_are_distinct_subtasks_by_formula():
    for m in range(1, 9):
        keys = hub_keys(m)
        assert [operator_index(k, m) for k in keys] == list(range(m))


def test_spoke_keys_deal_the_spokes_round_robin_over_the_subtasks():
    # one spoke per subtask: the smallest key of each subtask, the keys before the setting
    # (savepoints keyed by them still map)
    assert spoke_keys(2) == hub_keys(2) == [0, 2] and spoke_keys(4) == [4, 0, 8, 2]
    for n in range(1, 9):
        for width in range(1, n + 1):
            keys = spoke_keys(n, width)
            assert len(set(keys)) == n
            assert [operator_index(k, width) for k in keys] == [i % width for i in range(n)]
    for width in (0, 4):
        with pytest.raises(ValueError, match="spoke parallelism"):
            spoke_keys(3, width)


@pytest.mark.parametrize("m", [2, 3, 4])
def test_hub_keys_land_one_per_subtask_in_flink(m):
    from pyflink.common import Configuration, Types
    from pyflink.datastream import KeyedProcessFunction, StreamExecutionEnvironment

    conf = Configuration()
    conf.set_string("python.execution-mode", "thread")
    conf.set_string("python.pythonpath", os.pathsep.join([os.getcwd()] + site.getsitepackages()))
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_python_executable(sys.executable)
    env.set_max_parallelism(MAX_PARALLELISM)

    class Where(KeyedProcessFunction):
        def open(self, runtime_context):
            self.index = subtask_index(runtime_context)

        def process_element(self, value, ctx):
            yield value[0], self.index

    keys = hub_keys(m)
    row = Types.TUPLE([Types.INT(), Types.PRIMITIVE_ARRAY(Types.BYTE())])
    got = list(env.from_collection([(k, b"x") for k in keys], type_info=row)
               .key_by(lambda v: v[0], key_type=Types.INT())
               .process(Where(), output_type=Types.TUPLE([Types.INT(), Types.INT()]))
               .set_parallelism(m).execute_and_collect())
    assert dict(got) == {k: j for j, k in enumerate(keys)}
