"""Online learners: the :class:`Learner` contract and its implementations.

A learner fits numpy mini-batches and exposes its model as one flat float64 vector plus a
JSON layout, which is all a synchronization protocol sees
(papers/002_9b954bd89ad87406.txt §3.3.3). Learners that cannot be averaged (the Hoeffding
trees: ``averageable = False``) run only with the ``Independent`` protocol.

=====================  ===================  ===================================
class                  task                 flat vector
=====================  ===================  ===================================
PAClassifier           classification       rows ``[W_k | b_k]`` per label
OnlineSVM              classification       rows ``[W_k | b_k]`` per label
PARegressor            regression           ``[w | b]``
OnlineRidge            regression           statistics ``[triu(G) | h]``
KMeans                 clustering           ``[n_j, n_j c_j]`` per cluster
MLP, CNN               classification       ``θ − θ₀`` (torch, imported lazily)
MLPRegressor           regression           ``θ − θ₀`` (torch, imported lazily)
HoeffdingTree          classification       none (not averageable)
HoeffdingAdaptiveTree  classification       none (not averageable)
=====================  ===================  ===================================
"""

from learning.learners.base import Learner, as_labels, as_matrix, label_key
from learning.learners.hoeffding import HoeffdingAdaptiveTree, HoeffdingTree
from learning.learners.kmeans import KMeans
from learning.learners.neural import CNN, MLP, MLPRegressor
from learning.learners.pa_regressor import PARegressor
from learning.learners.passive_aggressive import PAClassifier
from learning.learners.ridge import OnlineRidge
from learning.learners.svm import OnlineSVM

__all__ = ["Learner", "PAClassifier", "PARegressor", "OnlineSVM", "OnlineRidge", "KMeans",
           "HoeffdingTree", "HoeffdingAdaptiveTree", "MLP", "CNN", "MLPRegressor", "as_labels",
           "as_matrix", "label_key"]
