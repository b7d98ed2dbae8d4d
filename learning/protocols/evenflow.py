"""EVENFLOW: data-driven synchronization with local sphere filters, on a sharded parameter
server (papers/003_026f5d1641a0ab17.txt §III).

The application gives a monitored function ``f(w, w^(t))`` and a threshold ``T``
(``monitoredFunction``, ``threshold``); a synchronization is needed only once
``f(w^(t+ϰ+1), w^(t)) > T`` may hold for the (unknown) global model. After every fitted
mini-batch, spoke ``i`` with drift ``Δ_i = w_i − w^(t) = −η Σ_r g_i^(t+r)`` (eq. 4) builds
the sphere

    B(w^(t) + ½Δ_i, ½‖Δ_i‖)                                    (§III.A)

and asks hub 0 for a synchronization when the sphere may reach ``{f > T}``. Hub 0 then
tells every spoke to push; the hubs average (eq. 5, weighted as eq. 2,
:class:`learning.protocols.sharding.AveragingHub`) and broadcast, and a new round starts.
Because the global model is a convex combination of the ``w^(t) + Δ_i`` (eq. 6), it lies in
the union of the spheres: while no sphere leaves ``{f ≤ T}``, ``f(w̄) ≤ T`` holds.

Monitored functions
-------------------
The sphere test is ``max_{x ∈ B} f(x, w^(t)) > T`` (the minimum is ≤ T since ``w^(t)`` lies
on every sphere and ``f(w^(t), w^(t)) = 0``; §III.A: "checking if argmin f, argmax f … lie
on different sides of T"). A monitored function is a :class:`MonitoredFunction`: its
``value(w, w_ref)`` and an upper bound ``sphere_max(w_ref, centre, radius)`` of ``f(·, w_ref)``
over the ball ``‖x − centre‖ ≤ radius``. ``monitoredFunction`` names any registered one
(:func:`register_monitored_function`; a user module named in ``JobConfig.protocol_modules``
registers its own at import, on every spoke, hub and request parser). Built in:

- ``l2``: ``f = ‖w − w^(t)‖²``; the farthest point of the sphere from ``w^(t)`` is at
  distance ``‖Δ_i‖``, so the test is exact: ``‖Δ_i‖² > T`` (fast: ``‖Δ̂_m‖² > T`` in the
  m-dimensional DFT space, §III.B).
- ``kl``: ``f = KL(softmax(w^(t)) ‖ softmax(w))`` (nats) over the flat parameter vector.
  What the paper monitors: §IV says only "The monitored function which expresses the
  application tolerance value on weight changes before a synchronization, for the EVENFLOW
  protocols, is KL-divergence, while the threshold T is set to 0.3", and §III requires
  ``f : ℝ^d → ℝ`` of the weight vectors (``f(w^(t+ϰ+1), w^(t))``). The paper names no
  distributions: neither which probability vectors the weights define, nor the direction.
  Its networks (NN400 … NN4M on SUSY) are regressors with one output, so a KL between the
  models' predictive distributions would need records and the network, and its maximum over
  a sphere of weights has no bound a spoke can compute (the output is not convex in the
  weights); the paper's exact ``f`` therefore cannot be reproduced from what it states or
  from what a spoke has. Ours is the one defined by the vectors alone. It is convex in
  ``w`` (log-sum-exp minus a linear term) with gradient ``softmax(w) − softmax(w^(t))``
  (norm ≤ √2) and Hessian ``diag(q) − q qᵀ ⪯ ½ I``, so over a ball of centre ``c`` and
  radius ``r``: ``max f ≤ f(c) + min(√2 r, ‖∇f(c)‖ r + r²/4)`` (:func:`kl_sphere_max`):
  conservative, it may ask for a synchronization a little early, never late.

Variants (``variant``)
----------------------
- ``basic``: the sphere in the full d-dimensional space (§III.A);
- ``fast``: each spoke takes the orthonormal DFT of its own summed update ``Δ_i`` (numpy's
  FFT with ``norm="ortho"``, so norms are kept, Parseval), sorts its coefficients by
  magnitude and keeps the top ``m`` (``coefficients``, default 50; :func:`top_dft`), and
  tests ``B(½Δ̂_m, ½‖Δ̂_m‖)`` of the transformed problem (§III.B). ``l2`` is tested in the
  m-dimensional space; any other function gets the sphere mapped back,
  ``B(w^(t) + ½ Re IDFT(Δ̂_m), ½‖Δ̂_m‖)``. Both bounds of §III.B are checked at every test
  and reported (:func:`dft_errors`):

  - Lemma 1, the radius: ``|½‖Δ_i‖ − ½‖Δ̂_m‖| ≤ B``;
  - Corollary 1, the centre: ``‖½Δ̂_i − ½Δ̂_m‖ ≤ B`` (in the DFT space, which is
    ``‖½Δ_i − ½ IDFT(Δ̂_m)‖``: the DFT is unitary);

  with ``B = ½ √((ϰ+1)(1 − m/d)) · √(Σ_r ‖η g_i^(t+r)‖²)`` (:func:`lemma1_bound`).
  ``lemma1Violations`` / ``corollary1Violations`` must stay 0, the ``…MaxRatio`` ≤ 1. The
  paper writes the last factor as ``‖g_i^(t+r)‖``; its own proof (Jensen, Ineq. 8) gives the
  root of the summed squared norms of the ϰ+1 updates, and read with the largest single
  update norm the bounds fail for aligned updates (``tests/test_protocols.py``). Keeping
  the top m of the sum (rather than of each update, which the proof assumes) keeps both
  bounds: ``‖Δ − Δ_m‖ ≤ √(1 − m/d) ‖Δ‖`` (the m largest of d coefficients hold at least
  m/d of the energy, Ineq. 7) and ``‖Δ‖ ≤ Σ_r ‖u_r‖ ≤ √(ϰ+1) √(Σ_r ‖u_r‖²)``. Both are tight
  at once for ϰ+1 equal updates with a flat spectrum (a spike): Corollary 1 with equality,
  Lemma 1 up to ``(1 − √(m/d)) / √(1 − m/d)`` (``tests/test_evenflow.py``).

The fast sphere approximates the basic one (within those bounds); it is not conservative.
The spoke whose sphere leaves ``{f ≤ T}`` pushes at once, without waiting for hub 0's
``begin_sync`` to come back: in the Flink job that is a trip through Kafka, during which it
would train on past its own violation (the others do train on until ``begin_sync`` reaches
them; RandomRBF, basic, T 0.04: 0.7820 prequential accuracy before, 0.7893 after, the
centralized learner 0.8012). On the in-process kernel nothing changes.
Nobody waits on a spoke's stream except during a synchronization, which every spoke joins
through the message path: a finite stream cannot leave a round open.
"""

