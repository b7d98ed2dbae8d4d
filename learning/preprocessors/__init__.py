"""Preprocessors: running-statistics transformers placed before a learner
(papers/002_9b954bd89ad87406.txt §3.3.1), with river's per-record semantics computed a
mini-batch at a time."""

from learning.preprocessors.base import Preprocessor
from learning.preprocessors.scalers import MinMaxScaler, StandardScaler

__all__ = ["Preprocessor", "StandardScaler", "MinMaxScaler"]
