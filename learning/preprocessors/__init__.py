"""Preprocessors placed before a learner, chained in the order given
(papers/002_9b954bd89ad87406.txt §3.3.1): running-statistics transformers with river's
per-record semantics computed a mini-batch at a time (scalers, running mean and variance)
and stateless ones (feature selection, polynomial features), a scaler of a regressor's
target, and an imputer of missing values. Each learns online from the training stream, is
applied identically for prediction and writes its state to JSON.
"""

from learning.preprocessors.base import Preprocessor
from learning.preprocessors.imputer import StatImputer
from learning.preprocessors.polynomial import PolynomialFeatures
from learning.preprocessors.scalers import MinMaxScaler, StandardScaler
from learning.preprocessors.selection import FeatureSelector
from learning.preprocessors.statistics import RunningMeanVariance
from learning.preprocessors.target import TargetStandardScaler

__all__ = ["Preprocessor", "StandardScaler", "MinMaxScaler", "FeatureSelector",
           "RunningMeanVariance", "PolynomialFeatures", "TargetStandardScaler", "StatImputer"]
