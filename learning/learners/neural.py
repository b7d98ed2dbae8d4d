"""Neural networks in PyTorch: multi-layer perceptron and small CNN classifiers, and a
multi-layer perceptron regressor.

torch is imported inside the functions and methods that need it, never at module level, so
that importing :mod:`learning.registry` (every spoke and hub does) does not pay for it.

References
----------
Rumelhart, D. E., Hinton, G. E., Williams, R. J. (1986) Learning representations by
back-propagating errors. Nature 323:533–536.
LeCun, Y., Bottou, L., Bengio, Y., Haffner, P. (1998) Gradient-based learning applied to
document recognition. Proc. IEEE 86(11):2278–2324.
Kingma, D. P., Ba, J. (2015) Adam: a method for stochastic optimization. ICLR 2015.

papers/002_9b954bd89ad87406.txt §3.3.3 ("Neural networks", DeepLearning4J in OMLDM) and
§4 (a CNN trained online with Adam and L2 regularization); papers/003_026f5d1641a0ab17.txt
§IV (EVENFLOW's regression setting: an MLP regressor trained with MSE).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Sequence

import numpy as np

from learning.errors import HyperparameterError, ParameterError
from learning.hyperparameters import INT_LIST, Hyperparameter, check_stored
from learning.learners.base import (Learner, as_labels, as_matrix, as_test_matrix,
                                    declared_width, widen_proba)
from learning.learners.labels import LabelIndex
from learning.learners.linear import check_n_features
from learning.learners.regressor import Regressor

__all__ = ["MLP", "CNN", "MLPRegressor", "layer_chain_size"]

_ACTIVATIONS = ("relu", "tanh", "sigmoid")
_OPTIMIZERS = ("sgd", "adam")
_LOSSES = ("cross_entropy", "multi_margin")
_DEVICES = ("cpu", "cuda", "auto")


def _torch_hyperparameters(learning_rate: float) -> tuple[Hyperparameter, ...]:
    """The hyperparameters :class:`MLP` and :class:`CNN` share, with the default step
    size of each."""
    return (
        Hyperparameter("activation", str, "relu", "the hidden layers' activation",
                       choices=_ACTIVATIONS),
        Hyperparameter("optimizer", str, "adam", "sgd or Adam (Kingma and Ba 2015)",
                       choices=_OPTIMIZERS),
        Hyperparameter("learning_rate", float, learning_rate, "the optimizer's step size "
                       "alpha (scaling learning-rate divides it by the spokes, papers/001 "
                       "eq. 4)", interval="(0, inf)"),
        Hyperparameter("loss_function", str, "cross_entropy", "the training loss",
                       choices=_LOSSES),
        Hyperparameter("weight_decay", float, 0.0, "L2 penalty (torch's weight_decay)",
                       interval="[0, inf)"),
        Hyperparameter("momentum", float, 0.0, "SGD momentum (unused by Adam)",
                       interval="[0, 1)"),
        Hyperparameter("seed", int, 0, "seeds the initial weights (identical on every node)",
                       interval="[0, inf)"),
        Hyperparameter("device", str, "cpu", "where the weights live; auto: CUDA when "
                       "available", choices=_DEVICES),
    )


def _activation(name: str) -> Any:
    import torch.nn as nn

    return {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[name]()


def _device(name: str) -> Any:
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise HyperparameterError("device", "device 'cuda' is not available here; use "
                                  "'cpu' or 'auto'")
    return torch.device(name)


def _softmax(logits: Any) -> np.ndarray:
    """Row-wise softmax of a (detached) logits tensor, as float64 numpy: computed in
    float64 so that rows sum to 1 to numpy's precision."""
    import torch

    return torch.softmax(logits.double(), dim=1).cpu().numpy()


def _seeded_init(module: Any, seed: int) -> None:
    """Draw every weight and bias of ``module`` from ``U(-1/√fan_in, 1/√fan_in)`` (torch's
    default bounds) with a numpy generator seeded with ``seed``, in module order: the same
    initial weights on every node and every device."""
    import torch

    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for sub in module.modules():
            w = getattr(sub, "weight", None)
            if w is None:
                continue
            fan_in = int(np.prod(w.shape[1:]))
            bound = 1.0 / math.sqrt(fan_in)
            w.copy_(torch.from_numpy(rng.uniform(-bound, bound, tuple(w.shape))))
            if getattr(sub, "bias", None) is not None:
                sub.bias.copy_(torch.from_numpy(rng.uniform(-bound, bound,
                                                            tuple(sub.bias.shape))))


def _optimizer_json(opt: Any) -> list:
    """The optimizer's state per parameter tensor, JSON-safe: ``[[index, {key: value or
    {"shape", "data"}}], ...]``."""
    state = opt.state_dict()["state"]
    return [[int(i), {k: ({"shape": list(v.shape), "data": v.detach().cpu().double()
                           .reshape(-1).tolist()} if hasattr(v, "shape") else v)
                      for k, v in s.items() if v is not None}]
            for i, s in sorted(state.items())]


def _load_optimizer(opt: Any, entries: list) -> None:
    """Load what :func:`_optimizer_json` wrote into ``opt`` (its parameter groups kept).

    Raises
    ------
    learning.errors.ParameterError
        ``optimizer``, for state that does not fit.
    """
    import torch

    try:
        state = {}
        for i, s in entries:
            state[int(i)] = {k: (torch.tensor(v["data"], dtype=torch.float32)
                                 .reshape(v["shape"]) if isinstance(v, dict) else v)
                             for k, v in s.items()}
        groups = opt.state_dict()["param_groups"]
        opt.load_state_dict({"state": state, "param_groups": groups})
    except (TypeError, ValueError, KeyError, RuntimeError) as e:
        raise ParameterError("optimizer", f"optimizer: {e}") from None


#: why a network leaves a record out of its mini-batch's step (:func:`_finite_rows`)
NONFINITE_ROW = ("its loss is not finite in float32: a target or feature beyond float32's "
                 "range (±3.4e38 after the preprocessors; a TargetStandardScaler, a scaler); "
                 "the other records of its mini-batch were learned")


def _finite_rows(per_row: Any) -> np.ndarray | None:
    """The rows to step on when a mini-batch's summed loss is not finite: those whose own
    loss (``per_row``, a torch tensor ``(n_records,)``) is finite, as int64 indices; None
    when every row's is (the sum overflowed, or the model diverged: :func:`_finite_step`
    then refuses the whole mini-batch) or none is (nothing to step on: likewise). A record
    of 1e39 or a target of 1e100 is inf in float32 and makes its own row inf or NaN, not
    its neighbours' (no layer mixes records), so the others are learned as if it had not
    come."""
    import torch

    finite = torch.isfinite(per_row.detach()).cpu().numpy()
    if finite.all() or not finite.any():
        return None
    return np.flatnonzero(finite)