from __future__ import annotations

import abc
import inspect
import math
from types import MappingProxyType
from typing import Mapping

import numpy as np

from learning.errors import RequestError
from learning.protocols.fda import THRESHOLD
from learning.protocols.parameters import NAME_LENGTH, Param, ProtocolParams, Rule
from learning.protocols.sharding import AveragingHub, ShardedSpoke, short_rounds_warning
from middleware import remote

__all__ = ["EvenFlowSpoke", "EvenFlowHub", "EVENFLOW_VARIANTS", "MONITORED_FUNCTIONS", "VARIANT",
           "COEFFICIENTS", "MONITORED_FUNCTION", "PARAMETERS", "MonitoredFunction",
           "register_monitored_function", "monitored_function", "L2", "KL",
           "top_dft", "dft_errors", "lemma1_bound", "kl_divergence", "kl_sphere_max"]

EVENFLOW_VARIANTS = ("basic", "fast")


# -- monitored functions ------------------------------------------------------------------------
class MonitoredFunction(abc.ABC):
    """A monitored function ``f(w, w^(t))`` of papers/003 §III, with the bound its sphere
    filter needs (§III.A).

    The contract (every spoke calls it after every fitted mini-batch, the hot path):

    - ``w``, ``w_ref``, ``centre``: ``(d,)`` float64, flat parameter vectors
      (:meth:`learning.learners.Learner.get_params`), ``w_ref`` the last global model
      ``w^(t)``; ``d`` may be 0 (a model with no parameters yet); ``radius``: a float ≥ 0
      in the units of the parameters.
    - :meth:`value` returns ``f(w, w_ref)`` as a float, with ``f(w_ref, w_ref) = 0``.
    - :meth:`sphere_max` returns a float ``≥ max_{‖x − centre‖ ≤ radius} f(x, w_ref)``:
      exact for a convex ``f`` whose maximum over a ball has a closed form, else a
      conservative upper bound. A bound below the true maximum may let the global model
      cross ``T`` unnoticed (the guarantee of §III.A is lost); ``inf`` asks for a
      synchronization.
    - Pure and deterministic: the same answer on every spoke, no state, no I/O; it must
      not modify its arguments.

    Register an instance with :func:`register_monitored_function`.
    """

    @abc.abstractmethod
    def value(self, w: np.ndarray, w_ref: np.ndarray) -> float:
        """``f(w, w_ref)``; ``w``, ``w_ref``: (d,) float64."""

    @abc.abstractmethod
    def sphere_max(self, w_ref: np.ndarray, centre: np.ndarray, radius: float) -> float:
        """An upper bound of ``f(x, w_ref)`` over ``‖x − centre‖ ≤ radius``; ``w_ref``,
        ``centre``: (d,) float64, ``radius`` ≥ 0."""


