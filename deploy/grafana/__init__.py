"""The Grafana dashboard over omldm's Flink metrics (``omldm-dashboard.json``).

Import it into Grafana (Dashboards → Import) and pick the Prometheus data source that
scrapes Flink's Prometheus reporter (``DS_PROMETHEUS``); the ``pipeline`` variable selects
pipelines. Panels: records fitted per second, rolling accuracy / kappa / macro F1
(classification) or MAE / RMSE / R² (regression), protocol bytes each direction, the
feedback round trip, cumulative prequential accuracy. The metrics are
:mod:`operators.metrics`'; Flink's Prometheus reporter names them
``flink_taskmanager_job_task_operator_omldm_pipeline_<name>`` with a ``pipeline`` label.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = ["DASHBOARD", "METRIC_PREFIX", "queried_metrics"]

DASHBOARD = Path(__file__).with_name("omldm-dashboard.json")
#: how Flink's Prometheus reporter names an operator's ``omldm`` → ``pipeline`` metric
METRIC_PREFIX = "flink_taskmanager_job_task_operator_omldm_pipeline_"


def queried_metrics(path: Path = DASHBOARD) -> set[str]:
    """Every Prometheus metric name the dashboard's queries (panel ``expr`` and template
    variable ``definition``) read."""
    board = json.loads(path.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    exprs += [v.get("definition", "") for v in board["templating"]["list"]]
    return {m for e in exprs for m in re.findall(r"\bflink_[A-Za-z0-9_]+", e)}
