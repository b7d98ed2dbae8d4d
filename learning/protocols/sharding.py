"""The parameter server sharded over ``hubParallelism`` hubs, and what every protocol of
issue 6 shares on top of it: weighted model averaging, communication accounting and the
time spokes spend waiting on synchronization.

Sharding (papers/002_9b954bd89ad87406.txt §2.1–2.2, Fig. 2.1: "the PS may be distributed
over several server nodes"; ps-lite's key ranges): with ``m`` hubs the flat parameter
vector of size ``D`` is cut into ``m`` contiguous shards (:func:`shard_bounds`, the first
``D mod m`` shards one entry longer); hub ``j`` owns shard ``j``. A spoke sends shard ``j``
of its vector to hub ``j`` only (one call per hub, so the bytes to hubs are ``D`` floats,
not ``m·D``), gathers the ``m`` answers and reassembles the global vector.

Label sets and layouts. Label sets grow while streaming, which changes ``D`` and moves
every shard boundary, so a vector cannot be sharded before its layout is final:

- ``m = 1`` keeps the growing-layout behaviour of :mod:`learning.protocols.asynchronous`:
  every vector travels with its ``learner.layout()`` and is aligned with
  ``learner.grow(layout)`` / ``learner.project(w, layout)`` on arrival.
- ``m > 1`` requires a **fixed layout**: the Create request must give the learner's
  ``parameters`` that fix it (``n_features``, and ``classes`` for a classifier, e.g.
  ``{"classes": [0, 1], "n_features": 9}``); anything else is refused at Create with
  ``unsupported`` (field ``learner.parameters``). Training records with a label outside
  ``classes`` are rejected (counted in ``rejected``, sent to dead letters) instead of
  growing the model. Every node builds the same layout from the same request, so every
  hub knows its shard from the start.

Weighted aggregation (papers/003_026f5d1641a0ab17.txt §II.B, eq. 2):
``w̃ = Σ γ_i w_i / Σ γ_i`` with ``γ_i`` the records fitted by spoke ``i`` since its last
synchronization (the plain mean when every ``γ_i`` is 0: then every ``w_i`` already is
the last global model).

Aggregation (``trainingConfiguration.aggregation``, :func:`aggregation_of`): how a hub folds
the spokes' work into the global model. papers/002 §2.1 writes every parameter-server
update as the weighted summation ``w̃ ← α·w̃ + β·Σ_i Δ_i`` of the spokes' deltas
``Δ_i = w_i − w̃_0`` since the global model ``w̃_0`` they started from:

- ``average``: ``β = γ_i / Σ γ_j`` — the weighted model average of eq. 2 above. §2.2.1
  shows that with ``k`` spokes this is one learner with a ``k``-times larger mini-batch
  at the same step size: it learns less per record than one learner on the whole stream.
- ``sum``: ``β = 1`` — the global model moves by every spoke's delta, as if the spokes'
  mini-batches had been learned one after the other from ``w̃_0``; for a linear learner
  and one record per spoke this is sequential training up to the terms in which one
  spoke's step would have seen another's (``tests/test_aggregation.py``).
- ``diversity``: ``β = clamp(Σ_i ‖Δ_i‖² / ‖Σ_i Δ_i‖², 1/k, 1)`` over the ``k`` deltas of a
  round (:func:`diversity_scale`): the ratio is the gradient diversity of Yin et al.
  (2018, "Gradient diversity: a key ingredient for scalable distributed learning",
  AISTATS, Definition 1) taken over the spokes' deltas. Identical deltas (every spoke
  corrected the same errors) give ``1/k``, the average; mutually orthogonal ones (each
  corrected its own) give 1, the sum. In between, when each delta is a common part ``c``
  plus a part ``e_i`` of its own, orthogonal to the rest, it is the least-squares
  projection of the one-learner update ``c + Σ_i e_i`` onto the only direction the
  symmetric rules can take, ``Σ_i Δ_i`` (``Σ‖Δ_i‖² = k‖c‖² + Σ‖e_i‖²`` and ``‖ΣΔ_i‖² =
  k²‖c‖² + Σ‖e_i‖²`` give the same ratio). Long rounds are where it pays: the spokes'
  corrections overlap more the longer they learn apart, ``sum`` then overshoots and
  ``average`` undershoots. With ``m > 1`` hubs each hub takes ``β`` over its own shard.
  ``trainingConfiguration.diversityBlocks`` ``class`` (the default) takes one ``β`` per
  class of a multi-class linear model, over its row ``[W_c | b_c]`` (within the hub's
  shard; :func:`class_diversity_scales`; ``model``: one ``β`` per hub). A multi-class
  step moves only the rows of the classes a record involves, so how much the spokes'
  corrections overlap differs from class to class: a class that every spoke confused
  alike is averaged while another, corrected by one spoke, is summed. PA on digits (10
  classes), FDA and EVENFLOW under ``diversity`` at the thresholds of 1/4.6–1/6.4 of
  BSP's bytes, in process with messages every 150 records, seeds 0–2
  (``benchmarks/tune_thresholds.py --seeds 0,1,2 --diversity-blocks class|model``):
  0.0013–0.0028 closer to the centralized learner per class than per model (e.g. FDA
  naive at 0.04: −0.0180 against −0.0208); RandomRBF (5 classes): up to 0.0016 closer;
  LED (10 classes, 7 features): within 0.0006 either way; one β per entry (tried, not
  kept) was no better than one per model (−0.0206 there). A binary model's two rows move
  by opposite steps, so its ``β`` is the model's. A push that arrives alone (TAP, SSP,
  EASGD, Adaptive) has nothing to be diverse from and is added as under ``sum``.
- ``momentum``: block momentum, the blockwise model-update filtering of Chen & Huo
  (ICASSP 2016, "Scalable training of deep learning machines by incremental block training
  with intra-block parallel optimization and blockwise model-update filtering", §2): a
  round's move ``G_t = Σ_i γ_i Δ_i / Σ_i γ_i`` (the ``average`` rule's) is filtered
  through the moves before it, ``D_t = η·D_{t−1} + G_t`` and ``w̃ ← w̃ + D_t``, with
  ``η`` = ``trainingConfiguration.blockMomentum``, by default ``1 − 1/k`` (their
  recommendation for ``k`` workers; :meth:`ShardedHub.momentum_move`). While the spokes
  keep correcting in one direction round after round, ``D_t`` grows towards ``G_t/(1 − η)
  = k·G_t``: the sum of the deltas, one learner's pace; what the spokes corrected alike
  in one round and undo in the next cancels out of ``D``, where ``sum`` would have added
  it ``k`` times. Long rounds are where it pays. PA on RandomRBF, FDA naive at Θ 0.16 (17
  rounds, 1/25.7 of BSP's bytes; in process, messages every 150 records, seeds 0–2,
  ``benchmarks/tune_thresholds.py --aggregation momentum``): 0.0042 behind the
  centralized learner; under ``diversity`` Θ 0.08 already fell 0.0135 behind at 1/9.3; on
  digits with PA FDA naive at 0.04 0.0152 behind at 1/7.4 against 0.0180 at 1/5.3 under
  ``diversity`` (docs/quality.md, "Block momentum"). After every mini-batch it is no
  rule for PA (BSP: 0.0162 behind on digits against 0.0065 summed), and on a drifting
  stream the filtered move lags (Hyperplane, FDA naive at 0.04: 0.0086 behind against
  0.0061 averaged). A round in which no spoke fitted a record moves nothing and keeps
  ``D``; a new layout (:meth:`ShardedHub.on_relayout`) or an Update to another rule drops
  it; a grown one (``m = 1``) carries it over, zero in the new entries. A push that
  arrives alone (TAP, SSP, EASGD, Adaptive) is added as under ``sum``.

Averaging rounds (BSP, FDA, EVENFLOW) start every spoke from the hub's ``w̃``, so a round
with ``sum`` ends at ``w̃ + Σ_i (w_i − w̃)`` (``diversity``: ``w̃ + β Σ_i (w_i − w̃)``).
Asynchronous pushes (TAP, SSP) and elastic exchanges (EASGD, Adaptive) arrive at any time,
so the hub remembers, per spoke, the global shard it last answered that spoke with (what
the spoke installed, to which it added what it learned since) and adds ``w_i − base_i``.
The default depends on the learner (:data:`DEFAULT_AGGREGATION`) and, for a learner that
sums, on the protocol (FDA and EVENFLOW: ``diversity``, :data:`SAFE_ZONE_AGGREGATION`),
chosen by measurement (see the README's learning-quality table); a Query's
``protocol.aggregation`` says which rule runs.

Replay. A spoke that pushes alone (SSP, TAP, EASGD, Adaptive) trains on while its push is
in flight, and the answer brings a global model that the mini-batches fitted meanwhile
never saw. With ``trainingConfiguration.replay`` (the default) the spoke installs that
model and fits those mini-batches again on it, in order (:meth:`ShardedSpoke.land`): it
goes on as if the answer had come at once, and its next delta starts from the model the hub
remembers as its base, so that delta misses only what the hub applied after answering, not
also what it applied while the push travelled. With ``replay: false`` the spoke adds the
move those mini-batches made on the older model, ``w̃ + (w_now − w_pushed)``. The records
were predicted and counted at their first pass; the refit only fits (a Query reports
``replayedRecords`` per spoke and summed), and an answer later than :data:`REPLAY_LIMIT`
records falls back to the move (``replayOverflows``, likewise). It costs a second fit of
every record that passes during a round trip. Not from the source papers: a delay
compensation on the spoke's side, where papers/003 §II.C and Zhang et al.'s η/τ compensate
at the hub (both are applied). On Flink (PA, 4 spokes, three runs each, 2026-11-29) it
brought TAP on RandomRBF from 0.0101–0.0125 to 0.0082–0.0089 behind the centralized learner
(with ``stalenessDamping`` 0.35 instead of 0.5: replay makes the delta fresher, so it needs
less damping; docs/quality.md, "Replay").

Preprocessor statistics are part of the synchronized model. With every push a spoke sends
hub 0 the running statistics its preprocessors gathered since they last synchronized
(records, means, M2, minima, maxima: :meth:`learning.preprocessors.Preprocessor.statistics`
minus the global statistics it installed last); hub 0 merges them exactly into the global
statistics (Chan et al.'s parallel update) and answers with them; the spoke installs them
plus whatever it learned while the push was in flight. After a round, every spoke and the
global model scale features alike, as one scaler that saw every spoke's records would;
the Query's ``model.preProcessors`` holds the global statistics.

A new layout. An Update that fixes a pipeline's layout (a new width, or classes that
leave out learned ones) resets every node's model (:meth:`PipelineSpoke.update`); a
synchronization begun on the old model is then void wherever it is. A spoke drops the
model a hub answers to a push it made before its reset (:meth:`ShardedSpoke.scatter`; its
protocol's :meth:`ShardedSpoke.on_sync_failed` runs, as for a failed call, and the next
synchronization starts on the new model); a hub that resets forgets every vector it kept
of the old model, and the averaging round it had open fails when it closes
(:meth:`AveragingHub.close_round`: every pusher gets the error, so no spoke stays paused
on it); a round that cannot be folded (a push of the old layout reached a hub that reset
first) fails the same way instead of staying open for good, and so does a lone push (SSP,
TAP, EASGD, Adaptive: refused before it changes anything); and every protocol's spoke
forgets the vectors it remembers (its round's base, its last push). An answer a spoke
cannot install is a failed synchronization too. Each is logged and counted in
``syncFailures``; the stream never stops on it.

Accounting. Every spoke of these protocols reports ``rounds`` (synchronizations it took
part in), ``pushes``, ``waitMs`` (milliseconds its stream was paused waiting on a
synchronization), and ``syncMessagesSent`` / ``syncBytesSent``: the middleware's counts
without the one-way ``report`` calls that answer Queries, so that protocols are compared
on what they send to synchronize. Hub 0 adds the totals over spokes to the Query's
``protocol`` section (``syncBytesToHubs``, ``syncBytesToSpokes``, ``rounds``,
``waitMs``).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import numpy as np
import orjson

from learning.errors import RequestError
from learning.protocols.base import PipelineHub, PipelineSpoke
from learning.protocols.parameters import TRAINING_PARAMETERS
from learning.registry import make_preprocessor
from middleware import BroadcastPromise, Promise, remote

__all__ = ["shard_bounds", "weighted_average", "diversity_scale", "class_diversity_scales",
           "fixed_layout",
           "ShardedSpoke", "ShardedHub", "AveragingHub", "REPORT_METHOD", "AGGREGATIONS",
           "DEFAULT_AGGREGATION", "SAFE_ZONE_AGGREGATION", "aggregation_of", "ADDS_DELTAS",
           "REPLAY_LIMIT"]

log = logging.getLogger(__name__)

#: The one-way call that carries a spoke's statistics to hub 0 for a Query; not counted
#: as synchronization traffic.
REPORT_METHOD = "report"
#: Calls that are not synchronization traffic: Query reports and the layout agreement
#: (learning.layout).
SERVICE_METHODS = frozenset((REPORT_METHOD, "vote", "settle", "agreed", "export_shard"))


#: the rules of ``trainingConfiguration.aggregation`` (see the module docstring), as declared
#: in :data:`learning.protocols.parameters.TRAINING_PARAMETERS`
AGGREGATIONS = TRAINING_PARAMETERS["aggregation"].choices

#: the rules under which a hub adds a spoke's delta to the global model (a lone push,
#: TAP, SSP, EASGD, Adaptive, is added as it is under each)
ADDS_DELTAS = frozenset(("sum", "diversity", "momentum"))

#: records a spoke keeps for :meth:`ShardedSpoke.land` to refit at most (a push answered
#: after more than this many: the move they made is added instead; on Flink a TAP push
#: carries 48 records at the median, 96–160 at p95)
REPLAY_LIMIT = 4096

#: learner class name → its default aggregation rule, chosen by measurement (the README's
#: learning-quality table); learners not named here average. In-process kernel, 4 spokes,
#: BSP after every mini-batch of 16, prequential accuracy (centralized learner in brackets):
#: PA on digits average 0.946, sum 0.958 (0.966); on RandomRBF average 0.779, sum 0.800
#: (0.801). SVM (Pegasos) on digits: average 0.897, sum 0.211 (0.944): every spoke's step
#: also shrinks w by (1 − ηλ), and k shrinkages added diverge. PARegressor (C = 1) on
#: Friedman #1: mean absolute error 2.75 averaged, 17.8 summed. The networks (MLP, CNN,
#: MLPRegressor) at their defaults (Adam at 0.005, the CNN at 0.01; 2026-12-06, seeds
#: 0–1): an Adam step has about the same size whatever the gradient's, so the average of k
#: spokes' steps is one step per k mini-batches, the pace of one spoke alone, and
#: averaging lands where independent learners do (MLP on digits 0.891 against 0.865
#: independent, 0.952 centralized; MLPRegressor on Friedman #1 7.22 against 7.22), where
#: the sum takes k steps as one learner would (0.935; 3.72 against 3.37;
#: ``benchmarks/aggregation_rules.py``). At Adam 0.03, a step larger than the centralized
#: learner's best, averaging is the better rule (MLP on digits 0.928 against 0.909 summed,
#: 0.925 centralized): the experiments that run so name it. Ridge sums under every
#: protocol, FDA and EVENFLOW included (``learner.additive``: its deltas are sums over
#: records and adding them is exact; :func:`aggregation_of`).
DEFAULT_AGGREGATION: dict[str, str] = {"PAClassifier": "sum", "MLP": "sum", "CNN": "sum",
                                       "MLPRegressor": "sum"}

#: a default rule → the rule that replaces it under the protocols whose rounds last as long
#: as the spokes stay in their safe zone (FDA, EVENFLOW:
#: :attr:`ShardedSpoke.safe_zone_rounds`): a learner that sums by default folds by
#: ``diversity`` there. A spoke that fitted many mini-batches has corrected what the others
#: corrected too, and adding the k deltas overshoots; ``diversity`` adds them where they
#: differ and averages them where they agree. PA-I (C = 0.01), FDA naive, linear, sketch
#: and EVENFLOW basic, fast at Θ 0.02 and 0.08 on RandomRBF, Waveform, LED, Hyperplane and
#: digits, messages every 500 records as the Flink loop delivers them
#: (``benchmarks/tune_thresholds.py --grid 0.08,0.02 --aggregation sum|diversity|average``,
#: seed 0; 50 runs per rule): ``diversity`` was
#: the best of the three in 31, at most 0.004 behind the best (0.0006 on average), the sum
#: up to 0.082 (RandomRBF, FDA sketch at 0.08; 0.0165 on average), the average up to
#: 0.019 (RandomRBF, EVENFLOW basic at 0.02). The networks at their defaults (threshold
#: 0.05, seeds 0–1; ``benchmarks/aggregation_rules.py``): the MLP on digits 0.900–0.913
#: against 0.889–0.902 averaged, 0.901–0.928 summed; on Waveform 0.820–0.829 against
#: 0.818–0.829 and 0.783–0.819 (independent learners 0.813); the MLPRegressor on Friedman
#: #1 6.34–6.77 against 6.76–7.16 and 3.96–4.52; with long rounds (T = 1, 4–10 of them)
#: summed it diverged (held-out MSE 13–114) where ``diversity`` stayed at the average's
#: 7–9 (docs/quality.md, "The default rules").
SAFE_ZONE_AGGREGATION: dict[str, str] = {"sum": "diversity"}


#: under FDA and EVENFLOW, rounds that last fewer mini-batches of each spoke than this on
#: average (after :data:`SHORT_ROUNDS_AFTER` rounds) draw a warning in the Query's
#: ``protocol``: the threshold is too small for the model (thresholds are in the model's
#: units), and the protocol synchronizes as often as BSP or more while paying for its
#: monitoring too (PARegressor on Friedman #1 at threshold 0.05, 4 spokes: a round every
#: 0.26 mini-batches of each spoke, F at the polls 3.1)
SHORT_ROUNDS = 2.0
SHORT_ROUNDS_AFTER = 10


def short_rounds_warning(rounds: int, per_round: float | None, threshold: float,
                         observed: str = "") -> list[str]:
    """The Query's ``protocol.warnings`` of a safe-zone protocol (FDA, EVENFLOW): one
    message when its ``rounds`` (at least :data:`SHORT_ROUNDS_AFTER`) last fewer than
    :data:`SHORT_ROUNDS` mini-batches of each spoke on average (``per_round``), naming the
    ``threshold`` and, in ``observed``, what the protocol saw of the model's drift; else
    none."""
    if per_round is None or rounds < SHORT_ROUNDS_AFTER or per_round >= SHORT_ROUNDS:
        return []
    return [f"rounds end after {per_round:.2f} mini-batches of each spoke on average "
            f"({rounds} rounds; BSP's after 1): threshold {threshold:g} is small against how "
            f"far a mini-batch moves this model{observed}, so the pipeline synchronizes as "
            f"often as BSP or more and pays for the monitoring too; raise "
            f"trainingConfiguration.threshold with an Update (it is in the model's units)"]


def aggregation_of(cfg: dict, learner: Any, safe_zone_rounds: bool = False) -> str:
    """``trainingConfiguration.aggregation``, or the learner's default: ``sum`` for a
    learner whose deltas are sums over records (``learner.additive``: ridge) under every
    protocol, else :data:`DEFAULT_AGGREGATION`'s, else ``average``; under a protocol whose
    rounds end when a spoke leaves its safe zone (``safe_zone_rounds``: FDA, EVENFLOW)
    replaced as :data:`SAFE_ZONE_AGGREGATION` says (``sum`` → ``diversity``).

    Raises
    ------
    learning.errors.RequestError
        ``schema`` (field ``trainingConfiguration.aggregation``) when not one of
        :data:`AGGREGATIONS`.
    """
    rule = cfg.get("aggregation")
    if rule is None and learner.additive:
        return "sum"  # exact: the deltas are sums over records
    if rule is None:
        rule = DEFAULT_AGGREGATION.get(type(learner).__name__, "average")
        return SAFE_ZONE_AGGREGATION.get(rule, rule) if safe_zone_rounds else rule
    return TRAINING_PARAMETERS["aggregation"].validate(rule)


def diversity_scale(deltas: list[np.ndarray], total: np.ndarray | None = None) -> float:
    """``β`` of the ``diversity`` rule (module docstring): ``Σ_i ‖Δ_i‖² / ‖Σ_i Δ_i‖²``
    clamped to ``[1/k, 1]``, for ``k`` deltas of the same shape (float64 arrays);
    ``total`` is their sum when the caller has it already.

    Returns 1.0 for one delta or when the deltas sum to zero (nothing to scale), and
    ``1/k`` when every delta is the same.

    Raises
    ------
    ValueError
        No deltas, or deltas of different shapes.

    References
    ----------
    Yin, D., Pananjady, A., Lam, M., Papailiopoulos, D., Ramchandran, K., Bartlett, P.
    (2018) Gradient diversity: a key ingredient for scalable distributed learning.
    AISTATS, PMLR 84:1998–2007 (Definition 1).
    """
    k = len(deltas)
    if k == 0:
        raise ValueError("diversity_scale needs at least one delta")
    if k == 1:
        return 1.0
    if total is None:
        total = np.sum(deltas, axis=0)
    together = float(total @ total)
    if not together > 0.0:
        return 1.0
    apart = sum(float(d @ d) for d in deltas)
    return min(1.0, max(1.0 / k, apart / together))


def class_diversity_scales(deltas: list[np.ndarray], total: np.ndarray, width: int,
                           offset: int = 0) -> tuple[np.ndarray, float]:
    """``β`` of the ``diversity`` rule per class block (module docstring): entry ``i`` of
    the deltas is entry ``offset + i`` of the model's vector, which is one block of
    ``width`` entries per class (a hub's shard starts at ``offset``); each block gets
    :func:`diversity_scale` of the deltas' parts in it.

    Parameters
    ----------
    deltas : list of (n,) float64 arrays
        The ``k`` spokes' deltas of one round.
    total : (n,) float64 array
        Their sum.
    width : int
        Entries per block (``n_features + 1`` for a linear model's row ``[W_c | b_c]``).
    offset : int
        The model-vector index of the first entry.

    Returns
    -------
    tuple of ((n,) float64 array, float)
        Every entry's scale, in ``[1/k, 1]`` (1.0 in a block whose deltas sum to zero), and
        the mean scale over the blocks that moved (1.0 when none did).

    Raises
    ------
    ValueError
        No deltas, or ``width`` below 1.
    """
    k = len(deltas)
    if k == 0:
        raise ValueError("class_diversity_scales needs at least one delta")
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    block = (offset + np.arange(total.size)) // width
    block -= block[0] if block.size else 0
    apart = np.bincount(block, weights=np.square(np.asarray(deltas)).sum(axis=0))
    together = np.bincount(block, weights=np.square(total))
    beta = np.ones_like(together)
    moved = together > 0.0
    if k > 1:
        beta[moved] = np.clip(apart[moved] / together[moved], 1.0 / k, 1.0)
    return beta[block], float(beta[moved].mean()) if moved.any() else 1.0


def shard_bounds(size: int, m: int) -> list[tuple[int, int]]:
    """Contiguous shards ``[(lo, hi), ...]`` of a vector of ``size`` entries over ``m``
    hubs, as equal as possible (the first ``size % m`` shards have one entry more).

    >>> shard_bounds(10, 3)
    [(0, 4), (4, 7), (7, 10)]
    >>> shard_bounds(2, 3)
    [(0, 1), (1, 2), (2, 2)]

    Raises
    ------
    ValueError
        If ``m < 1`` or ``size < 0``.
    """
    if m < 1 or size < 0:
        raise ValueError(f"need m >= 1 and size >= 0, got m={m}, size={size}")
    q, r = divmod(size, m)
    out, lo = [], 0
    for j in range(m):
        hi = lo + q + (1 if j < r else 0)
        out.append((lo, hi))
        lo = hi
    return out


def weighted_average(vectors: list[np.ndarray], weights: list[float]) -> np.ndarray:
    """``Σ γ_i w_i / Σ γ_i`` (papers/003 eq. 2); the plain mean when ``Σ γ_i = 0``.

    Parameters
    ----------
    vectors : list of (n,) float64
    weights : list of float >= 0, one per vector

    Raises
    ------
    ValueError
        If there is no vector, or a weight is negative.
    """
    if not vectors:
        raise ValueError("nothing to average")
    g = np.asarray(weights, dtype=np.float64)
    if np.any(g < 0):
        raise ValueError(f"weights must be >= 0, got {weights}")
    total = float(g.sum())
    if total <= 0.0:
        return np.mean(np.stack(vectors), axis=0)
    acc = np.zeros_like(vectors[0], dtype=np.float64)
    for v, w in zip(vectors, g):
        if w > 0.0:
            acc += w * v
    return acc / total


def fixed_layout(learner, m: int) -> dict:
    """The learner's layout when it cannot grow any more; what ``m > 1`` hubs need.

    Raises
    ------
    learning.errors.RequestError
        ``unsupported`` (field ``learner.parameters``) when the layout may still grow:
        ``n_features`` unknown, or a classifier without at least two ``classes``;
        ``unsupported`` (field ``trainingConfiguration.hubParallelism``) for a learner
        whose units are matched before they are merged (``matches_units``: k-means), which
        needs the whole vector at one hub.
    """
    if learner.matches_units:
        raise RequestError(
            "unsupported", f"{type(learner).__name__}'s units (clusters) are matched whole "
            f"at one hub before they are merged, and hubParallelism {m} would merge them by "
            f"index (k-means on Waveform, 4 spokes: 14.09 against 12.58 with one hub and "
            f"12.95 for independent learners): use hubParallelism 1",
            "trainingConfiguration.hubParallelism")
    layout = learner.layout()
    missing = []
    if "n_features" in layout and layout["n_features"] is None:
        missing.append("n_features")
    if hasattr(learner, "classes") and len(learner.classes) < 2:
        missing.append("classes (at least two)")
    if missing or learner.get_params().size == 0:
        raise RequestError(
            "unsupported", f"hubParallelism {m} shards the parameter vector, whose layout must "
            f"be fixed at Create: give learner.parameters {' and '.join(missing) or 'that fix it'}"
            f" (e.g. {{\"classes\": [0, 1], \"n_features\": 9}}); labels outside 'classes' are "
            f"then rejected", "learner.parameters")
    return layout


def sync_traffic(stats) -> tuple[int, int]:
    """``(messages, bytes)`` a node sent (its :class:`middleware.node.NodeStats`), Query
    reports and layout agreement (:data:`SERVICE_METHODS`) excluded."""
    return (sum(n for k, n in stats.sent_by_method.items() if k not in SERVICE_METHODS),
            sum(n for k, n in stats.sent_bytes_by_method.items() if k not in SERVICE_METHODS))


class ShardedSpoke(PipelineSpoke):
    """A spoke of a sharded parameter server: scatter shards, gather answers, reassemble.

    Subclasses call :meth:`scatter` (one call per hub, shard ``j`` to hub ``j``) and
    :meth:`assemble` (answers → the global vector in this learner's current layout), and
    may use :meth:`sync_models` for a BSP-style averaging round against an
    :class:`AveragingHub`.

    Attributes
    ----------
    records_since_sync : int
        ``γ_i``: records fitted since this spoke's last synchronization.
    rounds, pushes : int
        Synchronizations completed; vectors sent (one push reaches every hub).
    wait_ms : float
        Milliseconds this spoke's stream was paused on synchronizations.
    """

    #: whether a round lasts as long as the spokes stay in their safe zone (FDA, EVENFLOW),
    #: rather than a fixed number of mini-batches: it picks the default aggregation rule
    #: (:func:`aggregation_of`)
    safe_zone_rounds = False

    def __init__(self, request) -> None:
        super().__init__(request)
        self.hub_parallelism = int(request.training_configuration.get("hubParallelism", 1))
        self._fixed: dict | None = None
        learner = self.pipeline.learner
        if self.hub_parallelism > 1:  # labels outside it are refused by self.layout
            self._fixed = fixed_layout(learner, self.hub_parallelism)
        self.records_since_sync = 0
        self.rounds = 0
        self.pushes = 0
        self.wait_ms = 0.0
        self.sync_failures = 0
        self._waits = 0
        self._wait_started = 0.0
        self.aggregation = aggregation_of(request.training_configuration, learner,
                                          self.safe_zone_rounds)
        # the model every node starts from: zeros, or a warm start's learner.parameters
        self._start = (learner.get_params(), learner.layout())
        # the preprocessors' global statistics installed last, and those sent with the
        # push in flight (None for a preprocessor without statistics)
        self._prep_base = [p.statistics() for p in self.pipeline.preprocessors]
        self._prep_pushed: list | None = None

    def attach(self, ctx) -> None:
        """As :meth:`Node.attach`; the network must have ``hubParallelism`` hubs.

        Raises
        ------
        ValueError
            When it has another number of hubs.
        """
        if ctx.n_hubs != self.hub_parallelism:
            raise ValueError(f"pipeline {ctx.network} has hubParallelism {self.hub_parallelism} "
                             f"but its network has {ctx.n_hubs} hubs")
        super().attach(ctx)

    def on_update(self) -> None:
        self.aggregation = aggregation_of(self.request.training_configuration,
                                          self.pipeline.learner, self.safe_zone_rounds)
        # how long rounds last is counted again from here: a new threshold changes it
        self._round_marks = (self.batches, self.rounds)

    #: mini-batches fitted and rounds taken in at the last Update (a Query's
    #: ``miniBatchesPerRound`` counts from there; a class default for older snapshots)
    _round_marks = (0, 0)

    #: resets for a new layout so far (:meth:`on_relayout`): a call made before the last
    #: one is answered for a model that is gone; a class default for older snapshots
    relayouts = 0

    def on_relayout(self) -> None:
        """The model was reset for a new layout: forget the statistics and the fixed
        layout of the old one, and the mini-batches kept for replay; the answers to calls
        made before are dropped when they come (module docstring, "A new layout").
        Protocols that remember vectors of the old model forget them too (they extend
        this)."""
        self.relayouts += 1
        self.ground()
        if self.hub_parallelism > 1:
            self._fixed = fixed_layout(self.pipeline.learner, self.hub_parallelism)
        self._start = (self.pipeline.learner.get_params(), self.pipeline.learner.layout())
        self._prep_base = [p.statistics() for p in self.pipeline.preprocessors]
        self._prep_pushed = None

    # -- export (a Query's ``export``) -------------------------------------------------------
    def check_export(self) -> None:
        """Every protocol on a sharded parameter server has a global model to export."""

    def gather_export(self, done: Callable[[dict], None]) -> None:
        """Spoke 0 of ``m > 1`` hubs: ask hubs ``1 .. m-1`` for their shards (hub 0 has its
        own) and call ``done({"shards": [...], "layouts": [...]})`` once all answered, or
        ``done({"error": message})`` when one failed. Nothing to gather with one hub."""
        m = self.ctx.n_hubs
        if m == 1:
            done({})
            return
        answers: list[Any] = [None] * (m - 1)
        state = {"left": m - 1, "error": None}

        def settle() -> None:
            state["left"] -= 1
            if state["left"] == 0:
                done({"error": state["error"]} if state["error"] else
                     {"shards": [a[0] for a in answers], "layouts": [a[1] for a in answers]})

        def ok(j: int):
            def cb(value: Any) -> None:
                answers[j - 1] = value
                settle()
            return cb

        def failed(error) -> None:
            state["error"] = state["error"] or str(error)
            settle()

        for j in range(1, m):
            call = self.peers[j].export_shard()
            call.on_error(failed)
            call.then(ok(j))

    # -- preprocessor statistics -----------------------------------------------------------
    def preprocessor_delta(self) -> list | None:
        """What this spoke's preprocessors learned since they last synchronized: per
        preprocessor, its statistics minus the global ones it installed last (None for one
        without statistics); None when no preprocessor has statistics. Remembers what it
        sends, for :meth:`install_preprocessors`."""
        preps = self.pipeline.preprocessors
        if all(base is None for base in self._prep_base):
            return None
        now = [p.statistics() for p in preps]
        self._prep_pushed = now
        return [None if s is None else type(p).subtract_statistics(s, base)
                for p, s, base in zip(preps, now, self._prep_base)]

    def install_preprocessors(self, state: list | None) -> None:
        """Install the global statistics hub 0 answered with, plus what was learned while
        the push was in flight (merged exactly); a None ``state`` changes nothing.
        Statistics that do not fit this spoke's (another width) leave its own in place,
        logged and counted in ``sync_failures``."""
        if state is None:
            return
        pushed = self._prep_pushed or self._prep_base
        self._prep_pushed = None
        for i, (p, g) in enumerate(zip(self.pipeline.preprocessors, state)):
            if g is None:
                continue
            cls = type(p)
            try:
                meanwhile = cls.subtract_statistics(p.statistics(), pushed[i])
                p.load_statistics(cls.merge_statistics(g, meanwhile))
            except (ValueError, TypeError, KeyError) as exc:
                self.sync_failures += 1
                log.warning("%s: global preprocessor statistics not installed: %s", self.name, exc)
                continue
            self._prep_base[i] = g

    # -- stream --------------------------------------------------------------------------
    def on_batch_fitted(self, n_records: int) -> None:
        self.records_since_sync += n_records
        self.after_batch(n_records)

    def after_batch(self, n_records: int) -> None:
        """Protocol hook: a mini-batch was fitted and counted in ``records_since_sync``."""

    # -- replay: the mini-batches fitted while a push was in flight --------------------------
    #: ``trainingConfiguration.replay`` as the protocol read it (the ones whose spokes push
    #: alone and train on meanwhile: SSP, TAP, EASGD, Adaptive); off for the others. Class
    #: defaults, also for snapshots taken before replay existed
    replay = False
    #: records refit by :meth:`land`, and flights that passed :data:`REPLAY_LIMIT`
    replayed = 0
    replay_overflows = 0
    # the mini-batches fitted since the push in flight was sent (None: none kept, because
    # replay is off, nothing is in flight or the flight passed REPLAY_LIMIT), their records
    _flight: list | None = None
    _flight_records = 0

    def take_off(self) -> None:
        """A push (or exchange) is being sent: with replay on, the mini-batches fitted from
        now until its answer are kept for :meth:`land`."""
        self._flight = [] if self.replay else None
        self._flight_records = 0

    def ground(self) -> None:
        """No answer will come (a failed synchronization, a new layout): keep nothing."""
        self._flight = None

    def _test_then_train(self, batch) -> None:
        flight = self._flight  # before: the mini-batch that sends a push is not its flight's
        super()._test_then_train(batch)
        self._keep(flight, batch)

    def _refit(self, batch) -> None:
        flight = self._flight
        super()._refit(batch)
        self._keep(flight, batch)

    def _keep(self, flight: list | None, batch) -> None:
        if flight is None or flight is not self._flight or batch.failed:
            return
        self._flight_records += len(batch.X)
        if self._flight_records > REPLAY_LIMIT:  # a very late answer: add the move instead
            self._flight = None
            self.replay_overflows += 1
        else:
            flight.append(batch)

    def land(self, target: Callable[[], np.ndarray], moved: Callable[[], np.ndarray]) -> None:
        """Install the model an answer brings, then what was learned while the push was in
        flight; ``target()`` and ``moved()`` give arrays ``(n_params,)`` float64 in this
        learner's current layout, and only the one needed is computed.

        With replay (module docstring, "Replay") the learner is set to ``target()``, the
        model the spoke would have had had the answer come at once, and the mini-batches
        fitted since the push are fitted again on it, in order, with the preprocessors'
        statistics as installed (they learned those records already). Otherwise (replay
        off, or more than :data:`REPLAY_LIMIT` records in flight) it is set to ``moved()``:
        the target plus the move those mini-batches made on the model they were fitted on.
        A mini-batch the learner refuses now is skipped, counted in ``fit_errors``.
        """
        flight, self._flight = self._flight, None
        learner = self.pipeline.learner
        if flight is None:
            learner.set_params(moved())
            return
        learner.set_params(target())
        for batch in flight:
            if self.fit_again(batch):
                self.replayed += len(batch.X)

    # -- the vector ----------------------------------------------------------------------
    def vector(self) -> tuple[np.ndarray, dict]:
        """This spoke's model and its layout; with ``m > 1`` checked against the fixed one.

        Raises
        ------
        RuntimeError
            When a fixed layout changed (a broken invariant: labels are filtered).
        """
        learner = self.pipeline.learner
        w, layout = learner.get_params(), learner.layout()
        if self._fixed is not None and layout != self._fixed:
            raise RuntimeError(f"the layout fixed at Create changed: {self._fixed} -> {layout}")
        return w, layout

    def in_current(self, vec_layout: tuple[np.ndarray, dict] | None) -> np.ndarray:
        """A remembered ``(vector, layout)`` in this learner's current layout (None: the
        model the pipeline started from, zeros but after a warm start)."""
        learner = self.pipeline.learner
        if vec_layout is None:  # nothing remembered yet: the model every node started from
            vec_layout = self._start
        vec, layout = vec_layout
        if self._fixed is not None:
            return np.asarray(vec, dtype=np.float64)
        return learner.project(vec, layout)

    def scatter(self, method: str, w: np.ndarray, layout: dict, *args: Any, sync: bool,
                on_all: Callable[[list], None], prep: list | None = None,
                **keywords: Any) -> None:
        """Call ``method(shard_j, layout, *args, prep_j, **keywords)`` on every hub ``j``
        and run ``on_all(answers)`` (ordered by hub) once all ``m`` answered; ``prep`` (the
        preprocessors' statistics, :meth:`preprocessor_delta`) goes to hub 0 only, the
        other hubs get None.

        With ``sync`` the stream is paused (``then_sync``) until the last answer has been
        handled, and the pause is added to ``wait_ms``. A remote failure is logged,
        counted in ``sync_failures`` and ``on_all`` is not run (the protocol's
        :meth:`on_sync_failed` is).
        """
        m = self.ctx.n_hubs
        bounds = shard_bounds(w.size, m) if m > 1 else [(0, w.size)]
        answers: list[Any] = [None] * m
        state = {"got": 0, "failed": []}
        if sync:
            self._waits += 1
            if self._waits == 1:
                self._wait_started = time.monotonic()
        epoch = self.relayouts

        def done() -> None:
            if sync:
                self._waits -= 1
                if self._waits == 0:
                    self.wait_ms += (time.monotonic() - self._wait_started) * 1000.0
            if state["failed"]:
                self.sync_failures += 1
                log.error("%s: %s failed on %d hub(s): %s", self.name, method,
                          len(state["failed"]), state["failed"][0])
                self.on_sync_failed(method, state["failed"])
            else:
                self._settle(method, epoch, on_all, answers)

        def ok(j: int):
            def cb(value: Any) -> None:
                answers[j] = value
                state["got"] += 1
                if state["got"] == m:
                    done()
            return cb

        def failed(error) -> None:
            state["failed"].append(error)
            state["got"] += 1
            if state["got"] == m:
                done()

        for j, (lo, hi) in enumerate(bounds):
            call = getattr(self.peers[j], method)(w[lo:hi].copy(), layout, *args,
                                                  prep if j == 0 else None, **keywords)
            call.on_error(failed)
            if sync:
                call.then_sync(ok(j))
            else:
                call.then(ok(j))

    def _settle(self, method: str, epoch: int, handle: Callable[[Any], None],
                value: Any) -> None:
        """Hand a call's answer to ``handle``, unless the model it was made for was reset
        since (``epoch``: :attr:`relayouts` when it was made) or ``handle`` cannot install
        it: then it is a failed synchronization, logged, counted in ``sync_failures`` and
        handed to :meth:`on_sync_failed` (module docstring, "A new layout")."""
        if epoch != self.relayouts:
            self.sync_failures += 1
            log.warning("%s: the answer to %s, made before the layout changed, is dropped",
                        self.name, method)
            self.on_sync_failed(method, ["the layout changed"])
            return
        try:
            handle(value)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            self.sync_failures += 1
            log.error("%s: the answer to %s could not be installed: %s: %s", self.name,
                      method, type(exc).__name__, exc, exc_info=True)
            self.on_sync_failed(method, [exc])

    def on_sync_failed(self, method: str, errors: list) -> None:
        """Protocol hook: a scatter's call failed on some hub, or its answer was dropped
        or could not be installed (already logged)."""

    def wait_on(self, call, callback: Callable[[Any], None]) -> None:
        """``call.then_sync(callback)`` with the pause added to ``wait_ms``; a remote
        failure, and an answer ``callback`` cannot install, are logged, counted and handed
        to :meth:`on_sync_failed`. (Its answers carry no model: one to a call made before
        the layout changed is still taken, e.g. FDA's decision to synchronize, so that
        this spoke joins the round the others wait in.)"""
        self._waits += 1
        if self._waits == 1:
            self._wait_started = time.monotonic()

        def finish() -> None:
            self._waits -= 1
            if self._waits == 0:
                self.wait_ms += (time.monotonic() - self._wait_started) * 1000.0

        def ok(value: Any) -> None:
            finish()
            self._settle(call.method, self.relayouts, callback, value)

        def failed(error) -> None:
            finish()
            self.sync_failures += 1
            log.error("%s: %s failed: %s", self.name, call.method, error)
            self.on_sync_failed(call.method, [error])

        call.on_error(failed)
        call.then_sync(ok)

    def assemble(self, vectors: list[np.ndarray], layouts: list[dict]) -> np.ndarray:
        """The hubs' shards (ordered by hub) as one vector in this learner's current layout.

        Raises
        ------
        ValueError
            When the shards do not add up to the fixed layout (``m > 1``).
        """
        learner = self.pipeline.learner
        if self._fixed is None:
            learner.grow(layouts[0])
            return learner.project(np.asarray(vectors[0], dtype=np.float64), layouts[0])
        w = np.concatenate([np.asarray(v, dtype=np.float64) for v in vectors])
        if w.size != learner.get_params().size or any(lay != self._fixed for lay in layouts):
            raise ValueError(f"hubs sent {w.size} parameters in layouts {layouts}; the fixed "
                             f"layout is {self._fixed}")
        return w

    # -- a BSP-style averaging round (papers/002 §2.2.1, papers/003 §II.B) ---------------
    def sync_models(self, on_done: Callable[[np.ndarray], None], **keywords: Any) -> None:
        """Push this spoke's model to every hub's averaging round, paused until the
        weighted average (eq. 2) came back; then install it and call ``on_done(w)``.
        ``keywords`` go to every hub's ``push``."""
        w, layout = self.vector()
        records, self.records_since_sync = self.records_since_sync, 0
        self.pushes += 1
        prep = self.preprocessor_delta()

        def install(answers: list) -> None:
            w_global = self.assemble([a[0] for a in answers], [a[1] for a in answers])
            self.pipeline.learner.set_params(w_global)
            self.install_preprocessors(answers[0][-1])
            self.rounds += 1
            on_done(w_global)

        self.scatter("push", w, layout, records, self.ctx.index, sync=True, on_all=install,
                     prep=prep, **keywords)

    # -- statistics ----------------------------------------------------------------------
    def protocol_statistics(self) -> dict:
        """Protocol extras of this spoke (subclasses add to it)."""
        messages, nbytes = sync_traffic(self.stats)
        batches, rounds = self._round_marks
        return {"rounds": self.rounds, "pushes": self.pushes, "waitMs": self.wait_ms,
                "sinceUpdate": [self.batches - batches, self.rounds - rounds],
                "syncMessagesSent": messages, "syncBytesSent": nbytes,
                "syncFailures": self.sync_failures, "aggregation": self.aggregation,
                **({"replayedRecords": self.replayed, "replayOverflows": self.replay_overflows}
                   if self.replay else {})}

    def statistics(self) -> dict:
        out = super().statistics()
        out["protocol"] = self.protocol_statistics()
        return out


class ShardedHub(PipelineHub):
    """One shard of the parameter server: hub ``j`` owns entries ``[lo, hi)`` of the
    global vector (:func:`shard_bounds`).

    ``self.learner`` stays a whole-model parameter container (what the kernel snapshots),
    of which this hub maintains only its shard; with ``m = 1`` the shard is the whole,
    possibly growing, vector.

    Attributes
    ----------
    diversity_rounds : int
        Rounds folded under ``diversity`` (with more than one push, and deltas that do not
        sum to zero).
    diversity_total : float
        The sum of their ``β`` (:func:`diversity_scale`; per class, the mean over the
        blocks that moved); the Query's ``diversityScale`` is the mean. Class defaults,
        so that hubs restored from before the rule have them.
    block_step : tuple[numpy.ndarray, dict] or None
        Under ``momentum``: ``D_t``, the last round's move of this shard ((shard size,)
        float64) and the layout it is in; None before the first round that moved
        (:meth:`momentum_move`).
    momentum_rounds : int
        Rounds folded under ``momentum`` that moved the model.
    """

    #: as :attr:`ShardedSpoke.safe_zone_rounds`
    safe_zone_rounds = False
    diversity_rounds = 0
    diversity_total = 0.0
    diversity_blocks = TRAINING_PARAMETERS["diversityBlocks"].default
    block_step: tuple[np.ndarray, dict] | None = None
    momentum_rounds = 0

    def __init__(self, request) -> None:
        super().__init__(request)
        self.hub_parallelism = int(request.training_configuration.get("hubParallelism", 1))
        if self.hub_parallelism > 1:
            fixed_layout(self.learner, self.hub_parallelism)
        self.rounds = 0
        self.aggregation = aggregation_of(request.training_configuration, self.learner,
                                          self.safe_zone_rounds)
        self.diversity_blocks = TRAINING_PARAMETERS["diversityBlocks"].of(
            request.training_configuration)
        # hub 0: the preprocessors' global statistics (merged from every spoke's deltas)
        self.preprocessors = [make_preprocessor(p, i) for i, p in enumerate(request.pre_processors)]
        # asynchronous sum rule: per spoke, the shard (and layout) it was last answered with
        self._bases: dict[int, tuple[np.ndarray, dict]] = {}
        # the model every node starts from: zeros, or a warm start's learner.parameters
        self._start = (self.learner.get_params(), self.learner.layout())
        self.preprocessor_merge_errors = 0

    def update(self, request) -> None:
        super().update(request)
        self.aggregation = aggregation_of(self.request.training_configuration, self.learner,
                                          self.safe_zone_rounds)
        if self.aggregation != "momentum":
            self.block_step = None
        self.diversity_blocks = TRAINING_PARAMETERS["diversityBlocks"].of(
            self.request.training_configuration)

    def on_relayout(self) -> None:
        """The model was reset for a new layout: so are the preprocessors' global
        statistics and the spokes' bases."""
        self.preprocessors = [make_preprocessor(p, i)
                              for i, p in enumerate(self.request.pre_processors)]
        self._bases.clear()
        self._start = (self.learner.get_params(), self.learner.layout())
        self.block_step = None

    # -- aggregation -----------------------------------------------------------------------
    def sum_of_deltas(self, vectors: list[np.ndarray], bases: list[np.ndarray]) -> np.ndarray:
        """``w̃ + β Σ_i (w_i − base_i)``: this hub's shard moved by every spoke's delta
        (all arrays ``(shard size,)`` float64 in the current layout); ``β`` is 1 under
        ``sum`` and, under ``diversity``, :func:`class_diversity_scales` per class block
        (``diversityBlocks`` ``class``, a learner with
        :meth:`~learning.learners.base.Learner.class_block_width`) or
        :func:`diversity_scale` of the deltas, whose rounds :attr:`diversity_rounds` and
        :attr:`diversity_total` count."""
        w = self.shard().copy()
        if self.aggregation == "diversity" and len(vectors) > 1:
            deltas = [v - b for v, b in zip(vectors, bases)]
            total = np.sum(deltas, axis=0)
            if total.any():
                width = (self.learner.class_block_width()
                         if self.diversity_blocks == "class" else None)
                if width:
                    scales, beta = class_diversity_scales(deltas, total, width,
                                                          self.bounds()[0])
                    self.diversity_rounds += 1
                    self.diversity_total += beta
                    return w + scales * total
                beta = diversity_scale(deltas, total)
                self.diversity_rounds += 1
                self.diversity_total += beta
                return w + beta * total
        for v, b in zip(vectors, bases):
            w += v - b
        return w

    def block_momentum(self) -> float:
        """``η`` of ``momentum``: ``trainingConfiguration.blockMomentum``, else ``1 − 1/k``
        with ``k`` the pipeline's spokes (Chen & Huo 2016)."""
        eta = TRAINING_PARAMETERS["blockMomentum"].of(self.request.training_configuration)
        return 1.0 - 1.0 / max(1, self.n_peers) if eta is None else eta

    def momentum_move(self, vectors: list[np.ndarray], bases: list[np.ndarray],
                      weights: list[float]) -> np.ndarray:
        """``w̃ + D_t`` with ``D_t = η·D_{t−1} + Σ_i γ_i (w_i − base_i) / Σ_i γ_i`` (module
        docstring, ``momentum``; Chen & Huo, ICASSP 2016, §2): arrays ``(shard size,)``
        float64 in the current layout, ``weights`` the records ``γ_i`` each spoke fitted in
        the round. With ``Σ γ_i = 0`` nothing moves and ``D`` is kept. ``D_{t−1}`` of an
        older layout is carried into the current one (:meth:`align`), zero in new entries.
        """
        w = self.shard().copy()
        if sum(weights) <= 0:
            return w
        move = weighted_average([v - b for v, b in zip(vectors, bases)], weights)
        if self.block_step is not None:
            move += self.block_momentum() * self.align([self.block_step])[0]
        self.block_step = (move, self.learner.layout())
        self.momentum_rounds += 1
        return w + move

    def base_of(self, spoke: int) -> np.ndarray:
        """The shard spoke ``spoke`` was last answered with, in the current layout; before
        its first answer the shard every node started from (zeros: the neural learners'
        displacement from the seeded initialization included; a warm start's
        ``learner.parameters``)."""
        got = self._bases.get(spoke)
        if got is None:
            w0, layout0 = self._start
            if self.sharded:
                lo, hi = self.bounds()
                return np.array(w0[lo:hi], dtype=np.float64)
            got = (w0, layout0)
        return self.align([got])[0]

    def remember_base(self, spoke: int, v: np.ndarray) -> None:
        """Spoke ``spoke`` is answered with shard ``v``: the base of its next delta."""
        self._bases[spoke] = (np.array(v, dtype=np.float64), self.learner.layout())

    # -- preprocessor statistics -------------------------------------------------------------
    def merge_preprocessors(self, deltas: list | None) -> None:
        """Merge one spoke's preprocessor statistics since its last synchronization into
        the global ones (hub 0; None, from another hub's share, changes nothing).

        Statistics that do not fit (another width, another number of preprocessors: spokes
        that took different record widths) are left out, logged and counted in
        ``preprocessor_merge_errors``, never raised: a round must end whatever a spoke sent.
        """
        if deltas is None:
            return
        try:
            if len(deltas) != len(self.preprocessors):
                raise ValueError(f"got statistics of {len(deltas)} preprocessors, the pipeline "
                                 f"has {len(self.preprocessors)}")
            merged = [None if d is None else type(p).merge_statistics(p.statistics(), d)
                      for p, d in zip(self.preprocessors, deltas)]
        except (ValueError, TypeError, KeyError) as exc:
            self.preprocessor_merge_errors += 1
            log.warning("%s: preprocessor statistics left out: %s", self.name, exc)
            return
        for p, m in zip(self.preprocessors, merged):
            if m is not None:
                p.load_statistics(m)

    def preprocessor_state(self) -> list | None:
        """The global preprocessor statistics answered to spokes (hub 0), else None."""
        if self.ctx.index != 0:
            return None
        state = [p.statistics() for p in self.preprocessors]
        return None if all(s is None for s in state) else state

    def attach(self, ctx) -> None:
        """As :meth:`Node.attach`; the network must have ``hubParallelism`` hubs."""
        if ctx.n_hubs != self.hub_parallelism:
            raise ValueError(f"pipeline {ctx.network} has hubParallelism {self.hub_parallelism} "
                             f"but its network has {ctx.n_hubs} hubs")
        super().attach(ctx)

    @property
    def sharded(self) -> bool:
        return self.ctx.n_hubs > 1

    def bounds(self) -> tuple[int, int]:
        """``(lo, hi)``: the entries of the global vector this hub owns."""
        size = self.learner.get_params().size
        if not self.sharded:
            return 0, size
        return shard_bounds(size, self.ctx.n_hubs)[self.ctx.index]

    def shard(self) -> np.ndarray:
        lo, hi = self.bounds()
        return self.learner.get_params()[lo:hi]

    def set_shard(self, v: np.ndarray) -> None:
        lo, hi = self.bounds()
        w = self.learner.get_params()
        w[lo:hi] = v
        self.learner.set_params(w)

    def align(self, items: list[tuple[Any, dict]]) -> list[np.ndarray]:
        """Incoming ``(shard, layout)`` pairs as shards of this hub's current layout
        (``m = 1``: grown to the union of the layouts, then projected).

        Raises
        ------
        ValueError
            A shard of the wrong size or layout (``m > 1``); of another width, or with
            classes outside those the pipeline declares (``m = 1``: a model from before an
            Update that changed the layout).
        """
        if not self.sharded:
            for _, layout in items:
                # a model from before an Update that changed the layout (classes left out
                # would grow back into the global model)
                misfit = self.layout.misfit(layout, self.model_width(self.layout))
                if misfit:
                    raise ValueError(f"a shard of {misfit}")
                self.learner.grow(layout)
            return [self.learner.project(np.asarray(v, dtype=np.float64), lay) for v, lay in items]
        lo, hi = self.bounds()
        mine = self.learner.layout()
        out = []
        for v, layout in items:
            v = np.asarray(v, dtype=np.float64)
            if v.size != hi - lo or layout != mine:
                raise ValueError(f"hub {self.ctx.index} owns {hi - lo} parameters of layout "
                                 f"{mine}; got {v.size} of layout {layout}")
            out.append(v)
        return out

    def matched(self, vectors: list[np.ndarray]) -> list[np.ndarray]:
        """Aligned spokes' vectors (:meth:`align`) with their units reordered to the global
        model's (:meth:`learning.learners.base.Learner.match`: k-means' clusters), on a
        hub that holds the whole vector; a shard (``m > 1``) may split a unit and is
        folded as it is, and a learner whose entries have fixed places as they are."""
        if self.sharded or not self.learner.matches_units:
            return vectors
        return self.learner.match(vectors, self.shard())

    def answer(self, v: np.ndarray, *extra: Any) -> list:
        """What hubs send back: ``[shard, layout, *extra, preprocessor statistics]`` (the
        last item is None but on hub 0 of a pipeline with preprocessor statistics)."""
        return [np.asarray(v, dtype=np.float64), self.learner.layout(), *extra,
                self.preprocessor_state()]

    def global_statistics(self) -> dict:
        out = super().global_statistics()
        out.update({"rounds": self.rounds, "hub": self.ctx.index, "hubs": self.ctx.n_hubs,
                    "aggregation": self.aggregation,
                    "preprocessorMergeErrors": self.preprocessor_merge_errors})
        if self.aggregation == "momentum":
            out["blockMomentum"] = self.block_momentum()
        if self.aggregation == "diversity":
            out["diversityScale"] = (self.diversity_total / self.diversity_rounds
                                     if self.diversity_rounds else None)
            # the scope that runs: a learner without class blocks takes one β per hub
            out["diversityBlocks"] = ("class" if self.diversity_blocks == "class"
                                      and self.learner.class_block_width() else "model")
        return out

    def query_response(self, request_id: Any, spokes: list[dict]) -> dict:
        # each spoke's mini-batches and rounds since the last Update (not shown per spoke)
        since = [s.get("protocol", {}).pop("sinceUpdate", None) or [0, 0] for s in spokes]
        out = super().query_response(request_id, spokes)
        protos = [s.get("protocol", {}) for s in spokes]
        out["protocol"].update({
            "syncMessagesToHubs": sum(p.get("syncMessagesSent", 0) for p in protos),
            "syncBytesToHubs": sum(p.get("syncBytesSent", 0) for p in protos),
            # spokes receive nothing but synchronization traffic
            "syncMessagesToSpokes": sum(s["network"]["messages_received"] for s in spokes),
            "syncBytesToSpokes": sum(s["network"]["bytes_received"] for s in spokes),
            "waitMs": sum(p.get("waitMs", 0.0) for p in protos),
            "spokeRounds": [p.get("rounds", 0) for p in protos],
        })
        if self.safe_zone_rounds:  # how long rounds last since the last Update
            n = max(1, len(spokes))
            batches, rounds = sum(b for b, _ in since) / n, sum(r for _, r in since) / n
            per_round = batches / rounds if rounds else None
            out["protocol"]["miniBatchesPerRound"] = per_round
            out["protocol"]["warnings"] = self.safe_zone_warnings(per_round, round(rounds))
        if any("replayedRecords" in p for p in protos):  # replay on (module docstring)
            out["protocol"].update({
                "replayedRecords": sum(p.get("replayedRecords", 0) for p in protos),
                "replayOverflows": sum(p.get("replayOverflows", 0) for p in protos)})
        if spokes[0].get("export") is not None:
            out["export"] = self.export(spokes[0]["export"])
        return out

    def safe_zone_warnings(self, per_round: float | None, rounds: int) -> list[str]:
        """The Query's ``protocol.warnings`` of a protocol whose rounds end when a spoke
        leaves its safe zone, from its ``rounds`` since the last Update and the
        mini-batches of each spoke they lasted on average (FDA and EVENFLOW say when the
        threshold is too small, :func:`short_rounds_warning`); none by default."""
        return []

    # -- export (a Query's ``export``) -------------------------------------------------------
    @remote()
    def export_shard(self) -> list | Promise:
        """``[shard, layout]``: this hub's shard of the global model, for spoke 0 gathering
        an export (:meth:`ShardedSpoke.gather_export`)."""
        return [self.shard(), self.learner.layout()]

    def export(self, extra: dict) -> dict:
        """The Create request that re-creates this pipeline (hub 0): ``learner`` with the
        whole global model as ``parameters`` (this hub's shard and, with ``m > 1``, the
        other hubs' from ``extra``, as gathered by spoke 0), ``preProcessors`` with the
        global statistics as ``parameters``, ``trainingConfiguration`` and ``version``
        (this hub's ``updates``). Never truncated: ``max_response_params`` does not apply.

        Raises
        ------
        RequestError
            ``export_failed`` (field ``export``) when a hub's shard could not be had;
            ``too_large`` (field ``export``) when the Create request would exceed the
            service's ``max_request_bytes``: it could not be sent back.
        """
        learner = self.learner
        if self.sharded:
            if "error" in extra or len(extra.get("shards", ())) != self.ctx.n_hubs - 1:
                raise RequestError("export_failed", f"the other hubs' shards could not be "
                                   f"gathered: {extra.get('error', 'none came')}", "export")
            w = learner.get_params()
            bounds = shard_bounds(w.size, self.ctx.n_hubs)
            for (lo, hi), v, layout in zip(bounds[1:], extra["shards"], extra["layouts"]):
                v = np.asarray(v, dtype=np.float64)
                if v.size != hi - lo or layout != learner.layout():
                    raise RequestError("export_failed", f"a hub answered {v.size} parameters "
                                       f"of layout {layout}; expected {hi - lo} of "
                                       f"{learner.layout()}", "export")
                w[lo:hi] = v
            learner = type(learner).from_json(learner.to_json())
            learner.set_params(w)
        model = learner.to_json()
        params = model.get("parameters") or {}
        width = self.layout.n_features  # a request declares the records' width; the
        # learner's is what the preprocessors make of them (registry.model_learner_spec)
        if params.get("classes") == [] or not learner.get_params().size:
            # nothing learned to carry (a classifier before its first label, a global model
            # no round has built yet): its arrays were empty against the declared width,
            # and a Create declares no empty class list, so its own Create was refused
            model["parameters"] = {} if width is None else {"n_features": width}
        elif width is not None and "n_features" in params:
            model["parameters"] = {**params, "n_features": width}
        body = {"id": self.request.id, "request": "Create", "version": self.updates,
                "learner": {**model, "name": self.request.learner["name"]},
                "preProcessors": [{**spec, "parameters": p.to_json()["parameters"]}
                                  for spec, p in zip(self.request.pre_processors,
                                                     self.preprocessors)],
                "trainingConfiguration": self.request.training_configuration}
        limit = self.ctx.max_request_bytes
        if limit is not None:
            size = len(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY))
            if size > limit:
                raise RequestError("too_large", f"the export is a Create request of {size} "
                                   f"bytes; the service accepts requests of at most {limit} "
                                   f"(JobConfig.max_request_bytes)", "export")
        return body

    # -- the weights topic (operators.weights) ----------------------------------------------
    def weights(self) -> dict:
        """This hub's weights record (papers/003 Fig. 1's Weights Topic): its shard of the
        global model at version ``updates``, with what a follower needs to rebuild the
        pipeline; the field table is in :mod:`operators.weights`.

        Returns
        -------
        dict
            JSON-like, with ``shard`` a ``(stop − start,)`` float64 array and, on hub 0,
            ``statistics`` holding arrays.
        """
        lo, hi = self.bounds()
        out = {"pipeline": self.request.id, "version": self.updates, "hub": self.ctx.index,
               "hubs": self.ctx.n_hubs, "start": lo, "stop": hi,
               "size": int(self.learner.get_params().size), "layout": self.learner.layout(),
               "recordWidth": self.layout.n_features,
               "shard": np.array(self.shard(), dtype=np.float64),
               "learner": self.request.learner,
               "trainingConfiguration": self.request.training_configuration,
               "timeMs": int(time.time() * 1000)}
        if self.ctx.index == 0:
            out["preProcessors"] = [{"name": p["name"], "hyperParameters": p.get("hyperParameters")}
                                    for p in self.request.pre_processors]
            out["statistics"] = [p.statistics() for p in self.preprocessors]
        return out

    def model_summary(self, limit: int) -> dict:
        """As :meth:`PipelineHub.model_summary`, with ``preProcessors``: the global
        preprocessor statistics (JSON lists; null for one without statistics)."""
        out = self._model_summary(limit)
        out["preProcessors"] = [None if s is None else
                                {k: v.tolist() if isinstance(v, np.ndarray) else v
                                 for k, v in s.items()}
                                for s in (p.statistics() for p in self.preprocessors)]
        return out

    def _model_summary(self, limit: int) -> dict:
        """With ``m > 1`` it describes the shard hub 0 owns (``shard``: ``{"hub", "hubs",
        "start", "stop", "size"}``)."""
        if not self.sharded:
            return super().model_summary(limit)
        lo, hi = self.bounds()
        w = self.shard()
        out = {"available": True, "size": int(w.size), "layout": self.learner.layout(),
               "truncated": bool(w.size > limit),
               "shard": {"hub": self.ctx.index, "hubs": self.ctx.n_hubs, "start": lo, "stop": hi,
                         "size": int(self.learner.get_params().size)}}
        if w.size > limit:
            out["summary"] = {"l2Norm": float(np.linalg.norm(w)), "head": [float(x) for x in w[:16]]}
            out["params"] = []
        else:
            out["params"] = [float(x) for x in w]
        return out


class AveragingHub(ShardedHub):
    """A hub running BSP-style averaging rounds on its shard (papers/002 §2.2.1;
    papers/003 §II.B, eq. 2): a round ends when every spoke has pushed; the weighted
    average answers them all through one broadcast promise."""

    def __init__(self, request) -> None:
        super().__init__(request)
        self._round: BroadcastPromise | None = None
        self._pushed: dict[int, tuple[Any, dict, int]] = {}
        self._exports: list[Promise] = []  # export_shard calls waiting for the open round

    @remote()
    def export_shard(self) -> list | Promise:
        """As :meth:`ShardedHub.export_shard`, answered once the open round (if any) has
        ended: every hub's shard then comes from the same round."""
        if self._round is None:
            return [self.shard(), self.learner.layout()]
        p = Promise()
        self._exports.append(p)
        return p

    @remote
    def push(self, shard: np.ndarray, layout: dict, records: int, spoke: int,
             prep: list | None = None) -> BroadcastPromise:
        """Spoke ``spoke``'s model shard for the current round, weighted by ``records``,
        with its preprocessors' statistics since the last round (``prep``, hub 0).

        The round's global shard is the weighted average (``average``), ``w̃`` plus the
        sum of the spokes' deltas from it (``sum``; ``diversity``: scaled) or plus the
        filtered move (``momentum``), see the module docstring.

        Returns
        -------
        BroadcastPromise
            Answered to every spoke, once all pushed, with ``[w̃ shard, layout,
            preprocessor statistics]``.

        Raises
        ------
        ValueError
            The same spoke pushed twice in one round (a protocol bug), or a bad shard.
        """
        if self._round is None:
            self._round = BroadcastPromise()
            self._pushed = {}
        if spoke in self._pushed:
            raise ValueError(f"spoke {spoke} pushed twice in round {self.rounds + 1}")
        self._pushed[spoke] = (shard, layout, int(records), prep)
        p = self._round
        if self.round_complete():
            self.close_round()
        return p

    def round_complete(self) -> bool:
        """Whether the open round has every push it waits for: every spoke's."""
        return len(self._pushed) == self.n_peers

    def round_bases(self, order: list[int]) -> list[np.ndarray]:
        """The global shard each of the spokes ``order`` started the open round from, for
        ``sum``: today's ``w̃`` for every one."""
        return [self.shard()] * len(order)

    #: why the open round is void (the layout changed while it gathered pushes), else
    #: None; a class default for older snapshots
    _void: str | None = None

    def close_round(self) -> str | None:
        """End the open round: fold its pushes into the shard, answer every pusher through
        the round's broadcast promise, then the exports waiting for it. A round opened
        before this hub's layout changed, or whose pushes cannot be folded (one of a
        layout this hub no longer has), fails instead (module docstring, "A new layout"):
        every pusher gets the error, nothing is folded, the next push opens a new round.

        Returns
        -------
        str or None
            None, or why the round failed (logged).
        """
        p = self._round
        order = sorted(self._pushed)
        reason, self._void = self._void, None
        if reason is None:
            try:
                vectors = self.matched(self.align([self._pushed[i][:2] for i in order]))
            except ValueError as exc:
                reason = f"its pushes cannot be folded: {exc}"
        if reason is not None:
            reason = f"round {self.rounds + 1} failed: {reason}"
            log.warning("%s: %s", self.name, reason)
            self._round, self._pushed = None, {}
            p.fail(ValueError(reason))
            self._answer_exports()
            return reason
        if self.aggregation == "momentum":
            w = self.momentum_move(vectors, self.round_bases(order),
                                   [self._pushed[i][2] for i in order])
        elif self.aggregation in ADDS_DELTAS:
            w = self.sum_of_deltas(vectors, self.round_bases(order))
        else:
            w = weighted_average(vectors, [self._pushed[i][2] for i in order])
        for i in order:
            self.merge_preprocessors(self._pushed[i][3])
        self.set_shard(w)
        self.rounds += 1
        self.updates += 1
        self._round, self._pushed = None, {}
        self.on_round_end(w)
        p.fulfil(self.answer(w))
        self._answer_exports()
        return None

    def _answer_exports(self) -> None:
        waiting, self._exports = self._exports, []
        for e in waiting:
            e.fulfil([self.shard(), self.learner.layout()])

    def on_relayout(self) -> None:
        """A new layout: as :meth:`ShardedHub.on_relayout`; the open round (pushed with the
        old model) fails when it closes (:meth:`close_round`): its promise is bound to
        every pusher's call only once all have pushed."""
        super().on_relayout()
        if self._round is not None:
            self._void = "the layout changed while it was open"

    def on_round_end(self, w: np.ndarray) -> None:
        """Hook: an averaging round ended with shard ``w``."""
