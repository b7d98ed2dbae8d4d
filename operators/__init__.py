"""Kernels that host middleware nodes, and their hosts (papers/002 §3.2).

========================  ==============================================================
module                    what
========================  ==============================================================
``spoke_kernel.py``       :class:`SpokeKernel`: a spoke subtask's pipelines, records,
                          backlogs, requests (plain Python, no Flink)
``hub_kernel.py``         :class:`HubKernel`: a hub's pipelines, lifecycle, resend window
``feedback.py``           incarnations of the Kafka feedback loop across restores
``service.py``            service policy: limits, size checks, error responses
``spoke.py``, ``hub.py``  the Flink hosts: a ``KeyedCoProcessFunction`` over (data,
                          messages) keyed by spoke, a ``KeyedProcessFunction`` keyed by hub
``local.py``              the in-process host: the same kernels over an in-memory transport
``routing.py``            Flink keys and subtasks; ``metrics.py``: Flink metrics;
                          ``snapshot.py``: kernels in keyed state
========================  ==============================================================

Kernels hold no ML logic: they hand records and messages to nodes and carry what nodes
send; hosts hold no logic but translating their runtime's callbacks into kernel calls.
"""

__all__ = []
