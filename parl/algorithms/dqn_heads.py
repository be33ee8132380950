"""Q-value heads for DQN models: the dueling architecture (Wang et al., 2016).

A dueling head splits the last layers of a Q-network into a state-value
stream ``V(s)`` and an advantage stream ``A(s, a)`` and recombines them as
``Q(s, a) = V(s) + A(s, a) - mean_a A(s, a)``. It is a :class:`LayerFunc`,
so a model uses it like any other layer, in place of its last ``fc``::

    class DuelingQ(parl.Model):
        def __init__(self, num_actions: int = 2) -> None:
            super().__init__()
            self.h = layers.fc(size=64, act="relu")
            self.q = DuelingHead(num_actions, hidden=64)

        ...

        def value(self, inputs):
            return self.q(self.h(inputs["obs"]))       # [B, num_actions]

DQN needs no change: it only sees ``value(inputs) -> Q``.
"""

from __future__ import annotations

import paddle

from parl.layers.layer_func import LayerFunc
from parl.layers.wrappers import FC

__all__ = ["DuelingHead", "dueling_q"]


def dueling_q(v_s: paddle.Tensor, a_sa: paddle.Tensor) -> paddle.Tensor:
    """``Q = V + A - mean_a A``: state values ``[B]`` or ``[B, 1]`` and advantages ``[B, A]`` to Q ``[B, A]``.

    Subtracting the mean advantage makes the split identifiable (V is the
    mean of Q over actions) without changing which action is greedy.
    """
    if v_s.ndim == a_sa.ndim - 1:
        v_s = v_s.unsqueeze(-1)
    return v_s + a_sa - a_sa.mean(axis=-1, keepdim=True)


class DuelingHead(LayerFunc):
    """Maps features ``[B, F]`` to Q-values ``[B, num_actions]`` through value and advantage streams.

    Args:
        num_actions: number of discrete actions.
        hidden: width of one hidden layer in each stream (None: each stream is
            a single linear layer on the features).
        act: activation of the hidden layers.

    The parameters belong to the inner ``fc`` layers (``value_out``,
    ``advantage_out`` and, with ``hidden``, ``value_hidden`` and
    ``advantage_hidden``) and are created on the first call, when the feature
    width is known. Target networks sync them by structure like any layer.
    """

    def __init__(self, num_actions: int, hidden: int | None = None, act: str = "relu") -> None:
        super().__init__("dueling")
        self.num_actions = int(num_actions)
        self.value_hidden = FC(hidden, act=act) if hidden else None
        self.advantage_hidden = FC(hidden, act=act) if hidden else None
        self.value_out = FC(1)
        self.advantage_out = FC(self.num_actions)

    def streams(self, features: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
        """The two streams before they are combined: ``V`` ``[B]`` and ``A`` ``[B, num_actions]``."""
        v_in = self.value_hidden(features) if self.value_hidden is not None else features
        a_in = self.advantage_hidden(features) if self.advantage_hidden is not None else features
        return self.value_out(v_in).squeeze(-1), self.advantage_out(a_in)

    def forward(self, features: paddle.Tensor) -> paddle.Tensor:
        v_s, a_sa = self.streams(features)
        return dueling_q(v_s, a_sa)
