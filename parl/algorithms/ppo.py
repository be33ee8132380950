"""Proximal policy optimisation (Schulman et al., 2017), clipped objective, with GAE; recurrent models too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import paddle
from annotated_types import Ge, Gt, Interval

from parl.algorithms.distributions import action_distribution
from parl.algorithms.functional import gae_advantages, sequence_starts, unroll_sequences
from parl.algorithms.optim import FusedAdam
from parl.data.specs import FieldSpec
from parl.framework.algorithm import Algorithm, ModelFactory, Tensors
from parl.framework.model import Model
from parl.framework.types import Prediction, TrainingBatch
from parl.utils.config_check import check_config

__all__ = ["PPO", "PPOConfig"]


@dataclass
class PPOConfig:
    """Settings of :class:`PPO`."""

    lr: Annotated[float, Gt(0)] = 1e-3
    """Adam learning rate."""
    gamma: Annotated[float, Interval(ge=0, le=1)] = 0.98
    """Discount factor."""
    gae_lambda: Annotated[float, Interval(ge=0, le=1)] = 0.8
    """GAE lambda."""
    clip_range: Annotated[float, Interval(gt=0, lt=1)] = 0.2
    """Clip the probability ratio to ``[1 - clip_range, 1 + clip_range]``."""
    epochs: Annotated[int, Ge(1)] = 20
    """Passes over each learning batch."""
    minibatch_size: Annotated[int, Ge(1)] = 256
    """Samples per gradient step (the batch is cut into minibatches of this size; with a recurrent model,
    into groups of whole sequences of at least this many samples)."""
    value_coef: Annotated[float, Ge(0)] = 0.5
    """Weight of the value loss."""
    entropy_coef: Annotated[float, Ge(0)] = 0.0
    """Weight of the entropy bonus."""
    max_grad_norm: Annotated[float, Ge(0)] = 0.5
    """Clip the global gradient norm to this value (0 disables)."""
    normalize_advantages: bool = True
    """Standardise advantages within each minibatch."""
    seed: Annotated[int, Ge(0)] | None = None
    """Seed of minibatch shuffling and action sampling."""

    def __post_init__(self) -> None:
        check_config(self)


class PPO(Algorithm):
    """PPO with the clipped surrogate objective over discrete, multi-discrete or box actions.

    The model provides ``value(inputs) -> [B]`` and a ``policy`` whose output
    depends on its single action field (the distribution is chosen once, see
    :func:`~parl.algorithms.distributions.action_distribution`):

    - scalar integer (``Discrete(n)``): ``policy(inputs) -> logits [B, n]``;
    - integer vector ``(k,)`` (``MultiDiscrete``): ``policy(inputs) -> logits
      [B, sum(nvec)]``, with the model's attribute ``action_nvec`` (``k`` ints);
    - float vector ``(k,)`` (``Box``): ``policy(inputs) -> (mean [B, k],
      log_std [B, k] or [k])``, a diagonal Gaussian whose unclipped samples
      are the actions (the env side clips them; the greedy action is the mean).

    ``predict`` returns the behaviour log-probability as ``extras["logp"]``,
    which :class:`OnPolicyHelper` stores with each step and sends back, so the
    ratio is taken against the policy that really acted::

        algo = PPO(lambda: CartPoleActorCritic(), PPOConfig())
        task = ComputationTask("RL", algorithm=algo)

    With categorical actions it also returns the log-softmax of the logits as
    ``extras["logits"]``; with a Gaussian, ``extras["mean"]`` and ``extras["log_std"]``.
    ``learn`` reports ``loss``, ``policy_loss``, ``value_loss``, ``entropy``,
    ``approx_kl``, ``clip_fraction`` and per sample ``advantage``; an action
    index outside the logits' width (or a sub-action's ``nvec``) is a ``ValueError``.

    **Recurrent models.** When the model declares ``state_specs``, its methods
    take the states and return the next ones too: ``policy(inputs, states) ->
    (output, next_states)`` (the output as above) and ``value(inputs, states) -> (values,
    next_states)``, each step's state being what the model computed at the
    previous step. ``predict`` returns the next states, which the helper
    carries to the next step and stores with each row. ``learn`` rebuilds the
    sequences from the time-ordered rows (a sequence starts at row 0 and after
    every ``segment_end``), starts each from the stored ``states`` of its
    first row, unrolls ``policy`` through it (gradients flow through time) and
    evaluates ``value`` on the unrolled states; minibatches are groups of
    whole sequences. See ``docs/recurrent.md``.
    """

    def __init__(self, model: Model | ModelFactory, config: PPOConfig | None = None) -> None:
        super().__init__(model)
        self.config = config if config is not None else PPOConfig()
        self.dist = action_distribution(self.model, "PPO")
        self.action_name = self.dist.name
        # One fused Adam op per step, with the global-norm clip (see parl.algorithms.optim).
        self.adam = FusedAdam(
            self.model.parameters(), learning_rate=self.config.lr, max_grad_norm=self.config.max_grad_norm
        )
        self.optimizer = self.adam
        self.rng = np.random.default_rng(self.config.seed)
        self.learn_steps = 0
        self.recurrent = bool(self.model.state_specs())

    def warm_up(self, model: Model, inputs: Tensors, states: Tensors) -> None:
        dist = action_distribution(model, "PPO")
        if not model.state_specs():
            dist.check_output(model.policy(inputs), model)  # type: ignore[operator]
            model.value(inputs)  # type: ignore[operator]
            return
        for method in ("policy", "value"):
            out = getattr(model, method)(inputs, states)
            if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], Mapping)):
                raise TypeError(
                    f"{type(model).__name__} declares recurrent states, so {method}(inputs, states) must return "
                    f"(output, next_states) with next_states a dict like the states; got {type(out).__name__}"
                )
            missing = sorted(set(states) - set(out[1]))
            if missing:
                raise TypeError(f"{type(model).__name__}.{method} returned next states without {missing}")
            if method == "policy":
                dist.check_output(out[0], model)

    def extra_learn_specs(self) -> list[FieldSpec]:
        return [FieldSpec("logp", (), "float32")]

    def extra_predict_specs(self) -> list[FieldSpec]:
        return [FieldSpec("logp", (), "float32")]

    def _value(self, inputs: Tensors, states: Tensors | None = None) -> paddle.Tensor:
        if self.recurrent:
            return self.model.value(inputs, states)[0].reshape([-1])  # type: ignore[operator]
        return self.model.value(inputs).reshape([-1])  # type: ignore[operator]

    def unroll(
        self, inputs: Tensors, states: Tensors, segment_end: np.ndarray
    ) -> tuple[paddle.Tensor, dict[str, paddle.Tensor], dict[str, paddle.Tensor]]:
        """Distribution parameters of every row of time-ordered ``inputs`` (the logits of a categorical
        action), with the states before and after each row.

        A recurrent model is unrolled sequence by sequence (see
        :func:`~parl.algorithms.functional.unroll_sequences`), each sequence
        starting from ``states`` at its first row; a feed-forward model is
        called once and the state dicts are empty.
        """
        if not self.recurrent:
            return self.dist.params(self.model.policy(inputs)), {}, {}  # type: ignore[operator]
        return unroll_sequences(self._policy_step, inputs, states, segment_end)

    def _policy_and_value(
        self, inputs: Tensors, states: Tensors, segment_end: np.ndarray
    ) -> tuple[paddle.Tensor, paddle.Tensor]:
        """Distribution parameters and values of every row of a minibatch: one ``policy_and_value`` call of a
        feed-forward model (a shared CNN runs once per row), an unroll and a value pass of a recurrent one."""
        if not self.recurrent:
            out, values = self.model.policy_and_value(inputs)
            return self.dist.params(out), values.reshape([-1])
        params, states_t, _ = self.unroll(inputs, states, segment_end)
        return params, self._value(inputs, states_t)

    def _policy_step(self, inputs: Tensors, states: Tensors) -> tuple[paddle.Tensor, Mapping[str, paddle.Tensor]]:
        """One step of a recurrent policy: (distribution parameters, next states)."""
        out, next_states = self.model.policy(inputs, states)  # type: ignore[operator]
        return self.dist.params(out), next_states

    def _minibatches(self, size: int, seg: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """One epoch's minibatches: (rows, segment ends within the minibatch), shuffled.

        Feed-forward: random rows, ``minibatch_size`` at a time. Recurrent:
        whole sequences in random order, grouped until a group holds at least
        ``minibatch_size`` rows; each sequence keeps its rows in time order.
        """
        c = self.config
        if not self.recurrent:
            order = self.rng.permutation(size)
            return [(order[i : i + c.minibatch_size], np.ones(0, bool)) for i in range(0, size, c.minibatch_size)]
        starts = sequence_starts(seg)
        ends = np.append(starts[1:], size)
        groups: list[tuple[np.ndarray, np.ndarray]] = []
        rows: list[np.ndarray] = []
        count = 0
        for s in self.rng.permutation(starts.size):
            rows.append(np.arange(starts[s], ends[s]))
            count += int(ends[s] - starts[s])
            if count >= c.minibatch_size:
                groups.append(_sequence_group(rows))
                rows, count = [], 0
        if rows:
            groups.append(_sequence_group(rows))
        return groups

    def predict(self, inputs: Tensors, states: Tensors, explore: bool) -> Prediction:
        next_states: Mapping[str, paddle.Tensor] = {}
        if self.recurrent:
            out, next_states = self.model.policy(inputs, states)  # type: ignore[operator]
        else:
            out = self.model.policy(inputs)  # type: ignore[operator]
        sample = self.dist.act(self.dist.params(out), self.rng if explore else None)
        return Prediction(
            actions={self.action_name: sample.action},
            states=dict(next_states),
            extras={"logp": sample.logp, **sample.extras},
        )

    def values(self, batch: TrainingBatch) -> tuple[paddle.Tensor, paddle.Tensor]:
        """``V(s_t)`` and ``V(s_tp1)`` of every row under the current parameters (no gradient).

        For a recurrent model the states come from unrolling each sequence
        from its stored initial state; ``V(s_tp1)`` of a sequence's last row
        uses the state after that row, so a truncated episode or a chunk cut
        mid-episode bootstraps from what the policy would have carried on with.
        """
        with paddle.no_grad():
            if not self.recurrent:
                # One call on [inputs; next_inputs] instead of two.
                both = {k: paddle.concat([v, batch.next_inputs[k]]) for k, v in batch.inputs.items()}
                v = self._value(both)
                size = batch.size
                return v[:size], v[size:]
            size = batch.size
            seg = batch.segment_end.numpy().astype(bool) if batch.segment_end is not None else np.ones(size, bool)
            _, states_t, states_tp1 = self.unroll(batch.inputs, batch.states, seg)
            return self._value(batch.inputs, states_t), self._value(batch.next_inputs, states_tp1)

    def learn(self, batch: TrainingBatch) -> dict[str, paddle.Tensor | np.ndarray | float]:
        c = self.config
        size = batch.size
        v_t, v_tp1 = (v.numpy() for v in self.values(batch))
        reward = next(iter(batch.rewards.values())).numpy().reshape(-1)
        terminal = batch.terminal.numpy().reshape(-1)
        delta = reward + c.gamma * (1.0 - terminal) * v_tp1 - v_t
        seg = batch.segment_end.numpy().astype(bool) if batch.segment_end is not None else np.ones(size, bool)
        adv = gae_advantages(delta, seg, c.gamma, c.gae_lambda)
        returns = adv + v_t
        # Per-row tensors stay on the paddle side; a minibatch gathers its rows (no numpy round trip).
        actions = batch.actions[self.action_name]
        old_logp = batch.extras["logp"]
        returns_t = self.tensor("returns", returns)
        whole = not self.recurrent and c.minibatch_size >= size
        if whole:
            # One minibatch holds every row: the order does not matter, so skip shuffling and gathers.
            neg_adv_t = self.tensor("neg_adv", -_standardized(adv) if c.normalize_advantages else -adv)
        lo, hi = 1.0 - c.clip_range, 1.0 + c.clip_range
        parts: list[paddle.Tensor] = []
        for _ in range(c.epochs):
            batches = [(None, seg)] if whole else self._minibatches(size, seg)
            for idx, mb_seg in batches:
                if idx is None:
                    mb_inputs, mb_states, mb_actions, mb_old_logp, mb_returns = (
                        batch.inputs,
                        batch.states,
                        actions,
                        old_logp,
                        returns_t,
                    )
                    mb_neg_adv = neg_adv_t
                else:
                    rows = self.tensor("rows", idx)
                    mb_inputs = {k: paddle.gather(v, rows) for k, v in batch.inputs.items()}
                    mb_states = {k: paddle.gather(v, rows) for k, v in batch.states.items()}
                    mb_actions, mb_old_logp = paddle.gather(actions, rows), paddle.gather(old_logp, rows)
                    mb_returns = paddle.gather(returns_t, rows)
                    mb_adv = adv[idx]
                    if c.normalize_advantages and idx.size > 1:
                        mb_adv = _standardized(mb_adv)
                    mb_neg_adv = self.tensor("mb_neg_adv", -mb_adv)
                params, mb_values = self._policy_and_value(mb_inputs, mb_states, mb_seg)
                if not parts:  # once per call, on every row, before the first step uses any of them
                    self.dist.check_actions(actions, params)
                ratio = paddle.exp(self.dist.log_prob(params, mb_actions) - mb_old_logp)
                # -min(r * A, clip(r) * A) = max(r * -A, clip(r) * -A)
                policy_loss = paddle.maximum(ratio * mb_neg_adv, paddle.clip(ratio, lo, hi) * mb_neg_adv).mean()
                value_loss = (mb_values - mb_returns).square().mean()
                loss = policy_loss + c.value_coef * value_loss
                if c.entropy_coef != 0.0:
                    loss = loss - c.entropy_coef * self.dist.entropy(params).mean()
                self.apply_gradients(loss, self.adam)
                parts.append(paddle.stack([loss.detach(), policy_loss.detach(), value_loss.detach()]))
        self.learn_steps += 1
        means = paddle.stack(parts).mean(axis=0).numpy()
        out: dict[str, paddle.Tensor | np.ndarray | float] = {
            k: means[i] for i, k in enumerate(("loss", "policy_loss", "value_loss"))
        }
        out.update(self._policy_change(batch, seg))
        out["advantage"] = adv
        return out

    def _policy_change(self, batch: TrainingBatch, seg: np.ndarray) -> dict[str, paddle.Tensor | np.ndarray | float]:
        """``entropy``, ``approx_kl`` and ``clip_fraction`` of the updated policy on the whole batch.

        One forward pass without gradient after the last epoch, against the
        behaviour log-probabilities (numpy from there on: a handful of values).
        """
        c = self.config
        with paddle.no_grad():
            params, _, _ = self.unroll(batch.inputs, batch.states, seg)
            logp = self.dist.log_prob(params, batch.actions[self.action_name]).numpy().astype(np.float64)
            entropy = self.dist.entropy(params).numpy().astype(np.float64).mean()
        log_ratio = logp - batch.extras["logp"].numpy().reshape(-1)
        ratio = np.exp(log_ratio)
        return {
            "entropy": float(entropy),
            "approx_kl": float(((ratio - 1.0) - log_ratio).mean()),
            "clip_fraction": float((np.abs(ratio - 1.0) > c.clip_range).mean()),
        }


def _standardized(x: np.ndarray) -> np.ndarray:
    return ((x - x.mean()) / (x.std() + 1e-8)).astype(np.float32)


def _sequence_group(rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The rows of several whole sequences, concatenated, and True at the last row of each."""
    seg = np.zeros(sum(r.size for r in rows), bool)
    seg[np.cumsum([r.size for r in rows]) - 1] = True
    return np.concatenate(rows), seg