def _finite_step(params: list, opt: Any, loss: Any, loss_finite: bool = False) -> None:
    """``opt.step()`` once ``loss`` and the gradient of every tensor of ``params`` are
    finite (torch tensors; checked one by one, some 20 µs a step; ``loss_finite``: the
    caller checked the loss already, about 5 µs saved); else the gradients are
    dropped, the weights and the optimizer's state stay as they are, and ValueError says
    why (the spoke refuses the mini-batch, ``fit_failed``, and the model goes on). The
    weights are float32: a target of 1e100, a feature of 1e39 without a scaler, or a
    learning rate that diverged made the loss inf, the next step NaN, and every node's
    model NaN for good (predictions null, Queries unanswered).

    Raises
    ------
    ValueError
        When the loss or a gradient is inf or NaN.
    """
    import torch

    grads = [p.grad for p in params if p.grad is not None]
    if (loss_finite or bool(torch.isfinite(loss))) and all(
            bool(torch.isfinite(g).all()) for g in grads):
        opt.step()
        return
    opt.zero_grad(set_to_none=True)
    raise ValueError(f"the mini-batch's loss or gradient is not finite in float32 (loss "
                     f"{float(loss.detach()):g}): a target or feature beyond float32's range "
                     f"(±3.4e38 after the preprocessors; a TargetStandardScaler, a scaler), "
                     f"or a step that diverged; the model was not changed")


class _TorchTraining:
    """The optimizer side every network here shares: SGD or Adam over ``self._params()``
    at the :meth:`effective_step_size`, the hyperparameters that may change while training
    (``_MUTABLE``) and the step-size scaling hook. Mixed into a :class:`Learner`."""

    #: hyperparameters that may change while the network trains
    _MUTABLE: ClassVar[tuple[str, ...]] = ("learning_rate", "weight_decay", "momentum",
                                           "loss_function")

    # --- the flat vector (θ − θ₀; ``_size`` and ``_theta_device`` from the learner) -------

    def _vector(self) -> np.ndarray:
        from torch.nn.utils import parameters_to_vector

        return parameters_to_vector(self._params()).detach().cpu().double().numpy().copy()

    def get_params(self) -> np.ndarray:
        """``θ − θ₀``: 1-D float64 (see the class docstring); size 0 before the network
        is built."""
        if not self._size():
            return np.zeros(0)
        return self._vector() - self._theta0

    def set_params(self, w: np.ndarray) -> None:
        """Set the weights to ``θ₀ + w`` (``w`` laid out as :meth:`get_params`).

        Raises
        ------
        ValueError
            If ``w`` is not 1-D of the size of :meth:`get_params`.
        """
        import torch
        from torch.nn.utils import vector_to_parameters

        w = np.asarray(w, dtype=np.float64)
        size = self._size()
        if w.ndim != 1 or w.size != size:
            raise ValueError(f"expected a 1-D vector of {size} parameters, got shape {w.shape}")
        if not size:
            return
        theta = torch.as_tensor(self._theta0 + w, dtype=torch.float32,
                                device=self._theta_device())
        with torch.no_grad():
            vector_to_parameters(theta, self._params())

    def _leave_out(self, keep: np.ndarray, n: int) -> None:
        """Set :attr:`Learner.refused_rows` to the rows of ``range(n)`` not in ``keep``."""
        self.refused_rows = tuple(np.setdiff1d(np.arange(n), keep).tolist())
        self.refused_reason = NONFINITE_ROW

    def _network_json(self, out: dict, built: bool) -> dict:
        """``out`` plus, once the network is ``built``, ``params`` (the weights θ, not the
        displacement, as a list) and ``optimizer`` (its state per parameter tensor)."""
        if built:
            out["params"] = self._vector().tolist()
            out["optimizer"] = _optimizer_json(self._opt)
        return out

    def _check_keys(self, parameters: dict, extra: tuple[str, ...] = ()) -> None:
        """Refuse a key of ``parameters`` other than ``n_features``, ``params``,
        ``optimizer`` and ``extra``.

        Raises
        ------
        learning.errors.ParameterError
            Naming the first unknown key.
        """
        known = {"n_features", "params", "optimizer", *extra}
        unknown = set(parameters) - known
        if unknown:
            name = sorted(map(str, unknown))[0]
            raise ParameterError(name, f"unknown parameter {name!r} for {type(self).__name__}"
                                 f"; expected {', '.join(sorted(known))}")

    def _load_network(self, parameters: dict) -> None:
        """Build the network for ``parameters["n_features"]`` (nothing without it) and
        load ``params`` (the absolute weights θ) and the optimizer's state.

        Raises
        ------
        learning.errors.ParameterError
            ``n_features`` missing with ``params``, or invalid; ``params`` not
            ``self._theta0.size`` finite numbers.
        """
        d = parameters.get("n_features")
        if d is None:
            if parameters.get("params"):
                raise ParameterError("n_features", "n_features is required with params")
            return
        try:
            self._build(check_n_features(d))
        except ValueError as e:
            raise ParameterError("n_features", str(e)) from None
        params = parameters.get("params")
        if params is not None:
            try:
                theta = np.asarray(params, dtype=np.float64)
            except (TypeError, ValueError):
                raise ParameterError("params", "params must hold numbers") from None
            if theta.shape != self._theta0.shape or not np.all(np.isfinite(theta)):
                raise ParameterError("params", f"params must be {self._theta0.size} finite "
                                     f"numbers, got shape {theta.shape}")
            self.set_params(theta - self._theta0)
        _load_optimizer(self._opt, parameters.get("optimizer") or [])

    def _make_optimizer(self) -> Any:
        import torch

        params = self._params()
        if self.optimizer == "adam":
            return torch.optim.Adam(params, lr=self.effective_step_size(),
                                    weight_decay=self.weight_decay)
        return torch.optim.SGD(params, lr=self.effective_step_size(), momentum=self.momentum,
                               weight_decay=self.weight_decay)

    def update_hyperparameters(self, **kw: Any) -> None:
        """Change the hyperparameters named in ``_MUTABLE`` (``learning_rate``,
        ``weight_decay``, ``momentum``; the classifiers' ``loss_function`` too) while training;
        nothing changes if any value is rejected.

        Raises
        ------
        learning.errors.HyperparameterError
            For another hyperparameter whose value would change (the architecture, the
            optimizer, the seed and the device are fixed), or a rejected value.
        """
        current = self.hyperparameters()
        for name, value in kw.items():
            if name not in self._MUTABLE and name in current and value != current[name]:
                raise HyperparameterError(name, f"{name} cannot change while the network "
                                          f"trains; mutable: {', '.join(self._MUTABLE)}")
        super().update_hyperparameters(**kw)

    def step_size(self) -> str:
        """``"learning_rate"``, the optimizer's α (papers/001 §II-C eq. 4 divides it by the
        number of spokes under ``trainingConfiguration.scaling`` ``learning-rate``)."""
        return "learning_rate"

    def _on_step_scale(self) -> None:
        self._on_hyperparameters()

    def _on_hyperparameters(self) -> None:
        if self._opt is None:
            return
        for group in self._opt.param_groups:
            group["lr"] = self.effective_step_size()
            group["weight_decay"] = self.weight_decay
            if "momentum" in group:
                group["momentum"] = self.momentum


