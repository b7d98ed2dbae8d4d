"""Scaling a pipeline's mini-batch and step size with its number of spokes
(``trainingConfiguration.scaling``; papers/001_00243469e12aa123.txt §II-C, eq. 3 and 4).

papers/001 derives the hyperparameters of ``n`` parameter-server workers from those ``B``
(mini-batch) and ``α`` (learning rate) tuned for one learner:

- ``B = n · WB``, i.e. the per-worker mini-batch ``WB = B / n`` (eq. 3): all workers
  together fit ``B`` records per iteration;
- ``α_w = α / n`` (eq. 4): each worker's contribution to the global model is reduced,
  against the stale gradients of asynchronous training.

``scaling`` says which of the two a pipeline applies on its ``n`` spokes (its choices are
declared with the parameter, in :data:`learning.protocols.parameters.TRAINING_PARAMETERS`):

============== ============================================ ==============================
scaling        mini-batch a spoke fits (records)            step size a spoke takes
============== ============================================ ==============================
none           ``miniBatchSize``                            as declared
batch          ``max(1, round(miniBatchSize / n))``         as declared
learning-rate  ``miniBatchSize``                            declared / n
both           ``max(1, round(miniBatchSize / n))``         declared / n
============== ============================================ ==============================

(``round`` is half up: 64 / 4 = 16, 10 / 4 = 2.5 → 3.) The step size is the learner's
hyperparameter named by :meth:`learning.learners.Learner.step_size`:

- ``MLP``, ``CNN``: ``learning_rate`` (the optimizer's α: SGD's step, Adam's step bound);
- ``PA`` / ``PAClassifier``, ``PARegressor`` in mode 1 (PA-I) and 2 (PA-II): ``C``. In PA-I
  ``C`` caps the step, ``τ = min(C, l / ‖x‖²)``: ``C / n`` divides by ``n`` every step the
  cap binds and leaves the others, already set by the loss, as they are. In PA-II
  ``τ = l / (‖x‖² + 1 / (2C))``: ``C / n`` shrinks every step (``τ ≤ 2 C l / n``). Both
  are the analogue of ``α / n`` for a learner whose step is adapted to the loss.

Learners with no step-size hyperparameter refuse ``learning-rate`` and ``both`` with
``unsupported_pairing`` (:func:`check_scaling`): PA in mode 0 (``τ = l / ‖x‖²``, no
hyperparameter at all), ``SVM`` (Pegasos' step ``1 / (λ t)`` is set by the regularization
``λ``, which also defines the objective and the projection radius: dividing the step would
change the problem solved, not only its pace), ``Ridge`` (closed form), ``KMeans`` (per
centre ``1 / count``) and the Hoeffding trees (no steps).

Only spokes scale (:class:`learning.protocols.base.PipelineSpoke`, when it is attached to
its network and knows ``n``): the learner runs at
:attr:`~learning.learners.Learner.step_scale` ``= 1 / n`` while its declared
hyperparameters, what a Query reports under ``learner.hyperParameters``, stay those of the
request. Hubs hold the global model and take no steps: they are not scaled. A Query's
``protocol`` section reports what ran (:func:`describe`).
"""

from __future__ import annotations

from typing import Any

from learning.errors import RequestError

__all__ = ["scales_batch", "scales_step", "spoke_mini_batch_size", "step_factor",
           "check_scaling", "scale_learner", "describe"]

_FIELD = "trainingConfiguration.scaling"


def scales_batch(scaling: str) -> bool:
    """Whether ``scaling`` divides the mini-batch (papers/001 eq. 3)."""
    return scaling in ("batch", "both")


def scales_step(scaling: str) -> bool:
    """Whether ``scaling`` divides the step size (papers/001 eq. 4)."""
    return scaling in ("learning-rate", "both")


