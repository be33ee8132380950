"""IMPALA (Espeholt et al., 2018): an actor-critic whose targets are V-trace corrected for the acting policy's lag."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import paddle
from annotated_types import Ge, Gt, Interval

from parl.algorithms.a2c import _ActorCritic
from parl.algorithms.functional import truncated_ratios, vtrace
from parl.data.specs import FieldSpec
from parl.framework.algorithm import ModelFactory
from parl.framework.model import Model
from parl.framework.types import TrainingBatch
from parl.utils.config_check import check_config

__all__ = ["IMPALA", "IMPALAConfig"]


@dataclass
class IMPALAConfig:
    """Settings of :class:`IMPALA`."""

    lr: Annotated[float, Gt(0)] = 6e-4
    """Adam learning rate."""
    gamma: Annotated[float, Interval(ge=0, le=1)] = 0.99
    """Discount factor."""
    lam: Annotated[float, Interval(ge=0, le=1)] = 1.0
    """V-trace lambda: scales the traces ``c_t`` (1.0: the paper's V-trace; on-policy it acts as GAE's lambda)."""
    clip_rho_threshold: Annotated[float, Gt(0)] | None = 1.0
    """``rho-bar``: truncates the importance ratios of the value targets' TD errors (None: no truncation)."""
    clip_c_threshold: Annotated[float, Gt(0)] | None = 1.0
    """``c-bar``: truncates the importance ratios of the traces (None: no truncation)."""
    clip_pg_rho_threshold: Annotated[float, Gt(0)] | None = 1.0
    """Truncates the importance ratios of the policy-gradient advantages (None: no truncation)."""
    value_coef: Annotated[float, Ge(0)] = 0.5
    """Weight of the value loss ``mean((V(s) - vs)^2)``."""
    entropy_coef: Annotated[float, Ge(0)] = 0.01
    """Weight of the entropy bonus."""
    max_grad_norm: Annotated[float, Ge(0)] = 40.0
    """Clip the global gradient norm to this value (0 disables)."""
    seed: Annotated[int, Ge(0)] | None = None
    """Seed of action sampling."""

    def __post_init__(self) -> None:
        check_config(self)


class IMPALA(_ActorCritic[IMPALAConfig]):
    """Importance-weighted actor-learner: A2C's update with V-trace targets, over discrete, multi-discrete or box
    actions.

    The model contract is :class:`~parl.algorithms.a2c.A2C`'s (``policy`` and
    ``value``; see :func:`~parl.algorithms.distributions.action_distribution`).
    ``predict`` returns the behaviour log-probability as ``extras["logp"]``,
    which :class:`OnPolicyHelper` stores with each step and sends back, so
    ``learn`` knows the policy that really acted. The rows may lag behind the
    learning parameters (prediction replicas on worker processes or Ray actors
    get the parameters only every ``ManagerConfig.replica_sync_every`` learning
    calls); V-trace (:func:`~parl.algorithms.functional.vtrace`) corrects the
    value targets and the policy gradient for it with truncated importance
    ratios ``pi(a|s) / mu(a|s)``::

        algo = IMPALA(lambda: CartPoleActorCritic(), IMPALAConfig(lr=1e-3))
        task = TaskConfig("RL", algo, OnPolicyHelper, OnPolicyConfig(sample_interval=16),
                          WrapperConfig(min_train_batch_size=16 * 16, predict_in_workers=True))

    ``learn`` makes one gradient step per batch on ``-mean(logp * pg_advantage)
    + value_coef * mean((V(s) - vs)^2) - entropy_coef * entropy`` and reports
    ``loss``, ``policy_loss``, ``value_loss``, ``entropy`` and per sample
    ``advantage`` (the V-trace policy-gradient advantages, not standardised)
    and ``rho`` (the truncated importance weights of the value targets). Recurrent
    models (with ``state_specs``) are refused; an action index outside the
    logits' width is a ``ValueError``.
    """

    algorithm_name = "IMPALA"

    def __init__(self, model: Model | ModelFactory, config: IMPALAConfig | None = None) -> None:
        super().__init__(model, config if config is not None else IMPALAConfig())

    def extra_learn_specs(self) -> list[FieldSpec]:
        return [FieldSpec("logp", (), "float32")]

    def extra_predict_specs(self) -> list[FieldSpec]:
        return [FieldSpec("logp", (), "float32")]

    def vtrace_targets(self, batch: TrainingBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """V-trace value targets ``vs``, policy-gradient advantages and truncated ratios ``rho`` of a batch
        (paddle tensors, as ``learn`` gets it) under the current parameters; no gradient, no update."""
        with paddle.no_grad():
            _, v_t, v_tp1, _, logp = self._forward(batch)
        pg_advantages, vs, per_sample = self._targets(batch, v_t, v_tp1, logp)
        return vs, pg_advantages, per_sample["rho"]

    def _targets(
        self, batch: TrainingBatch, v_t: np.ndarray, v_tp1: np.ndarray, logp: paddle.Tensor
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        c = self.config
        reward, terminal, seg = self._rows(batch)
        behaviour_logp = batch.extras["logp"].numpy().reshape(-1).astype(np.float64)
        log_rho = logp.detach().numpy().reshape(-1).astype(np.float64) - behaviour_logp
        vs, pg_advantages = vtrace(
            v_t,
            v_tp1,
            reward,
            c.gamma * (1.0 - terminal),
            log_rho,
            seg,
            lam=c.lam,
            clip_rho_threshold=c.clip_rho_threshold,
            clip_c_threshold=c.clip_c_threshold,
            clip_pg_rho_threshold=c.clip_pg_rho_threshold,
        )
        rho = truncated_ratios(log_rho, c.clip_rho_threshold)
        return pg_advantages, vs, {"advantage": pg_advantages, "rho": rho.astype(np.float32)}