class _TorchClassifier(_TorchTraining, Learner):
    """What :class:`MLP` and :class:`CNN` share.

    The network is a *body* (built by the subclass once ``n_features`` is known) followed
    by a linear *head* ``logits = z W^T + b`` with one row per label in canonical order
    (:class:`learning.learners.labels.LabelIndex`); a new label gets a zero row (its
    optimizer moments too). Each :meth:`fit` takes **one optimizer step** on the mean loss
    of the mini-batch, so the mini-batch size is the SGD batch size.

    **The flat vector is the displacement from the seeded initialization**: ``get_params()
    = θ − θ₀`` (``torch.nn.utils.parameters_to_vector`` order: body parameters in module
    order, then ``W`` row by row, then ``b``), float64. Every node of a pipeline builds the
    same ``θ₀`` from the same ``seed``, so averaging displacements is averaging weights,
    and a fresh model is the zero vector like every other learner's — which the protocols
    assume (the hub starts from zero and adds updates). Head rows start at 0, so ``θ₀`` is
    0 there and :meth:`project` fills absent classes with zeros. Weights live in float32.

    Class probabilities (``has_proba``) are the softmax of the logits over the classes
    known (whatever ``loss_function`` trains them: with ``multi_margin`` they are scores
    normalized, not calibrated); :meth:`test_then_train` takes them from the forward pass
    it trains on, so they cost no second pass.
    """

    needs_own_interpreter = True  # PyTorch deadlocks in PyFlink thread mode (see Learner)
    has_proba = True

    def __init__(self, activation: str, optimizer: str, learning_rate: float,
                 loss_function: str, weight_decay: float, momentum: float, seed: int,
                 device: str):
        """Store the hyperparameters both networks have (after the subclass stored its
        own) and check them all; no network until ``n_features`` is known."""
        self.activation = activation
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.loss_function = loss_function
        self.weight_decay = weight_decay
        self.momentum = momentum
        self.seed = seed
        self.device = device
        check_stored(self)
        if self.device == "cuda":
            _device("cuda")  # refuse at once where there is no GPU
        self._reset()

    def _reset(self) -> None:
        self._labels = LabelIndex()
        self.n_features: int | None = None
        self._body = None
        self._W = self._b = None
        self._opt = None
        self._theta0: np.ndarray | None = None
        self._width = 0

    @property
    def classes(self) -> list:
        return self._labels.classes

    # --- construction -------------------------------------------------------------------

    def _make_body(self, d: int) -> tuple[Any, int]:
        """The body for records of ``d`` features and its output width (subclass)."""
        raise NotImplementedError

    def _build(self, d: int) -> None:
        """Build body, head and optimizer for ``d`` features; body weights drawn from
        ``U(-1/√fan_in, 1/√fan_in)`` (torch's default bounds) by a numpy generator seeded
        with ``seed``, so ``θ₀`` is the same on every node and every device."""
        import torch

        device = _device(self.device)
        body, width = self._make_body(d)
        _seeded_init(body, self.seed)
        self.n_features = d
        self._width = width
        self._body = body.to(device)
        K = len(self.classes)
        self._W = torch.nn.Parameter(torch.zeros(K, width, device=device))
        self._b = torch.nn.Parameter(torch.zeros(K, device=device))
        self._opt = self._make_optimizer()
        self._theta0 = self._vector()
        self._theta0[self._body_size():] = 0.0

    def _params(self) -> list:
        return [*self._body.parameters(), self._W, self._b]

    def _body_size(self) -> int:
        return sum(p.numel() for p in self._body.parameters())

    def _add_labels(self, labels: list) -> None:
        """Zero head rows (and optimizer moments) for new labels, at canonical places."""
        for label in labels:
            if label in self._labels:
                continue
            pos = self._labels.add(label)
            if self._body is not None:
                self._insert_row(pos)

    def _insert_row(self, pos: int) -> None:
        import torch

        old = (self._W, self._b)
        new = []
        for p in old:
            data = p.detach()
            zero = torch.zeros((1, *data.shape[1:]), dtype=data.dtype, device=data.device)
            new.append(torch.nn.Parameter(torch.cat([data[:pos], zero, data[pos:]])))
        group = self._opt.param_groups[0]
        for p_old, p_new in zip(old, new):
            group["params"][[id(q) for q in group["params"]].index(id(p_old))] = p_new
            state = self._opt.state.pop(p_old, None)
            if state:
                grown = {}
                for k, v in state.items():
                    if torch.is_tensor(v) and v.shape == p_old.shape:
                        zero = torch.zeros((1, *v.shape[1:]), dtype=v.dtype, device=v.device)
                        v = torch.cat([v[:pos], zero, v[pos:]])
                    grown[k] = v
                self._opt.state[p_new] = grown
        self._W, self._b = new
        if self._theta0 is not None:
            B, h = self._body_size(), self._width
            K = len(self.classes)
            self._theta0 = np.concatenate([self._theta0[:B], np.zeros(K * h + K)])

    # --- batches ------------------------------------------------------------------------

    def _check_batch(self, X: Any, y: Sequence) -> tuple[np.ndarray, list]:
        self.refused_rows = ()
        X = as_matrix(X, self.n_features)
        labels = as_labels(y)
        if len(labels) != X.shape[0]:
            raise ValueError(f"y has {len(labels)} labels, X has {X.shape[0]} records")
        if self._body is None and X.shape[0]:
            self._build(X.shape[1])
        return X, labels

    def _tensor(self, X: np.ndarray) -> Any:
        import torch

        return torch.as_tensor(X, dtype=torch.float32, device=self._W.device)

    def _logits(self, X: np.ndarray) -> Any:
        import torch.nn.functional as F

        return F.linear(self._body(self._tensor(X)), self._W, self._b)

    def _criterion(self, logits: Any, targets: Any, reduction: str) -> Any:
        import torch.nn.functional as F

        if self.loss_function == "multi_margin":
            return F.multi_margin_loss(logits, targets, reduction=reduction)
        return F.cross_entropy(logits, targets, reduction=reduction)

    def fit(self, X: np.ndarray, y: Sequence) -> None:
        """One optimizer step on the mean loss of the mini-batch.

        Parameters
        ----------
        X : (n_records, n_features) float64
        y : sequence of n_records labels (JSON scalars)

        Raises
        ------
        ValueError
            If the shapes disagree with each other or with the model, or a label is not a
            JSON scalar.
        """
        X, labels = self._check_batch(X, y)
        if labels:
            self._step(X, labels, None)

    def test_then_train(self, X: np.ndarray, y: Sequence,
                        X_test: np.ndarray | None = None, *, with_proba: bool = False
                        ) -> tuple[list, float] | tuple[list, float, np.ndarray]:
        """Predict the batch with the network before it, then take one step on it.

        Returns
        -------
        predictions : list of n_records labels (None before any label was seen)
        loss_sum : float
            Sum of the per-record losses before the step (unseen labels count as classes
            with zero logits).
        proba : (n_records, len(classes)) float64, only with ``with_proba``
            The softmax the predictions are the arg-max of, over ``classes`` after the
            batch; NaN for the classes first seen in this batch (see
            :meth:`Learner.test_then_train`).
        """
        X, labels = self._check_batch(X, y)
        X_test = as_test_matrix(X_test, X)
        if not labels:
            return ([], 0.0, np.zeros((0, len(self.classes)))) if with_proba else ([], 0.0)
        before = list(self.classes)
        tested = None if X_test is None else self._predict_with_proba(X_test, with_proba)
        predictions, loss_sum, proba = self._step(X, labels, tested, with_proba)
        if not with_proba:
            return predictions, loss_sum
        return predictions, loss_sum, widen_proba(proba, before, self.classes, predictions)

    def _predict_with_proba(self, X: np.ndarray, with_proba: bool
                            ) -> tuple[list, np.ndarray | None]:
        """:meth:`predict` and, if asked, :meth:`predict_proba` from one forward pass."""
        import torch

        X = as_matrix(X, self.n_features)
        K = len(self.classes)
        if K < 2 or self._body is None:
            return ([self.classes[0] if K else None] * X.shape[0],
                    np.ones((X.shape[0], K)) if with_proba else None)
        with torch.no_grad():
            logits = self._logits(X)
            predictions = [self.classes[j] for j in logits.argmax(dim=1).tolist()]
            proba = _softmax(logits) if with_proba else None
        return predictions, proba

    def _step(self, X: np.ndarray, labels: list,
              tested: tuple[list, np.ndarray | None] | None, with_proba: bool = False
              ) -> tuple[list, float, np.ndarray | None]:
        import torch

        before = list(self.classes)
        self._add_labels(labels)
        logits = self._logits(X)
        if tested is not None:
            predictions, proba = tested
        elif len(before) < 2:  # the model before the step predicts X itself
            predictions = [before[0] if before else None] * len(labels)
            proba = np.ones((len(labels), len(before))) if with_proba else None
        else:
            known = torch.as_tensor(self._labels.rows(before), device=logits.device)
            scores = logits.detach()[:, known]
            predictions = [before[j] for j in scores.argmax(dim=1).tolist()]
            proba = _softmax(scores) if with_proba else None
        if len(self.classes) < 2:
            return predictions, 0.0, proba
        targets = torch.as_tensor(self._labels.rows(labels), device=logits.device)
        total = self._criterion(logits, targets, "sum")
        n = len(labels)
        finite = bool(torch.isfinite(total))
        if not finite:
            keep = _finite_rows(self._criterion(logits.detach(), targets, "none"))
            if keep is not None:  # step on the rows whose loss is finite, forward again
                # (a NaN row's zero gradient times its inf input is NaN in the backward pass)
                self._leave_out(keep, n)
                targets = targets[torch.as_tensor(keep, device=targets.device)]
                total = self._criterion(self._logits(X[keep]), targets, "sum")
                n = len(keep)
        self._opt.zero_grad(set_to_none=True)
        (total / n).backward()
        _finite_step(self._params(), self._opt, total, finite)
        return predictions, float(total.detach()), proba

    # --- prediction and evaluation ------------------------------------------------------

    def predict(self, X: np.ndarray) -> list:
        """Arg-max class per record (ties: the first in canonical order).

        Parameters
        ----------
        X : (n_records, n_features) float64

        Returns
        -------
        list of n_records labels; all None if no label was ever learned.
        """
        import torch

        X = as_matrix(X, self.n_features)
        K = len(self.classes)
        if K < 2 or self._body is None:
            return [self.classes[0] if K else None] * X.shape[0]
        with torch.no_grad():
            best = self._logits(X).argmax(dim=1).tolist()
        classes = self.classes
        return [classes[j] for j in best]

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Softmax of the logits per record, over ``classes`` (canonical order).

        Parameters
        ----------
        X : (n_records, n_features) float64

        Returns
        -------
        (n_records, len(classes)) float64
            All ones with one class known; no columns with none.
        """
        X = as_matrix(X, self.n_features)
        return self._predict_with_proba(X, True)[1]

    def loss(self, X: np.ndarray, y: Sequence) -> float:
        """Sum over the batch of the per-record loss (the model is unchanged); unseen
        labels count as classes with zero logits; 0 with fewer than two classes."""
        import torch

        X = as_matrix(X, self.n_features)
        labels = as_labels(y)
        if len(labels) != X.shape[0]:
            raise ValueError(f"y has {len(labels)} labels, X has {X.shape[0]} records")
        index = LabelIndex(self.classes)
        for v in labels:
            index.add(v)
        if len(index) < 2 or not labels:
            return 0.0
        with torch.no_grad():
            logits = torch.zeros(len(labels), len(index))
            if self._body is not None and self.classes:
                logits[:, index.rows(self.classes)] = self._logits(X).cpu()
            targets = torch.as_tensor(index.rows(labels))
            return float(self._criterion(logits, targets, "sum"))

    # --- the flat vector (get_params / set_params: _TorchTraining) ------------------------

    def _size(self) -> int:
        return 0 if self._body is None else self._theta0.size

    def _theta_device(self) -> Any:
        return self._W.device

    def layout(self) -> dict:
        """``{"classes", "n_features", "body", "width"}``: the vector is ``body`` numbers,
        then ``len(classes)`` head rows of ``width`` weights, then one bias per class."""
        return {"classes": list(self.classes), "n_features": self.n_features,
                "body": self._body_size() if self._body is not None else 0,
                "width": self._width}

    def grow(self, layout: dict) -> None:
        """Build the network for ``layout``'s ``n_features`` if not built; add its classes.

        Raises
        ------
        ValueError
            If ``layout`` describes another network (``n_features``, ``body``, ``width``).
        """
        d = layout.get("n_features")
        if d is not None:
            if self._body is None:
                self._build(check_n_features(d))
            elif d != self.n_features:
                raise ValueError(f"layout has n_features={d}, the model has {self.n_features}")
            mine = self.layout()
            for key in ("body", "width"):
                if layout.get(key, mine[key]) != mine[key]:
                    raise ValueError(f"layout has {key}={layout.get(key)}, the model has "
                                     f"{mine[key]} (another architecture)")
        self._add_labels(as_labels(layout.get("classes") or []))

    def project(self, w: np.ndarray, layout: dict) -> np.ndarray:
        """Map ``w``, laid out as ``layout``, into this model's layout (after :meth:`grow`);
        head rows of classes absent from ``layout`` are zeros (``θ₀`` there).

        Raises
        ------
        ValueError
            If ``w``'s size does not match ``layout``.
        """
        self.grow(layout)
        w = np.asarray(w, dtype=np.float64)
        if layout.get("n_features") is None:
            if w.ndim != 1 or w.size != 0:
                raise ValueError(f"expected an empty vector for layout {layout}, got {w.shape}")
            return np.zeros_like(self.get_params())
        other = as_labels(layout.get("classes") or [])
        B, h, Kp = int(layout["body"]), int(layout["width"]), len(other)
        if w.ndim != 1 or w.size != B + Kp * h + Kp:
            raise ValueError(f"expected a 1-D vector of {B + Kp * h + Kp} parameters for "
                             f"layout {layout}, got shape {w.shape}")
        K = len(self.classes)
        rows = self._labels.rows(other)
        W = np.zeros((K, h))
        b = np.zeros(K)
        W[rows] = w[B:B + Kp * h].reshape(Kp, h)
        b[rows] = w[B + Kp * h:]
        return np.concatenate([w[:B], W.ravel(), b])

    # --- JSON ---------------------------------------------------------------------------

    def _parameters_json(self) -> dict:
        """``{"classes", "n_features", "params", "optimizer"}``: the weights ``θ`` (not the
        displacement) as a list, and the optimizer's state per parameter tensor."""
        return self._network_json({"classes": list(self.classes),
                                   "n_features": self.n_features}, self._body is not None)

    def _load_parameters(self, parameters: dict) -> None:
        """Load what :meth:`_parameters_json` wrote (every key may be missing or null).

        Raises
        ------
        learning.errors.ParameterError
            Naming the key that is rejected.
        """
        if not parameters:  # nothing to load: do not even import torch (see Learner)
            return
        self._check_keys(parameters, ("classes",))
        classes = LabelIndex.checked(parameters.get("classes"))
        self._reset()
        for label in classes:
            self._labels.add(label)
        self._load_network(parameters)


