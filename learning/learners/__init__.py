"""Online learners: the :class:`Learner` contract and its implementations.

A learner fits numpy mini-batches record by record and exposes its model as one flat
float64 vector plus a JSON layout, which is all a synchronization protocol sees
(papers/002_9b954bd89ad87406.txt §3.3.3).
"""

from learning.learners.base import Learner, as_labels, as_matrix, label_key
from learning.learners.passive_aggressive import PAClassifier

__all__ = ["Learner", "PAClassifier", "as_labels", "as_matrix", "label_key"]