class L2(MonitoredFunction):
    """``f = ‖w − w_ref‖²``: exact over a ball, ``(‖centre − w_ref‖ + radius)²``."""

    def value(self, w: np.ndarray, w_ref: np.ndarray) -> float:
        delta = w - w_ref
        return float(delta @ delta)

    def sphere_max(self, w_ref: np.ndarray, centre: np.ndarray, radius: float) -> float:
        return (float(np.linalg.norm(centre - w_ref)) + radius) ** 2


def _log_softmax(w: np.ndarray) -> np.ndarray:
    z = w - np.max(w)
    return z - math.log(float(np.exp(z).sum()))


def kl_divergence(w_ref: np.ndarray, w: np.ndarray) -> float:
    """``KL(softmax(w_ref) ‖ softmax(w))`` in nats; ``w_ref``, ``w``: (d,) float64; 0 for
    empty vectors."""
    if w.size == 0:
        return 0.0
    lp, lq = _log_softmax(w_ref), _log_softmax(w)
    return float(np.exp(lp) @ (lp - lq))


def kl_sphere_max(w_ref: np.ndarray, centre: np.ndarray, radius: float) -> float:
    """An upper bound of ``KL(softmax(w_ref) ‖ softmax(x))`` (nats) over
    ``‖x − centre‖ ≤ radius``: ``f(c) + min(√2 r, ‖∇f(c)‖ r + r²/4)`` (the gradient's norm
    is at most √2 and the Hessian ``⪯ ½ I``; see the module docstring). ``w_ref``,
    ``centre``: (d,) float64."""
    if centre.size == 0:
        return 0.0
    f_c = kl_divergence(w_ref, centre)
    grad = np.exp(_log_softmax(centre)) - np.exp(_log_softmax(w_ref))
    return f_c + min(math.sqrt(2.0) * radius, float(np.linalg.norm(grad)) * radius + radius ** 2 / 4)


class KL(MonitoredFunction):
    """``f = KL(softmax(w_ref) ‖ softmax(w))`` (nats), the bound of :func:`kl_sphere_max`;
    what it is and why it is not exactly the paper's (§IV): see the module docstring."""

    def value(self, w: np.ndarray, w_ref: np.ndarray) -> float:
        return kl_divergence(w_ref, w)

    def sphere_max(self, w_ref: np.ndarray, centre: np.ndarray, radius: float) -> float:
        return kl_sphere_max(w_ref, centre, radius)


_FUNCTIONS: dict[str, MonitoredFunction] = {}
#: name → registered :class:`MonitoredFunction` (a read-only view, registration order)
MONITORED_FUNCTIONS: Mapping[str, MonitoredFunction] = MappingProxyType(_FUNCTIONS)


def _origin(fn: MonitoredFunction) -> tuple[str, str]:
    """Where its class is defined: the same module imported under two names (a test
    collector does that) registers the same function, not a rival one."""
    cls = type(fn)
    return inspect.getfile(cls), cls.__qualname__