def layer_chain_size(hyperparameters: dict, parameters: dict, outputs: int) -> int:
    """The weights and biases of fully connected layers ``n_features`` → ``hidden_layers``
    (a request's, default ``[64]``) → ``outputs``; while the width is not declared, those
    past the first layer (:meth:`learning.learners.base.Learner.declared_size`)."""
    d = declared_width(parameters)
    hidden = hyperparameters.get("hidden_layers")
    widths = [*([] if d is None else [d]),
              *([64] if hidden is None else [int(h) for h in hidden]), outputs]
    return sum((a + 1) * b for a, b in zip(widths, widths[1:]))


class MLP(_TorchClassifier):
    """Multi-layer perceptron classifier (PyTorch), trained online by SGD or Adam.

    ``z_0 = x``, ``z_l = act(A_l z_{l-1} + c_l)`` for each hidden layer, then ``logits =
    W z_L + b`` with one row per label; the prediction is the arg-max. Each mini-batch
    ``(X: (n, n_features) float64, y: (n,))`` is one optimizer step on the mean
    ``loss_function``: ``cross_entropy`` (softmax) or ``multi_margin`` (the multi-class hinge),
    plus ``weight_decay/2 ‖θ‖²``. Multi-class natively; labels of any JSON scalar type;
    new labels grow the output layer (see :class:`_TorchClassifier` for the flat vector,
    ``θ − θ₀``). Weights are float32 on ``device``; the initial weights depend only on
    ``seed`` and the record width.

    Parameters
    ----------
    hidden_layers : list of int
        Widths of the hidden layers, input side first; ``[]`` is softmax regression.
    activation : {"relu", "tanh", "sigmoid"}
    optimizer : {"sgd", "adam"}
    learning_rate : float, > 0
        The optimizer's α, the :meth:`step_size`: on ``n`` spokes with
        ``trainingConfiguration.scaling`` ``learning-rate`` each runs at ``α / n``
        (papers/001 §II-C, eq. 4; :mod:`learning.scaling`).
    loss_function : {"cross_entropy", "multi_margin"}
    weight_decay : float, >= 0
        L2 penalty (torch's ``weight_decay``).
    momentum : float in [0, 1)
        SGD momentum (unused by Adam).
    seed : int
        Seeds the initial weights (numpy's generator; identical on every node).
    device : {"cpu", "cuda", "auto"}
        ``auto`` uses CUDA when available; ``cuda`` fails where it is not.

    Only ``learning_rate``, ``weight_decay``, ``momentum`` and ``loss_function`` can change while
    training.

    Examples
    --------
    scikit-learn's digits (1,797 records of 64 pixels) through a running standard scaler,
    streamed in file order three times in mini-batches of 16; prequential accuracy of each
    pass:

    >>> from sklearn.datasets import load_digits
    >>> from learning import Pipeline, StandardScaler
    >>> X, y = load_digits(return_X_y=True)
    >>> pipe = Pipeline([StandardScaler()], MLP(hidden_layers=[64], learning_rate=0.005))
    >>> for _ in range(3):
    ...     hits = sum(pipe.test_then_train(X[i:i + 16], y[i:i + 16])[1]
    ...                for i in range(0, len(X), 16))
    ...     print(f"{hits / len(X):.3f}")
    0.851
    0.953
    0.984

    References
    ----------
    Rumelhart, D. E., Hinton, G. E., Williams, R. J. (1986) Learning representations by
    back-propagating errors. Nature 323:533–536.
    Kingma, D. P., Ba, J. (2015) Adam: a method for stochastic optimization. ICLR 2015.
    """

    HYPERPARAMETERS = (
        Hyperparameter("hidden_layers", INT_LIST, [64], "widths of the hidden layers, input "
                       "side first ([]: softmax regression)", interval="[1, inf)"),
        *_torch_hyperparameters(learning_rate=0.005),
    )

    @classmethod
    def declared_size(cls, hyperparameters: dict, parameters: dict) -> int:
        """:func:`layer_chain_size` to the classes (at least 2)."""
        return layer_chain_size(hyperparameters, parameters,
                                max(2, len(parameters.get("classes") or ())))

    def __init__(self, hidden_layers: list[int] | None = None, activation: str = "relu",
                 optimizer: str = "adam", learning_rate: float = 0.005,
                 loss_function: str = "cross_entropy", weight_decay: float = 0.0,
                 momentum: float = 0.0, seed: int = 0, device: str = "cpu"):
        self.hidden_layers = [64] if hidden_layers is None else hidden_layers
        super().__init__(activation, optimizer, learning_rate, loss_function, weight_decay,
                         momentum, seed, device)

    def _make_body(self, d: int) -> tuple[Any, int]:
        import torch.nn as nn

        layers: list = []
        width = d
        for h in self.hidden_layers:
            layers += [nn.Linear(width, h), _activation(self.activation)]
            width = h
        return nn.Sequential(*layers), width