def spoke_mini_batch_size(mini_batch_size: int, scaling: str, n_spokes: int) -> int:
    """The records a spoke fits at once (papers/001 §II-C, eq. 3: ``WB = B / n``).

    Parameters
    ----------
    mini_batch_size : int
        ``trainingConfiguration.miniBatchSize``, records: the global ``B`` when
        :func:`scales_batch`, else each spoke's own.
    scaling : str
        ``none``, ``batch``, ``learning-rate`` or ``both``.
    n_spokes : int
        ``n``, the spokes of the pipeline (>= 1).

    Returns
    -------
    int
        ``max(1, round(B / n))`` (half up) when :func:`scales_batch`, else ``B``.

    Examples
    --------
    >>> spoke_mini_batch_size(64, "batch", 4), spoke_mini_batch_size(64, "learning-rate", 4)
    (16, 64)
    >>> spoke_mini_batch_size(10, "both", 4), spoke_mini_batch_size(3, "batch", 8)
    (3, 1)
    """
    if not scales_batch(scaling):
        return mini_batch_size
    return max(1, (2 * mini_batch_size + n_spokes) // (2 * n_spokes))  # round half up


def step_factor(scaling: str, n_spokes: int) -> float:
    """The factor a spoke's step size runs at (papers/001 §II-C, eq. 4: ``α_w = α / n``):
    ``1 / n`` when :func:`scales_step`, else 1."""
    return 1.0 / n_spokes if scales_step(scaling) else 1.0


def check_scaling(learner: Any, scaling: str, name: str | None = None) -> None:
    """Refuse step-size scaling for a learner that has no step-size hyperparameter.

    Parameters
    ----------
    learner : learning.learners.Learner
        The learner as it is configured (for PA its ``mode`` decides).
    scaling : str
        ``none``, ``batch``, ``learning-rate`` or ``both``.
    name : str or None
        The learner's name in the request, when it is not the class name (an alias such
        as ``PA``), for the message.

    Raises
    ------
    learning.errors.RequestError
        ``unsupported_pairing`` (field ``trainingConfiguration.scaling``) when
        :func:`scales_step` and ``learner.step_size()`` is None.

    Examples
    --------
    >>> from learning.learners import KMeans, PAClassifier
    >>> check_scaling(PAClassifier(mode=1), "both")
    >>> check_scaling(KMeans(), "batch")
    >>> check_scaling(KMeans(), "learning-rate")
    Traceback (most recent call last):
    ...
    learning.errors.RequestError: scaling 'learning-rate' divides the learner's step size by the number of spokes (papers/001 eq. 4), but KMeans(n_clusters=8, init_size=None, seed=0) has no step-size hyperparameter; use scaling 'none' or 'batch'
    """
    if not scales_step(scaling) or learner.step_size() is not None:
        return
    who = repr(learner)  # the class and its hyperparameters: e.g. PA's mode says why
    if name is not None and name != type(learner).__name__:
        who = f"{name} = {who}"
    raise RequestError("unsupported_pairing",
                       f"scaling {scaling!r} divides the learner's step size by the number of "
                       f"spokes (papers/001 eq. 4), but {who} has no step-size hyperparameter; "
                       f"use scaling 'none' or 'batch'", _FIELD)


def scale_learner(learner: Any, scaling: str, n_spokes: int) -> None:
    """Make ``learner`` (a spoke's) take steps at :func:`step_factor` of its declared step
    size; its hyperparameters are left as declared.

    Raises
    ------
    learning.errors.RequestError
        ``unsupported_pairing``, as :func:`check_scaling`.
    """
    check_scaling(learner, scaling)
    learner.set_step_scale(step_factor(scaling, n_spokes))


def describe(learner: Any, scaling: str, mini_batch_size: int) -> dict:
    """What a spoke runs, for a Query's ``protocol`` section.

    Parameters
    ----------
    learner : learning.learners.Learner
        The spoke's learner (scaled by :func:`scale_learner`).
    scaling : str
    mini_batch_size : int
        The records the spoke fits at once (:func:`spoke_mini_batch_size`).

    Returns
    -------
    dict
        ``{"scaling", "effectiveMiniBatchSize", "learningRateHyperparameter",
        "effectiveLearningRate"}``: the last two are the step-size hyperparameter's name
        and the value the spoke's learner runs at, None for a learner without one.
    """
    return {"scaling": scaling, "effectiveMiniBatchSize": mini_batch_size,
            "learningRateHyperparameter": learner.step_size(),
            "effectiveLearningRate": learner.effective_step_size()}