def register_monitored_function(name: str, fn: MonitoredFunction) -> None:
    """Make ``fn`` available to EVENFLOW's ``trainingConfiguration.monitoredFunction``
    under ``name`` (papers/003 §III: "the application must provide one, any, function f").

    A job loads user functions by importing the modules named in its configuration
    (``JobConfig.protocol_modules``), which call this at import time on every spoke, hub
    and request parser; registering the same class again under its name replaces it.

    Parameters
    ----------
    name : str
        1 to 128 characters: what ``monitoredFunction`` names it.
    fn : MonitoredFunction
        Its ``value`` and ``sphere_max`` (see :class:`MonitoredFunction` for the contract).

    Raises
    ------
    TypeError
        When ``fn`` is not a :class:`MonitoredFunction` instance.
    ValueError
        When ``name`` is not a string of 1 to 128 characters, or is taken by a function of
        another class.

    Examples
    --------
    >>> import numpy as np
    >>> class LInf(MonitoredFunction):
    ...     def value(self, w, w_ref):
    ...         return float(np.max(np.abs(w - w_ref), initial=0.0))
    ...     def sphere_max(self, w_ref, centre, radius):
    ...         return float(np.max(np.abs(centre - w_ref), initial=0.0)) + radius
    >>> register_monitored_function("linf", LInf())
    >>> PARAMETERS.of({"threshold": 0.1, "monitoredFunction": "linf"})["monitoredFunction"]
    'linf'
    >>> del _FUNCTIONS["linf"]
    """
    if not isinstance(fn, MonitoredFunction):
        raise TypeError(f"monitored function {name!r}: need a MonitoredFunction instance, "
                        f"got {fn!r}")
    if not isinstance(name, str) or not 1 <= len(name) <= NAME_LENGTH:
        raise ValueError(f"a monitored function's name is a string of 1 to {NAME_LENGTH} "
                         f"characters, got {name!r}")
    old = _FUNCTIONS.get(name)
    if old is not None and _origin(old) != _origin(fn):
        raise ValueError(f"monitored function {name!r} is already registered by "
                         f"{type(old).__module__}.{type(old).__qualname__}")
    _FUNCTIONS[name] = fn


def monitored_function(name: str) -> MonitoredFunction:
    """The registered function ``name``.

    Raises
    ------
    learning.errors.RequestError
        ``schema`` (field ``trainingConfiguration.monitoredFunction``) naming the
        registered ones, when ``name`` is not registered.
    """
    try:
        return _FUNCTIONS[name]
    except KeyError:
        raise _unregistered(name) from None


def _unregistered(name: str) -> RequestError:
    return RequestError("schema", f"monitoredFunction {name!r} is not registered; registered: "
                        f"{', '.join(_FUNCTIONS)} (learning.protocols.evenflow."
                        f"register_monitored_function)", "trainingConfiguration.monitoredFunction")


register_monitored_function("l2", L2())
register_monitored_function("kl", KL())


class _Registered(Rule):
    """The rule that ``monitoredFunction`` names a registered function: checked at Create
    (and by the nodes), its message naming the registered ones. Membership is a rule, not
    the parameter's choices, so that the schema (a name) and the parameter's validator
    agree while user modules register more (as ``protocol`` is a registered name)."""

    def check(self, values: Mapping) -> None:
        name = values.get("monitoredFunction")
        if name is not None and name not in _FUNCTIONS:
            raise _unregistered(name)


#: ``trainingConfiguration.variant``: the sphere of §III.A or of §III.B
VARIANT = Param("variant", str, "basic", "basic: the sphere in the full space (§III.A); fast: "
                "from the top-m DFT coefficients (§III.B)", choices=EVENFLOW_VARIANTS)
#: ``trainingConfiguration.coefficients``: m of §III.B
COEFFICIENTS = Param("coefficients", int, 50, "m, the DFT coefficients the fast variant keeps "
                     "(top-m, §III.B)", interval="[1, 10000000]")
#: ``trainingConfiguration.monitoredFunction``: f of §III, a registered name
MONITORED_FUNCTION = Param("monitoredFunction", str, "l2", "f, a registered monitored function "
                           "(learning.protocols.evenflow.register_monitored_function): built in "
                           "l2, the squared L2 distance to the last global model, and kl, "
                           "KL(softmax(w_t) || softmax(w)) (§IV)")
