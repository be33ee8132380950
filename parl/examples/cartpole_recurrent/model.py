"""A recurrent actor-critic for CartPole without velocities: a GRU remembers what one observation cannot tell."""

from __future__ import annotations

import paddle

import parl
from parl import layers
from parl.data.specs import FieldSpec

State = dict[str, paddle.Tensor]


class RecurrentActorCritic(parl.Model):
    """Observation -> fc -> GRU -> (policy logits, value), with the GRU's hidden state ``h`` as the model state.

    ``policy(inputs, states)`` returns ``(logits, next_states)`` and
    ``value(inputs, states)`` returns ``(values, next_states)``; both run the
    same GRU step, so either one carries the state. The state is declared in
    :meth:`state_specs`, which is what makes tasks and helpers carry it.
    """

    def __init__(self, obs_dim: int = 2, hidden: int = 64, num_actions: int = 2) -> None:
        super().__init__()
        self.obs_dim = obs_dim
        self.hidden = hidden
        self.embed = layers.fc(size=hidden, act="tanh")
        self.gru = layers.gru_cell(hidden)
        self.pi_h = layers.fc(size=hidden, act="tanh")
        self.pi_out = layers.fc(size=num_actions)
        self.v_h = layers.fc(size=hidden, act="tanh")
        self.v_out = layers.fc(size=1)

    def input_specs(self) -> list[FieldSpec]:
        return [FieldSpec("obs", (self.obs_dim,), "float32")]

    def state_specs(self) -> list[FieldSpec]:
        return [FieldSpec("h", (self.hidden,), "float32")]

    def action_specs(self) -> list[FieldSpec]:
        return [FieldSpec("action", (), "int64")]

    def core(self, inputs: State, states: State) -> paddle.Tensor:
        """The GRU's next hidden state from this step's observation and the previous hidden state."""
        return self.gru(self.embed(inputs["obs"]), states["h"])

    def policy(self, inputs: State, states: State) -> tuple[paddle.Tensor, State]:
        h = self.core(inputs, states)
        return self.pi_out(self.pi_h(h)), {"h": h}

    def value(self, inputs: State, states: State) -> tuple[paddle.Tensor, State]:
        h = self.core(inputs, states)
        return self.v_out(self.v_h(h)).reshape([-1]), {"h": h}