class CNN(_TorchClassifier):
    """A small convolutional classifier (PyTorch) for image-shaped records.

    A record of ``n_features = C·H·W`` numbers (row-major, channels first) is viewed as an
    image ``image_shape = [C, H, W]``; each entry of ``channels`` adds a ``kernel_size ×
    kernel_size`` convolution (padding ``kernel_size // 2``, so sizes are kept), the
    activation and, while the image is at least 2×2, a 2×2 max-pool; then a dense layer of
    ``hidden`` units (none if 0) and the linear head with one row per label. Training,
    labels, loss, the flat vector and devices are as for :class:`MLP` (one optimizer step
    per mini-batch).

    Parameters
    ----------
    image_shape : [int, int, int]
        ``[channels, height, width]`` of a record; e.g. ``[1, 8, 8]`` for digits.
    channels : list of int
        Output channels of each convolution.
    kernel_size : int, odd, >= 1
    hidden : int, >= 0
        Width of the dense layer after the convolutions (0: none).

    The defaults (one convolution of 8 channels, no dense layer, Adam at 0.01) were the best
    of those tried on 8×8 digits (0.966 prequential accuracy on the third pass, against
    0.936 for ``channels=[8, 16]``); larger images want more channels.
    activation, optimizer, learning_rate, loss_function, weight_decay, momentum, seed, device
        As for :class:`MLP`.

    Examples
    --------
    Digits as 1×8×8 images, as for :class:`MLP`:

    >>> from sklearn.datasets import load_digits
    >>> from learning import Pipeline, StandardScaler
    >>> X, y = load_digits(return_X_y=True)
    >>> pipe = Pipeline([StandardScaler()], CNN(image_shape=[1, 8, 8], channels=[8]))
    >>> for _ in range(3):
    ...     hits = sum(pipe.test_then_train(X[i:i + 16], y[i:i + 16])[1]
    ...                for i in range(0, len(X), 16))
    ...     print(f"{hits / len(X):.3f}")
    0.836
    0.927
    0.966

    References
    ----------
    LeCun, Y., Bottou, L., Bengio, Y., Haffner, P. (1998) Gradient-based learning applied
    to document recognition. Proc. IEEE 86(11):2278–2324.
    """

    HYPERPARAMETERS = (
        Hyperparameter("image_shape", INT_LIST, [1, 8, 8], "[channels, height, width] of a "
                       "record (n_features = C H W, row-major)", interval="[1, inf)", length=3),
        Hyperparameter("channels", INT_LIST, [8], "output channels of each convolution",
                       interval="[1, inf)"),
        Hyperparameter("kernel_size", int, 3, "side of the square convolution kernels, odd",
                       interval="[1, inf)"),
        Hyperparameter("hidden", int, 0, "units of the dense layer after the convolutions "
                       "(0: none)", interval="[0, inf)"),
        *_torch_hyperparameters(learning_rate=0.01),
    )

    def __init__(self, image_shape: list[int] | None = None, channels: list[int] | None = None,
                 kernel_size: int = 3, hidden: int = 0, activation: str = "relu",
                 optimizer: str = "adam", learning_rate: float = 0.01,
                 loss_function: str = "cross_entropy", weight_decay: float = 0.0,
                 momentum: float = 0.0, seed: int = 0, device: str = "cpu"):
        self.image_shape = [1, 8, 8] if image_shape is None else image_shape
        self.channels = [8] if channels is None else channels
        self.kernel_size = kernel_size
        self.hidden = hidden
        super().__init__(activation, optimizer, learning_rate, loss_function, weight_decay,
                         momentum, seed, device)
        if kernel_size % 2 == 0:
            raise HyperparameterError("kernel_size", f"kernel_size must be odd, got {kernel_size}")

    def _make_body(self, d: int) -> tuple[Any, int]:
        import torch.nn as nn

        C, H, W = self.image_shape
        if d != C * H * W:
            raise ValueError(f"records have {d} features; image_shape {self.image_shape} "
                             f"needs {C * H * W}")
        layers: list = [nn.Unflatten(1, (C, H, W))]
        k = self.kernel_size
        for out in self.channels:
            layers += [nn.Conv2d(C, out, k, padding=k // 2), _activation(self.activation)]
            C = out
            if H >= 2 and W >= 2:
                layers.append(nn.MaxPool2d(2))
                H, W = H // 2, W // 2
        layers.append(nn.Flatten())
        width = C * H * W
        if self.hidden:
            layers += [nn.Linear(width, self.hidden), _activation(self.activation)]
            width = self.hidden
        return nn.Sequential(*layers), width


class MLPRegressor(_TorchTraining, Regressor):
    """Multi-layer perceptron regressor (PyTorch): one linear output, trained online on the
    mean squared error by SGD or Adam.

    ``z_0 = x``, ``z_l = act(A_l z_{l-1} + c_l)`` for each hidden layer, then ``ŷ = a · z_L
    + c`` (one output unit). Each mini-batch ``(X: (n, n_features) float64, y: (n,) finite
    reals)`` is **one optimizer step** on ``mean_i (y_i − ŷ_i)²`` (``torch.nn.MSELoss``)
    plus torch's ``weight_decay`` penalty, so the mini-batch size is the SGD batch size.
    Predictions are Python floats (``0.0`` before the network is built, i.e. before the
    first record).

    This is the model of EVENFLOW's experiments (papers/003_026f5d1641a0ab17.txt §IV:
    "The problem is modeled as a regression task, where each network outputs a single
    continuous value … The loss function used is Mean Squared Error (MSE)"; they report the
    test MSE).

    **Evaluation** follows the other regressors (:class:`learning.learners.regressor.Regressor`):
    :meth:`loss` and the ``loss_sum`` of :meth:`test_then_train` are the **sum of absolute
    errors** (so the Query answer's ``meanLoss`` is the prequential MAE, comparable with
    ``PARegressor`` and ``OnlineRidge``), :meth:`score` is the negative MAE; the quality
    metrics (``metrics.cumulative.mae`` / ``rmse`` / ``r2``) come from the predictions.
    :meth:`mse` gives the mean squared error the network trains on. :meth:`test_then_train`
    predicts the whole batch with the network before the step (from the forward pass it
    trains on when the records predicted are those learned).

    **Targets are used as they are**: the output bias starts near 0 and Adam moves it by
    about ``learning_rate`` a mini-batch, so a target far from 0 or of large spread takes
    most of a stream to reach (river's TrumpApproval, approval ≈ 43 %: prequential MAE
    35.5). Put a :class:`~learning.preprocessors.TargetStandardScaler` in the pipeline:
    the network then fits ``(y − mean) / std`` and its predictions are mapped back (0.92
    there; its statistics are synchronized like the features' scalers'). Features are
    best standardized by a ``StandardScaler`` preprocessor.

    **The flat vector** is the displacement from the seeded initialization, ``θ − θ₀``
    (``torch.nn.utils.parameters_to_vector`` order: each layer's weight then bias, input
    side first, the output unit last), float64; every node builds the same ``θ₀`` from
    ``seed``, so averaging displacements is averaging weights, and a fresh model is the
    zero vector. Its layout is ``{"n_features", "size"}`` and cannot grow: vectors of
    another width or architecture are refused. Weights are float32 on ``device``.

    Parameters
    ----------
    hidden_layers : list of int
        Widths of the hidden layers, input side first; ``[]`` is linear least squares.
    activation : {"relu", "tanh", "sigmoid"}
    optimizer : {"sgd", "adam"}
    learning_rate : float, > 0
        The optimizer's α, the :meth:`step_size` (divided by the number of spokes under
        ``trainingConfiguration.scaling`` ``learning-rate``, papers/001 §II-C eq. 4).
    weight_decay : float, >= 0
    momentum : float in [0, 1)
        SGD momentum (unused by Adam).
    seed : int
        Seeds the initial weights (identical on every node).
    device : {"cpu", "cuda", "auto"}

    Only ``learning_rate``, ``weight_decay`` and ``momentum`` can change while training.
    PyTorch needs its own interpreter (``needs_own_interpreter``): in a Flink job it runs
    in process mode, as :class:`MLP` does.

    Examples
    --------
    river's Friedman #1 stream (10 features uniform in [0, 1], ``y = 10 sin(π x_0 x_1) +
    20 (x_2 − ½)² + 10 x_3 + 5 x_4 + N(0, 1)``): 8,000 records in mini-batches of 16, then
    the MSE on the 2,000 records that follow, against their variance (the MSE of
    predicting their mean):

    >>> import itertools
    >>> from river.datasets import synth
    >>> data = list(itertools.islice(synth.Friedman(seed=42), 10_000))
    >>> X = np.array([list(x.values()) for x, _ in data])
    >>> y = [t for _, t in data]
    >>> model = MLPRegressor(hidden_layers=[32, 16], learning_rate=0.01)
    >>> for i in range(0, 8_000, 16):
    ...     model.fit(X[i:i + 16], y[i:i + 16])
    >>> print(f"test MSE {model.mse(X[8_000:], y[8_000:]):.2f}, variance {np.var(y[8_000:]):.2f}")
    test MSE 6.59, variance 24.01

    References
    ----------
    Rumelhart, D. E., Hinton, G. E., Williams, R. J. (1986) Learning representations by
    back-propagating errors. Nature 323:533–536.
    Kingma, D. P., Ba, J. (2015) Adam: a method for stochastic optimization. ICLR 2015.
    Friedman, J. H. (1991) Multivariate adaptive regression splines. Ann. Statist. 19(1):1–67.
    """

    needs_own_interpreter = True  # PyTorch deadlocks in PyFlink thread mode (see Learner)
    has_proba = False
    _MUTABLE: ClassVar[tuple[str, ...]] = ("learning_rate", "weight_decay", "momentum")

    HYPERPARAMETERS = (
        Hyperparameter("hidden_layers", INT_LIST, [64], "widths of the hidden layers, input "
                       "side first ([]: linear least squares)", interval="[1, inf)"),
        *(h for h in _torch_hyperparameters(learning_rate=0.005) if h.name != "loss_function"),
    )

    @classmethod
    def declared_size(cls, hyperparameters: dict, parameters: dict) -> int:
        """:func:`layer_chain_size` to one output."""
        return layer_chain_size(hyperparameters, parameters, 1)

    def __init__(self, hidden_layers: list[int] | None = None, activation: str = "relu",
                 optimizer: str = "adam", learning_rate: float = 0.005,
                 weight_decay: float = 0.0, momentum: float = 0.0, seed: int = 0,
                 device: str = "cpu"):
        self.hidden_layers = [64] if hidden_layers is None else hidden_layers
        self.activation = activation
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.momentum = momentum
        self.seed = seed
        self.device = device
        check_stored(self)
        if self.device == "cuda":
            _device("cuda")  # refuse at once where there is no GPU
        self._reset()

    def _reset(self) -> None:
        self.n_features: int | None = None
        self._net = None
        self._opt = None
        self._theta0: np.ndarray | None = None

    # --- construction -------------------------------------------------------------------

    def _build(self, d: int) -> None:
        """The network for ``d`` features, seeded (:func:`_seeded_init`), and its optimizer."""
        import torch.nn as nn

        layers: list = []
        width = d
        for h in self.hidden_layers:
            layers += [nn.Linear(width, h), _activation(self.activation)]
            width = h
        layers.append(nn.Linear(width, 1))
        net = nn.Sequential(*layers)
        _seeded_init(net, self.seed)
        self._net = net.to(_device(self.device))
        self.n_features = d
        self._opt = self._make_optimizer()
        self._theta0 = self._vector()

    def _params(self) -> list:
        return list(self._net.parameters())

    def _size(self) -> int:
        return 0 if self._net is None else self._theta0.size

    # --- learning -----------------------------------------------------------------------

    def _checked(self, X: Any, y: Sequence) -> tuple[np.ndarray, np.ndarray]:
        self.refused_rows = ()
        X, t = self._check_targets(X, y, self.n_features)
        if self._net is None and X.shape[0]:
            self._build(X.shape[1])
        return X, t

    def _tensor(self, X: np.ndarray) -> Any:
        import torch

        return torch.as_tensor(X, dtype=torch.float32, device=self._theta_device())

    def _theta_device(self) -> Any:
        return next(self._net.parameters()).device

    def _forward(self, X: np.ndarray) -> Any:
        return self._net(self._tensor(X)).reshape(-1)

    def _step(self, X: np.ndarray, t: np.ndarray) -> np.ndarray:
        """One optimizer step on the batch's MSE; the predictions before it, float64."""
        import torch

        out = self._forward(X)
        target = torch.as_tensor(t, dtype=torch.float32, device=out.device)
        loss = torch.nn.functional.mse_loss(out, target)
        finite = bool(torch.isfinite(loss))
        if not finite:
            keep = _finite_rows((out.detach() - target) ** 2)
            if keep is not None:  # as the classifiers' _step
                self._leave_out(keep, len(t))
                loss = torch.nn.functional.mse_loss(self._forward(X[keep]), target[
                    torch.as_tensor(keep, device=target.device)])
        self._opt.zero_grad(set_to_none=True)
        loss.backward()
        _finite_step(self._params(), self._opt, loss, finite)
        return out.detach().cpu().double().numpy()

    def fit(self, X: np.ndarray, y: Sequence) -> None:
        """One optimizer step on the mean squared error of the mini-batch.

        Parameters
        ----------
        X : (n_records, n_features) float64
        y : sequence of n_records finite real targets

        Raises
        ------
        ValueError
            If the shapes disagree with each other or with the model, or a target is not
            a finite real number.
        """
        X, t = self._checked(X, y)
        if t.size:
            self._step(X, t)

    def test_then_train(self, X: np.ndarray, y: Sequence,
                        X_test: np.ndarray | None = None) -> tuple[list, float]:
        """Predict the batch with the network before it, then take one step on it.

        Parameters
        ----------
        X : (n_records, n_features) float64
            Records as learned.
        y : sequence of n_records finite real targets
        X_test : (n_records, n_features) float64 or None
            Records as predicted (None: ``X``).

        Returns
        -------
        predictions : list of n_records floats
        loss_sum : float
            Sum of the absolute errors of those predictions (the prequential MAE times
            ``n_records``; the step itself minimizes the squared error).
        """
        X, t = self._checked(X, y)
        X_test = as_test_matrix(X_test, X)
        if not t.size:
            return [], 0.0
        tested = None if X_test is None else self._predict_array(X_test)
        before = self._step(X, t)
        predictions = before if tested is None else tested
        errors = np.abs(t - predictions)
        if self.refused_rows:
            errors[list(self.refused_rows)] = 0.0
        return predictions.tolist(), float(errors.sum())

    def _predict_array(self, X: np.ndarray) -> np.ndarray:
        import torch

        if self._net is None:
            return np.zeros(X.shape[0])
        with torch.no_grad():
            return self._forward(X).cpu().double().numpy()

    def mse(self, X: np.ndarray, y: Sequence) -> float:
        """Mean squared error on the batch (the model is unchanged); NaN if empty.

        Raises
        ------
        ValueError
            As :meth:`loss`.
        """
        X, t = self._check_targets(X, y, self.n_features)
        if not t.size:
            return float("nan")
        return float(np.mean((t - self._predict_array(X)) ** 2))

    def layout(self) -> dict:
        """``{"n_features", "size"}``: the record width (None until known) and the vector's
        size (which the architecture fixes)."""
        return {"n_features": self.n_features, "size": self._size()}

    def grow(self, layout: dict) -> None:
        """Build the network for ``layout``'s ``n_features`` if not built.

        Raises
        ------
        ValueError
            If ``layout`` describes another network (``n_features`` or ``size``).
        """
        d = layout.get("n_features")
        if d is None:
            return
        if self._net is None:
            self._build(check_n_features(d))
        elif d != self.n_features:
            raise ValueError(f"layout has n_features={d}, the model has {self.n_features}")
        size = layout.get("size")
        if size is not None and size != self._size():
            raise ValueError(f"layout has size={size}, the model has {self._size()} "
                             f"(another architecture)")

    def project(self, w: np.ndarray, layout: dict) -> np.ndarray:
        """``w`` in this layout (after :meth:`grow`); the vector of a network never built
        (size 0) is the zero displacement.

        Raises
        ------
        ValueError
            If ``w``'s size does not match ``layout``.
        """
        self.grow(layout)
        w = np.asarray(w, dtype=np.float64)
        if layout.get("n_features") is None:
            if w.ndim != 1 or w.size != 0:
                raise ValueError(f"expected an empty vector for layout {layout}, got {w.shape}")
            return np.zeros_like(self.get_params())
        if w.ndim != 1 or w.size != self._size():
            raise ValueError(f"expected a 1-D vector of {self._size()} parameters for "
                             f"layout {layout}, got shape {w.shape}")
        return w.copy()

    # --- JSON ---------------------------------------------------------------------------

    def _parameters_json(self) -> dict:
        """``{"n_features", "params", "optimizer"}``: the weights ``θ`` (not the
        displacement) as a list, and the optimizer's state per parameter tensor."""
        return self._network_json({"n_features": self.n_features}, self._net is not None)

    def _load_parameters(self, parameters: dict) -> None:
        """Load what :meth:`_parameters_json` wrote (every key may be missing or null).

        Raises
        ------
        learning.errors.ParameterError
            Naming the key that is rejected.
        """
        if not parameters:  # nothing to load: do not even import torch (see Learner)
            return
        self._check_keys(parameters)
        self._reset()
        self._load_network(parameters)
