"""The ML library of omldm: learners, preprocessors, pipelines, requests and datasets.

Nothing here imports Flink or Kafka (DESIGN.md, layers). Synchronization protocols live in
:mod:`learning.protocols`. References: papers/002_9b954bd89ad87406.txt §3.3–3.4.
"""

from learning.errors import HyperparameterError, LearningError, ParameterError, RequestError
from learning.learners import Learner, PAClassifier
from learning.pipeline import Pipeline
from learning.preprocessors import MinMaxScaler, Preprocessor, StandardScaler
from learning.registry import make_learner, make_pipeline, make_preprocessor
from learning.requests import Request, parse_request

__all__ = [
    "LearningError", "HyperparameterError", "ParameterError", "RequestError",
    "Learner", "PAClassifier", "Preprocessor", "StandardScaler", "MinMaxScaler", "Pipeline",
    "make_learner", "make_preprocessor", "make_pipeline", "Request", "parse_request",
]
