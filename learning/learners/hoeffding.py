"""Hoeffding trees (VFDT) and Hoeffding adaptive trees, wrapping river's implementations.

A tree cannot be averaged: its "parameters" are a structure, not a vector. These learners
have ``averageable = False``; a Create request pairs them only with the ``Independent``
protocol (each spoke grows its own tree, see :mod:`learning.protocols.independent` and
:func:`learning.registry.check_pairing`), as papers/002_9b954bd89ad87406.txt §3.3.3 says of
CVFDT, "the one learner not parallelized".

References
----------
Domingos, P., Hulten, G. (2000) Mining high-speed data streams. Proc. 6th ACM SIGKDD,
71–80 (VFDT).
Hulten, G., Spencer, L., Domingos, P. (2001) Mining time-changing data streams. Proc. 7th
ACM SIGKDD, 97–106 (CVFDT).
Bifet, A., Gavaldà, R. (2009) Adaptive learning from evolving data streams. Proc. IDA
2009, LNCS 5772, 249–260 (the Hoeffding adaptive tree).
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import numpy as np

from learning.errors import HyperparameterError, ParameterError
from learning.hyperparameters import Hyperparameter, check_stored
from learning.learners.base import Learner, as_labels, as_matrix, as_test_matrix, label_key
from learning.learners.labels import LabelIndex
from learning.learners.linear import check_n_features

__all__ = ["HoeffdingTree", "HoeffdingAdaptiveTree"]


#: The hyperparameters both trees have (river's defaults, but max_size).
_TREE_HYPERPARAMETERS = (
    Hyperparameter("grace_period", int, 200, "records a leaf sees between split attempts",
                   interval="[1, inf)"),
    Hyperparameter("delta", float, 1e-7, "delta of the Hoeffding bound: the probability of "
                   "choosing the wrong split", interval="(0, 1)"),
    Hyperparameter("split_criterion", str, "info_gain", "the split merit G",
                   choices=("info_gain", "gini", "hellinger")),
    Hyperparameter("leaf_prediction", str, "nba", "leaves predict by majority class, naive "
                   "Bayes or the more accurate of the two (adaptive)", choices=("mc", "nb", "nba")),
    Hyperparameter("nb_threshold", int, 0, "records a leaf must see before naive Bayes is "
                   "used", interval="[0, inf)"),
    Hyperparameter("tau", float, 0.05, "tie threshold tau of the Hoeffding bound",
                   interval="[0, inf)"),
    Hyperparameter("max_depth", int, None, "depth limit (None: unlimited)",
                   interval="[1, inf)", optional=True),
    Hyperparameter("binary_split", bool, False, "only binary splits"),
    Hyperparameter("max_size", float, 100.0, "memory limit of the tree, MiB (river "
                   "deactivates leaves beyond it)", interval="(0, inf)"),
    Hyperparameter("merit_preprune", bool, True, "whether a split must beat not splitting"),
)


class _RiverTree(Learner):
    """What both trees share: label ↔ id mapping, record dicts, JSON through
    :mod:`learning.learners.river_json`, and the refusal to be averaged.

    river sees features as ``{0: x_0, 1: x_1, ...}`` and each label as its canonical key
    ``(type name, label)`` (:func:`learning.learners.base.label_key`), so labels of any
    JSON type — ``True`` and ``1`` included — stay distinct, which river's own
    dictionaries would not guarantee, while labels of one type keep river's order (and
    its tie-breaking: the first class in sorted order).

    Class probabilities (``has_proba``) are river's ``predict_proba_one``, whose arg-max
    is river's ``predict_one``: :meth:`test_then_train` asks the tree once per record for
    both.
    """

    # river's compiled parts (PyO3/Cython) hang when first used in PyFlink's thread mode,
    # like PyTorch's pybind11 (seen: a Create of a tree never answered); see Learner
    needs_own_interpreter = True

    averageable: ClassVar[bool] = False
    has_proba = True
    #: the river.tree class wrapped
    _RIVER: ClassVar[str]
    #: hyperparameters river lets change while the tree grows
    _MUTABLE: ClassVar[tuple[str, ...]] = ("grace_period", "delta", "tau")

    def __init__(self, grace_period: int, delta: float, split_criterion: str,
                 leaf_prediction: str, nb_threshold: int, tau: float, max_depth: int | None,
                 binary_split: bool, max_size: float, merit_preprune: bool):
        """Store the hyperparameters both trees have (after the subclass stored its own)
        and check them all; an empty tree."""
        self.grace_period = grace_period
        self.delta = delta
        self.split_criterion = split_criterion
        self.leaf_prediction = leaf_prediction
        self.nb_threshold = nb_threshold
        self.tau = tau
        self.max_depth = max_depth
        self.binary_split = binary_split
        self.max_size = max_size
        self.merit_preprune = merit_preprune
        check_stored(self)
        self._reset()

    def _reset(self) -> None:
        self.classes: list = []  # labels learned, canonical order
        self._known: set = set()
        self.n_features: int | None = None
        self._tree_obj = None  # built on first use: constructing it imports river's tree

    @property
    def _tree(self) -> Any:
        if self._tree_obj is None:
            self._tree_obj = self._make_tree()
        return self._tree_obj

    @_tree.setter
    def _tree(self, value: Any) -> None:
        self._tree_obj = value

    def _river_kwargs(self) -> dict:
        return self.hyperparameters()

    def _make_tree(self) -> Any:
        from river import tree

        return getattr(tree, self._RIVER)(**self._river_kwargs())

    def update_hyperparameters(self, **kw: Any) -> None:
        """Change ``grace_period``, ``delta`` or ``tau`` while the tree grows (the ones
        river allows); nothing changes if any value is rejected.

        Raises
        ------
        learning.errors.HyperparameterError
            For another hyperparameter whose value would change, or a rejected value.
        """
        for name, value in kw.items():
            if name not in self._MUTABLE and name in self.hyperparameters() \
                    and value != getattr(self, name):
                raise HyperparameterError(name, f"{name} cannot change while the tree grows; "
                                          f"mutable: {', '.join(self._MUTABLE)}")
        super().update_hyperparameters(**kw)

    def _on_hyperparameters(self) -> None:
        for name in self._MUTABLE:
            setattr(self._tree, name, getattr(self, name))

    # --- batches ------------------------------------------------------------------------

    def _rows(self, X: Any) -> tuple[np.ndarray, list[dict]]:
        X = as_matrix(X, self.n_features)
        return X, [dict(enumerate(row)) for row in X.tolist()]

    def _key(self, label: Any) -> tuple:
        key = label_key(label)
        if key not in self._known:
            self._known.add(key)
            self.classes.append(label)
            self.classes.sort(key=label_key)
        return key

    def _labels(self, X: np.ndarray, y: Sequence) -> list:
        labels = as_labels(y)
        if len(labels) != X.shape[0]:
            raise ValueError(f"y has {len(labels)} labels, X has {X.shape[0]} records")
        if self.n_features is None and X.shape[0]:
            self.n_features = X.shape[1]
        return labels

    def fit(self, X: np.ndarray, y: Sequence) -> None:
        """Learn the records in order (river's ``learn_one`` each).

        Parameters
        ----------
        X : (n_records, n_features) float64
        y : sequence of n_records labels (JSON scalars)

        Raises
        ------
        ValueError
            If the shapes disagree or a label is not a JSON scalar.
        """
        X, rows = self._rows(X)
        labels = self._labels(X, y)
        learn = self._tree.learn_one
        for x, label in zip(rows, labels):
            learn(x, self._key(label))

    def predict(self, X: np.ndarray) -> list:
        """The tree's class per record (river's ``predict_one``); None before any label.

        Parameters
        ----------
        X : (n_records, n_features) float64
        """
        _, rows = self._rows(X)
        predict = self._tree.predict_one
        out = []
        for x in rows:
            key = predict(x)
            out.append(None if key is None else key[1])
        return out

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """river's ``predict_proba_one`` per record, over ``classes`` (canonical order;
        a class missing from river's answer has probability 0).

        Parameters
        ----------
        X : (n_records, n_features) float64

        Returns
        -------
        (n_records, len(classes)) float64; no columns before any label.
        """
        _, rows = self._rows(X)
        proba = self._tree.predict_proba_one
        keys = [label_key(c) for c in self.classes]
        out = np.zeros((len(rows), len(keys)))
        for i, x in enumerate(rows):
            d = proba(x)
            out[i] = [d.get(k, 0.0) for k in keys]
        return out

    def test_then_train(self, X: np.ndarray, y: Sequence,
                        X_test: np.ndarray | None = None, *, with_proba: bool = False
                        ) -> tuple[list, float] | tuple[list, float, np.ndarray]:
        """Predict record ``i`` with the tree after records ``< i``, then learn it.

        Returns
        -------
        predictions : list of n_records labels
        loss_sum : float
            Number of wrong predictions (0-1 loss; a None prediction is wrong).
        proba : (n_records, len(classes)) float64, only with ``with_proba``
            River's ``predict_proba_one`` that gave each prediction (its arg-max, as
            river's ``predict_one``), over ``classes`` after the batch: 0 for a class known
            but absent from river's answer, NaN for one not yet learned when the record was
            predicted (see :meth:`Learner.test_then_train`).
        """
        X, rows = self._rows(X)
        labels = self._labels(X, y)
        X_test = as_test_matrix(X_test, X)
        tests = rows if X_test is None else self._rows(X_test)[1]
        tree = self._tree
        learn = tree.learn_one
        predictions, wrong = [], 0
        if not with_proba:
            predict = tree.predict_one
            for x, xt, label in zip(rows, tests, labels):
                p = predict(xt)
                key = self._key(label)
                predictions.append(None if p is None else p[1])
                wrong += p != key
                learn(x, key)
            return predictions, float(wrong)
        # river's predict_one is the arg-max of predict_proba_one (river.base.Classifier)
        proba, answers, order = tree.predict_proba_one, [], list(self._known)
        for x, xt, label in zip(rows, tests, labels):
            d = proba(xt)
            p = max(d, key=d.get) if d else None
            answers.append((d, len(order)))
            key = label_key(label)
            if key not in self._known:
                order.append(key)
            self._key(label)
            predictions.append(None if p is None else p[1])
            wrong += p != key
            learn(x, key)
        col = {label_key(c): j for j, c in enumerate(self.classes)}
        cols = [col[k] for k in order]  # classes in the order they were learned
        out = np.full((len(rows), len(cols)), np.nan)
        for i, (d, known) in enumerate(answers):
            if known:
                out[i, cols[:known]] = [d.get(k, 0.0) for k in order[:known]]
        return predictions, float(wrong), out

    def loss(self, X: np.ndarray, y: Sequence) -> float:
        """Number of records the tree gets wrong (0-1 loss; the model is unchanged)."""
        labels = as_labels(y)
        return float(sum(p is None or label_key(p) != label_key(t)
                         for p, t in zip(self.predict(X), labels)))

    # --- not averageable ----------------------------------------------------------------

    def _no_vector(self) -> NotImplementedError:
        return NotImplementedError(
            f"{type(self).__name__} cannot be averaged: a tree is a structure, not a "
            "parameter vector; use protocol 'Independent'")

    def get_params(self) -> np.ndarray:
        """Raises :class:`NotImplementedError`: a tree has no parameter vector."""
        raise self._no_vector()

    def set_params(self, w: np.ndarray) -> None:
        """Raises :class:`NotImplementedError`: a tree has no parameter vector."""
        raise self._no_vector()

    def layout(self) -> dict:
        """Raises :class:`NotImplementedError`: a tree has no parameter vector."""
        raise self._no_vector()

    def grow(self, layout: dict) -> None:
        raise self._no_vector()

    def project(self, w: np.ndarray, layout: dict) -> np.ndarray:
        raise self._no_vector()

    # --- introspection ------------------------------------------------------------------

    @property
    def n_nodes(self) -> int:
        return int(self._tree.n_nodes or 0)

    @property
    def height(self) -> int:
        return int(self._tree.height or 0)

    # --- JSON ---------------------------------------------------------------------------

    def _parameters_json(self) -> dict:
        """``{"river", "classes", "n_features", "tree"}``: river's version, the labels
        learned, and the whole river tree in :mod:`learning.learners.river_json`'s
        encoding (no pickle)."""
        import river

        from learning.learners.river_json import encode

        return {"river": river.__version__, "classes": list(self.classes),
                "n_features": self.n_features, "tree": encode(self._tree)}

    def _load_parameters(self, parameters: dict) -> None:
        """Load what :meth:`_parameters_json` wrote (every key may be missing or null:
        an empty tree).

        Raises
        ------
        learning.errors.ParameterError
            For an unknown key, malformed classes or tree, or a tree written by another
            river version (its internals differ between versions).
        """
        import river

        from learning.learners.river_json import decode

        known = {"river", "classes", "n_features", "tree"}
        unknown = set(parameters) - known
        if unknown:
            name = sorted(map(str, unknown))[0]
            raise ParameterError(name, f"unknown parameter {name!r} for {type(self).__name__}"
                                 f"; expected {', '.join(sorted(known))}")
        classes = LabelIndex.checked(parameters.get("classes"))
        d = parameters.get("n_features")
        self._reset()
        self.n_features = None if d is None else check_n_features(d)
        for label in classes:
            self._key(label)
        data = parameters.get("tree")
        if data is None:
            return
        version = parameters.get("river")
        if version != river.__version__:
            raise ParameterError("river", f"the tree was written by river {version!r}; this "
                                 f"is river {river.__version__} (tree internals differ)")
        try:
            tree = decode(data)
        except (ValueError, TypeError, KeyError, AttributeError, ImportError) as e:
            raise ParameterError("tree", f"tree: {e}") from None
        if type(tree).__name__ != self._RIVER:
            raise ParameterError("tree", f"tree must be a river {self._RIVER}, got "
                                 f"{type(tree).__name__}")
        self._tree = tree
        self._on_hyperparameters()


class HoeffdingTree(_RiverTree):
    """Hoeffding tree (VFDT) classifier: river's ``tree.HoeffdingTreeClassifier``.

    A leaf is split on the attribute with the best split criterion ``G`` once, after at
    least ``grace_period`` records since the last attempt, the Hoeffding bound
    ``ε = sqrt(R² ln(1/δ) / (2 n))`` separates the best and second-best ``G`` (or ``ε <
    τ``: a tie). Numeric features are summarized per class by Gaussians (river's
    ``GaussianSplitter``). Leaves predict by majority class (``mc``), naive Bayes
    (``nb``) or whichever of the two has been more accurate there (``nba``).

    Records ``X: (n_records, n_features) float64`` are learned one by one (river's
    ``learn_one``; the mini-batch size changes nothing); labels are JSON scalars of any
    type. :meth:`loss` counts wrong predictions. The tree **cannot be averaged**
    (``averageable = False``: :meth:`get_params` raises :class:`NotImplementedError`) and
    runs only with the ``Independent`` protocol. Its state, the whole river tree, goes to
    JSON through an allow-listed codec (:mod:`learning.learners.river_json`), never
    pickle; a tree written by one river version is refused by another.

    Parameters
    ----------
    grace_period : int, >= 1
        Records a leaf sees between split attempts.
    delta : float in (0, 1)
        δ of the Hoeffding bound: the probability of choosing the wrong split.
    split_criterion : {"info_gain", "gini", "hellinger"}
    leaf_prediction : {"mc", "nb", "nba"}
    nb_threshold : int, >= 0
        Records a leaf must see before naive Bayes is used.
    tau : float, >= 0
        Tie threshold.
    max_depth : int or None
        Depth limit (None: unlimited).
    binary_split : bool
        Only binary splits.
    max_size : float, > 0
        Memory limit of the tree, MiB (river deactivates leaves beyond it).
    merit_preprune : bool
        Whether a split must beat not splitting.

    Only ``grace_period``, ``delta`` and ``tau`` can change while the tree grows.

    Examples
    --------
    river's Phishing (1,250 records), prequential accuracy:

    >>> from river import datasets
    >>> import numpy as np
    >>> data = list(datasets.Phishing())
    >>> X = np.array([list(x.values()) for x, _ in data], dtype=float)
    >>> y = [label for _, label in data]
    >>> predictions, wrong = HoeffdingTree().test_then_train(X, y)
    >>> print(f"{1 - wrong / len(y):.3f}")
    0.879

    References
    ----------
    Domingos, P., Hulten, G. (2000) Mining high-speed data streams. Proc. 6th ACM SIGKDD,
    71–80.
    """

    _RIVER = "HoeffdingTreeClassifier"

    HYPERPARAMETERS = _TREE_HYPERPARAMETERS

    def __init__(self, grace_period: int = 200, delta: float = 1e-7,
                 split_criterion: str = "info_gain", leaf_prediction: str = "nba",
                 nb_threshold: int = 0, tau: float = 0.05, max_depth: int | None = None,
                 binary_split: bool = False, max_size: float = 100.0,
                 merit_preprune: bool = True):
        super().__init__(grace_period, delta, split_criterion, leaf_prediction, nb_threshold,
                         tau, max_depth, binary_split, max_size, merit_preprune)


class HoeffdingAdaptiveTree(_RiverTree):
    """Hoeffding adaptive tree classifier: river's ``tree.HoeffdingAdaptiveTreeClassifier``.

    A Hoeffding tree (see :class:`HoeffdingTree`) whose nodes watch their error with an
    ADWIN drift detector; on drift a node grows an alternate subtree and swaps it in once
    it is significantly better (``switch_significance``) — Bifet and Gavaldà's answer to
    concept drift, in the spirit of CVFDT. With ``bootstrap_sampling`` each record is
    weighted by a Poisson(1) draw from a generator seeded by ``seed``.

    Shapes, labels, loss, JSON and the refusal to be averaged are as for
    :class:`HoeffdingTree`.

    Parameters
    ----------
    grace_period, delta, split_criterion, leaf_prediction, nb_threshold, tau, max_depth,
    binary_split, max_size, merit_preprune
        As for :class:`HoeffdingTree`.
    bootstrap_sampling : bool
        Poisson(1) weights (online bagging of one).
    drift_window_threshold : int, >= 1
        Records an alternate tree must see before it may replace its node.
    switch_significance : float in (0, 1)
        Significance of the test that swaps in an alternate tree.
    seed : int
        Seeds the bootstrap weights (river's default, None, would not be reproducible).

    Examples
    --------
    >>> from river import datasets
    >>> import numpy as np
    >>> data = list(datasets.Phishing())
    >>> X = np.array([list(x.values()) for x, _ in data], dtype=float)
    >>> y = [label for _, label in data]
    >>> predictions, wrong = HoeffdingAdaptiveTree(seed=1).test_then_train(X, y)
    >>> print(f"{1 - wrong / len(y):.3f}")
    0.871

    References
    ----------
    Bifet, A., Gavaldà, R. (2009) Adaptive learning from evolving data streams. Proc. IDA
    2009, LNCS 5772, 249–260.
    """

    _RIVER = "HoeffdingAdaptiveTreeClassifier"

    HYPERPARAMETERS = (
        *_TREE_HYPERPARAMETERS,
        Hyperparameter("bootstrap_sampling", bool, True, "weight records by Poisson(1) draws "
                       "(online bagging of one)"),
        Hyperparameter("drift_window_threshold", int, 300, "records an alternate tree must "
                       "see before it may replace its node", interval="[1, inf)"),
        Hyperparameter("switch_significance", float, 0.05, "significance of the test that "
                       "swaps in an alternate tree", interval="(0, 1)"),
        Hyperparameter("seed", int, 0, "seeds the bootstrap weights", interval="[0, inf)"),
    )

    def __init__(self, grace_period: int = 200, delta: float = 1e-7,
                 split_criterion: str = "info_gain", leaf_prediction: str = "nba",
                 nb_threshold: int = 0, tau: float = 0.05, max_depth: int | None = None,
                 binary_split: bool = False, max_size: float = 100.0,
                 merit_preprune: bool = True, bootstrap_sampling: bool = True,
                 drift_window_threshold: int = 300, switch_significance: float = 0.05,
                 seed: int = 0):
        self.bootstrap_sampling = bootstrap_sampling
        self.drift_window_threshold = drift_window_threshold
        self.switch_significance = switch_significance
        self.seed = seed
        super().__init__(grace_period, delta, split_criterion, leaf_prediction, nb_threshold,
                         tau, max_depth, binary_split, max_size, merit_preprune)
