"""Atari Pong with IMPALA (Espeholt et al., 2018) as an experiment for ``parl train``::

    parl train pong_impala                                    # pip install 'parl-rl[atari]'
    parl train pong_impala --set manager.num_workers=4 --set train.max_steps=2000000

16 agents play ``ALE/Pong-v5`` through the Nature paper's wrapper stack (:func:`parl.envs.families.make_env`:
84x84 grey frames, 4-frame skip, 4 stacked) on two worker processes, each worker acting on its own replica
of the network (the Nature CNN, :class:`parl.models.NatureCNN`), refreshed after every learning call. The
learner takes 8 agents' 20-step chunks per update while the other agents keep playing, so rows lag the
learner by an update or two, which V-trace corrects. The run goes through the any-env path
(:mod:`parl.training.any_env`): this is ``parl train impala --env ALE/Pong-v5`` with these defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parl.algorithms.impala import IMPALAConfig
from parl.manager import ManagerConfig
from parl.models import NetConfig
from parl.training.any_env import IMPALARunConfig, named_experiment
from parl.training.trainer import TrainConfig

__all__ = ["PONG_IMPALA", "PongIMPALAConfig"]


@dataclass
class PongIMPALAConfig(IMPALARunConfig):
    """IMPALA on Pong with the paper's Atari settings (unroll 20, learning rate 6e-4, entropy 0.01, gradient
    norm 40), Adam in place of RMSProp, 16 agents on 2 worker processes with prediction replicas."""

    env_id: str = "ALE/Pong-v5"
    """A gymnasium id (the ALE family is registered and wrapped on first use)."""
    train: TrainConfig = field(
        default_factory=lambda: TrainConfig(
            run_dir="runs/pong_impala", max_steps=10_000_000, eval_every=250_000, checkpoint_every=500_000
        )
    )
    """How the run is driven, logged, evaluated and checkpointed (agent steps; each is 4 frames)."""
    net: NetConfig = field(default_factory=lambda: NetConfig(hidden=(), activation="relu"))
    """Layers after the Nature CNN, which the policy and value share (none: its 512 units feed both)."""
    manager: ManagerConfig = field(
        default_factory=lambda: ManagerConfig(num_agents=16, runtime="processes", num_workers=2)
    )
    """Agents and runtime (``manager.seed`` is replaced by ``seed``)."""
    predict_in_workers: bool = True
    """Each worker acts on its own replica of the network."""
    impala: IMPALAConfig = field(default_factory=lambda: IMPALAConfig(lr=6e-4, entropy_coef=0.01))
    """IMPALA settings (``impala.seed`` is replaced by ``seed``)."""


PONG_IMPALA = named_experiment("pong_impala", PongIMPALAConfig, "Atari Pong, IMPALA with replicas (needs [atari])")