#: EVENFLOW's declaration (:mod:`learning.protocols.parameters`); ``threshold`` is T
PARAMETERS = ProtocolParams(reference="papers/003 §III",
                            params=(VARIANT, THRESHOLD, COEFFICIENTS, MONITORED_FUNCTION),
                            rules=(_Registered(("monitoredFunction",), "monitoredFunction is "
                                               "registered", lambda name: name in _FUNCTIONS),))


# -- the fast variant's DFT (§III.B) --------------------------------------------------------
def _top(V: np.ndarray, m: int) -> np.ndarray:
    if m >= V.size:
        return V
    out = np.zeros_like(V)
    keep = np.argpartition(np.abs(V), V.size - m)[V.size - m:]
    out[keep] = V[keep]
    return out


def top_dft(v: np.ndarray, m: int) -> np.ndarray:
    """The orthonormal DFT of ``v`` with all but its ``m`` largest-magnitude coefficients
    set to zero (§III.B: "sorting the coefficients … in descending order and keep only the
    m ≪ d largest").

    Parameters
    ----------
    v : (d,) float64
        A spoke's summed update ``Δ_i = Σ_r u_r``.
    m : int
        Coefficients kept, ≥ 1 (all of them when ``m ≥ d``).

    Returns
    -------
    (d,) complex128, ``m`` non-zero entries (``‖top_dft(v, d)‖ = ‖v‖``, Parseval).
    """
    return _top(np.fft.fft(np.asarray(v, dtype=np.float64), norm="ortho"), m)


def dft_errors(v: np.ndarray, m: int) -> tuple[np.ndarray, float, float]:
    """The top-``m`` DFT of ``v`` and the errors §III.B bounds.

    Parameters
    ----------
    v : (d,) float64
        ``Δ_i``, the summed update.
    m : int

    Returns
    -------
    top : (d,) complex128
        :func:`top_dft` of ``v``.
    radius_error : float
        ``|½‖v‖ − ½‖top‖|``, what Lemma 1 bounds.
    centre_error : float
        ``½‖DFT(v) − top‖``, what Corollary 1 bounds (``≥ radius_error``, triangle
        inequality).
    """
    V = np.fft.fft(np.asarray(v, dtype=np.float64), norm="ortho")
    top = _top(V, m)
    radius_error = 0.5 * abs(float(np.linalg.norm(v)) - float(np.linalg.norm(top)))
    return top, radius_error, 0.5 * float(np.linalg.norm(V - top))


def lemma1_bound(update_sq_norms: list[float] | np.ndarray, m: int, d: int) -> float:
    """The bound of Lemma 1 and Corollary 1 of papers/003 (§III.B) with the factor their
    proof gives (Ineq. 8–9): ``½ √((ϰ+1)(1 − m/d)) √(Σ_r ‖u_r‖²)``.

    Parameters
    ----------
    update_sq_norms : sequence of float
        ``‖u_r‖²`` of the ϰ+1 updates ``u_r = −η g^(t+r)`` since the last synchronization.
    m, d : int
        Coefficients kept, dimension.

    Returns
    -------
    float, in the units of the parameters; 0 for ``d ≤ 0`` or no update.
    """
    return lemma1_bound_of_sum(len(update_sq_norms), float(np.sum(update_sq_norms)), m, d)


def lemma1_bound_of_sum(n: int, total: float, m: int, d: int) -> float:
    """:func:`lemma1_bound` from the number ``n`` = ϰ+1 of updates and ``total`` =
    ``Σ_r ‖u_r‖²``, which a spoke keeps as running values (a list summed at every
    mini-batch cost a round of r mini-batches O(r²))."""
    if d <= 0 or n == 0:
        return 0.0
    return 0.5 * math.sqrt(n * max(0.0, 1.0 - m / d)) * math.sqrt(total)


class _BoundCheck:
    """Counts of one bound's checks: violations and the largest error / bound ratio."""

    __slots__ = ("checks", "violations", "max_ratio")

    def __init__(self) -> None:
        self.checks = self.violations = 0
        self.max_ratio = 0.0

    def check(self, err: float, bound: float, scale: float) -> None:
        self.checks += 1
        if err > bound * (1.0 + 1e-9) + 1e-12 * max(1.0, scale):  # rounding, not a failure
            self.violations += 1
        if bound > 0:
            self.max_ratio = max(self.max_ratio, err / bound)


