"""Default models from gymnasium spaces: specs, encoders and the networks of each algorithm family.

::

    from parl.models import ActorCriticModel, NetConfig
    model = ActorCriticModel(env.observation_space, env.action_space, NetConfig((64, 64), "tanh"))
"""

from parl.models.defaults import (
    ActorCriticModel,
    DeterministicActorCriticModel,
    NetConfig,
    QNetworkModel,
    SquashedGaussianActorCriticModel,
)
from parl.models.encoders import (
    MinAtarCNN,
    NatureCNN,
    is_image_space,
    make_encoder,
    register_encoder,
    registered_encoders,
)
from parl.models.spaces import ActionKind, action_kind, action_nvec, action_spec, observation_spec

__all__ = [
    "ActionKind",
    "ActorCriticModel",
    "DeterministicActorCriticModel",
    "MinAtarCNN",
    "NatureCNN",
    "NetConfig",
    "QNetworkModel",
    "SquashedGaussianActorCriticModel",
    "action_kind",
    "action_nvec",
    "action_spec",
    "is_image_space",
    "make_encoder",
    "observation_spec",
    "register_encoder",
    "registered_encoders",
]