class EvenFlowHub(AveragingHub):
    """A shard of the averaging rounds; hub 0 also turns a spoke's request into a
    synchronization of all (``violation`` → ``begin_sync`` to every spoke).

    Attributes
    ----------
    requests : int
        Synchronization requests received (hub 0), duplicates of a round included.
    """

    safe_zone_rounds = True

    def __init__(self, request) -> None:
        super().__init__(request)
        values = PARAMETERS.of(request.training_configuration)
        self.variant, self.function = values["variant"], values["monitoredFunction"]
        self.threshold = values["threshold"]
        self.ev_round = 0
        self.requests = 0
        self._syncing = False

    def update(self, request) -> None:
        """As :meth:`AveragingHub.update`; the Query then reports the new threshold,
        variant and monitored function (the spokes test with them from their next
        mini-batch: :meth:`EvenFlowSpoke.on_update`)."""
        super().update(request)
        values = PARAMETERS.of(self.request.training_configuration)
        self.variant, self.function = values["variant"], values["monitoredFunction"]
        self.threshold = values["threshold"]

    @remote(oneway=True)
    def violation(self, round_: int, spoke: int) -> None:
        """Spoke ``spoke``'s sphere may leave ``{f ≤ T}`` in round ``round_``."""
        self.requests += 1
        if round_ == self.ev_round and not self._syncing:
            self._syncing = True
            self.broadcast.begin_sync(round_)

    def on_round_end(self, w: np.ndarray) -> None:
        self.ev_round += 1
        self._syncing = False

    def safe_zone_warnings(self, per_round: float | None, rounds: int) -> list[str]:
        return short_rounds_warning(rounds, per_round, self.threshold,
                                    f" (monitored function {self.function})")

    def global_statistics(self) -> dict:
        out = super().global_statistics()
        out.update({"variant": self.variant, "monitoredFunction": self.function,
                    "threshold": self.threshold, "syncRequests": self.requests})
        return out


class EvenFlowSpoke(ShardedSpoke):
    """An EVENFLOW worker: test the local sphere after every fitted mini-batch, ask for a
    synchronization when it may leave ``{f ≤ T}``, push when hub 0 says so.

    Raises
    ------
    learning.errors.RequestError
        ``schema`` for a ``monitoredFunction`` that is not registered on this node.
    """

    safe_zone_rounds = True

    peer = EvenFlowHub
    #: a ``begin_sync`` of a later round than this spoke's, kept until it gets there
    _pending_sync: int | None = None
    #: class defaults for spokes restored from snapshots that kept the list of ``‖u_r‖²``
    _updates, _update_sq_sum = 0, 0.0

    def __init__(self, request) -> None:
        super().__init__(request)
        values = PARAMETERS.of(request.training_configuration)
        self.variant, self.function = values["variant"], values["monitoredFunction"]
        self.threshold, self.coefficients = values["threshold"], values["coefficients"]
        self.ev_round = 0
        self.requested = False
        self.in_sync = False
        self.tests = self.requests = 0
        self.lemma1 = _BoundCheck()       # §III.B Lemma 1, the radius
        self.corollary1 = _BoundCheck()   # §III.B Corollary 1, the centre
        self.last_value = 0.0
        self._base: tuple[np.ndarray, dict] | None = None   # w^(t)
        self._prev: tuple[np.ndarray, dict] | None = None   # w before the last mini-batch
        self._updates, self._update_sq_sum = 0, 0.0          # ϰ+1 and Σ_r ‖u_r‖²

    def on_update(self) -> None:
        super().on_update()
        values = PARAMETERS.of(self.request.training_configuration)  # the next test uses them
        self.variant, self.function = values["variant"], values["monitoredFunction"]
        self.threshold, self.coefficients = values["threshold"], values["coefficients"]

    def on_relayout(self) -> None:
        """A new layout: the round's base and the last mini-batch's model were the old
        model's; the monitoring starts again from the new one."""
        super().on_relayout()
        self._base = self._prev = None
        self._updates, self._update_sq_sum = 0, 0.0

    def sphere_max(self) -> float:
        """The largest value ``f`` can take on this spoke's sphere (an upper bound, as the
        monitored function's ``sphere_max`` gives it), as the variant builds the sphere;
        the fast variant also checks Lemma 1 and Corollary 1."""
        learner = self.pipeline.learner
        w = learner.get_params()
        w_t = self.in_current(self._base)
        delta = w - w_t
        if self.variant == "basic":
            if self.function == "l2":
                return float(delta @ delta)
            return float(monitored_function(self.function).sphere_max(
                w_t, w_t + 0.5 * delta, 0.5 * float(np.linalg.norm(delta))))
        D, radius_error, centre_error = dft_errors(delta, self.coefficients)
        norm_m = float(np.linalg.norm(D))
        bound = lemma1_bound_of_sum(self._updates, self._update_sq_sum, self.coefficients,
                                    delta.size)
        scale = float(np.linalg.norm(delta))
        self.lemma1.check(radius_error, bound, scale)
        self.corollary1.check(centre_error, bound, scale)
        if self.function == "l2":
            return norm_m ** 2
        approx = np.fft.ifft(D, norm="ortho").real
        return float(monitored_function(self.function).sphere_max(
            w_t, w_t + 0.5 * approx, 0.5 * norm_m))

    def after_batch(self, n_records: int) -> None:
        w = self.pipeline.learner.get_params()
        u = w - self.in_current(self._prev)
        self._updates += 1
        self._update_sq_sum += float(u @ u)
        self._prev = (w, self.pipeline.learner.layout())
        if self.requested or self.in_sync:
            return
        self.tests += 1
        self.last_value = self.sphere_max()
        if self.last_value > self.threshold:
            self.requested = True
            self.requests += 1
            self.peers[0].violation(self.ev_round, self.ctx.index)
            # the round ends: push now rather than when hub 0's begin_sync comes back (a
            # feedback round trip, records this spoke would train on past its violation)
            self.in_sync = True
            self.sync_models(self._new_round)

    @remote(oneway=True)
    def begin_sync(self, round_: int) -> None:
        """Hub 0 ends round ``round_``: push and wait for the average (the spoke whose
        violation ended it pushed already). One for a later round than this spoke's is kept
        until it gets there: with several hubs the last hub's answer to the previous round
        can come after hub 0's ``begin_sync``, and dropping it left every hub's round
        waiting for this spoke's push for good."""
        if round_ > self.ev_round:
            self._pending_sync = round_
            return
        if round_ != self.ev_round or self.in_sync:
            return
        self.in_sync = True
        self.sync_models(self._new_round)

    def _new_round(self, w_global: np.ndarray) -> None:
        layout = self.pipeline.learner.layout()
        self._base = (w_global.copy(), layout)
        self._prev = (w_global.copy(), layout)
        self._updates, self._update_sq_sum = 0, 0.0
        self.ev_round += 1
        self.requested = self.in_sync = False
        pending, self._pending_sync = self._pending_sync, None
        if pending is not None and pending >= self.ev_round:
            self.begin_sync(pending)

    def on_sync_failed(self, method: str, errors: list) -> None:
        self.requested = self.in_sync = False

    def protocol_statistics(self) -> dict:
        """As :meth:`ShardedSpoke.protocol_statistics`, plus ``sphereTests``,
        ``syncRequests``, ``lastSphereMax`` (in the units of f) and, for the bounds of
        §III.B (fast variant), ``lemma1*`` / ``corollary1*``: ``Checks``, ``Violations``
        (must be 0) and ``MaxRatio`` (largest error / bound, ≤ 1)."""
        out = super().protocol_statistics()
        out.update({"variant": self.variant, "monitoredFunction": self.function,
                    "sphereTests": self.tests, "syncRequests": self.requests,
                    "lastSphereMax": self.last_value})
        for key, c in (("lemma1", self.lemma1), ("corollary1", self.corollary1)):
            out.update({f"{key}Checks": c.checks, f"{key}Violations": c.violations,
                        f"{key}MaxRatio": c.max_ratio})
        return out


EvenFlowHub.peer = EvenFlowSpoke
