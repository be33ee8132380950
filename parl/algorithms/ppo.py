"""Proximal policy optimisation (Schulman et al., 2017), clipped objective, with GAE."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import paddle

from parl.algorithms.functional import categorical_entropy, categorical_log_prob, gae_advantages
from parl.data.specs import FieldSpec
from parl.framework.algorithm import Algorithm, ModelFactory, Tensors
from parl.framework.model import Model
from parl.framework.types import Prediction, TrainingBatch

__all__ = ["PPO", "PPOConfig"]


@dataclass
class PPOConfig:
    """Settings of :class:`PPO`."""

    lr: float = 1e-3
    """Adam learning rate."""
    gamma: float = 0.98
    """Discount factor."""
    gae_lambda: float = 0.8
    """GAE lambda."""
    clip_range: float = 0.2
    """Clip the probability ratio to ``[1 - clip_range, 1 + clip_range]``."""
    epochs: int = 20
    """Passes over each learning batch."""
    minibatch_size: int = 256
    """Samples per gradient step (the batch is cut into minibatches of this size)."""
    value_coef: float = 0.5
    """Weight of the value loss."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus."""
    max_grad_norm: float = 0.5
    """Clip the global gradient norm to this value (0 disables)."""
    normalize_advantages: bool = True
    """Standardise advantages within each minibatch."""
    seed: int | None = None
    """Seed of minibatch shuffling and action sampling."""

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.minibatch_size < 1:
            raise ValueError("PPOConfig.epochs and minibatch_size must be >= 1")
        if not 0.0 < self.clip_range < 1.0:
            raise ValueError(f"PPOConfig.clip_range must be in (0, 1), got {self.clip_range}")
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.gae_lambda <= 1.0:
            raise ValueError("PPOConfig.gamma and gae_lambda must be in [0, 1]")


class PPO(Algorithm):
    """PPO with the clipped surrogate objective over discrete actions.

    The model provides ``policy(inputs) -> logits [B, A]`` and ``value(inputs) -> [B]``.
    ``predict`` returns the behaviour log-probability as ``extras["logp"]``,
    which :class:`OnPolicyHelper` stores with each step and sends back, so the
    ratio is taken against the policy that really acted::

        algo = PPO(lambda: CartPoleActorCritic(), PPOConfig())
        task = ComputationTask("RL", algorithm=algo)

    ``learn`` reports ``loss``, ``policy_loss``, ``value_loss``, ``entropy``,
    ``approx_kl``, ``clip_fraction`` and per sample ``advantage``.
    """

    def __init__(self, model: Model | ModelFactory, config: PPOConfig | None = None) -> None:
        super().__init__(model)
        self.config = config if config is not None else PPOConfig()
        specs = self.model.action_specs()
        if len(specs) != 1 or specs[0].shape != () or specs[0].np_dtype.kind not in "iu":
            raise ValueError(f"PPO needs exactly one scalar integer action field, the model declares {specs}")
        self.action_name = specs[0].name
        clip = paddle.nn.ClipGradByGlobalNorm(self.config.max_grad_norm) if self.config.max_grad_norm > 0 else None
        self.optimizer = paddle.optimizer.Adam(
            learning_rate=self.config.lr, parameters=self.model.parameters(), grad_clip=clip
        )
        self.rng = np.random.default_rng(self.config.seed)
        self.learn_steps = 0

    def warm_up(self, model: Model, inputs: Tensors, states: Tensors) -> None:
        model.policy(inputs)  # type: ignore[operator]
        model.value(inputs)  # type: ignore[operator]

    def extra_learn_specs(self) -> list[FieldSpec]:
        return [FieldSpec("logp", (), "float32")]

    def extra_predict_specs(self) -> list[FieldSpec]:
        return [FieldSpec("logp", (), "float32")]

    def _value(self, inputs: Tensors) -> paddle.Tensor:
        return self.model.value(inputs).reshape([-1])  # type: ignore[operator]

    def predict(self, inputs: Tensors, states: Tensors, explore: bool) -> Prediction:
        logits = self.model.policy(inputs)  # type: ignore[operator]
        logp_all = paddle.nn.functional.log_softmax(logits, axis=-1).numpy()
        if explore:
            # Gumbel-max sampling: argmax(logp + Gumbel noise) ~ Categorical(softmax(logits)).
            action = (logp_all - np.log(-np.log(self.rng.random(logp_all.shape)))).argmax(axis=-1)
        else:
            action = logp_all.argmax(axis=-1)
        logp = np.take_along_axis(logp_all, action[:, None], axis=-1)[:, 0]
        return Prediction(
            actions={self.action_name: action.astype(np.int64)}, extras={"logp": logp.astype(np.float32)}
        )

    def learn(self, batch: TrainingBatch) -> dict[str, paddle.Tensor]:
        c = self.config
        reward = next(iter(batch.rewards.values())).reshape([-1])
        with paddle.no_grad():
            v_t = self._value(batch.inputs)
            v_tp1 = self._value(batch.next_inputs)
            delta = reward + c.gamma * (1.0 - batch.terminal) * v_tp1 - v_t
        size = int(delta.shape[0])
        seg = batch.segment_end.numpy() if batch.segment_end is not None else np.ones(size, np.float32)
        adv = gae_advantages(delta.numpy(), seg, c.gamma, c.gae_lambda)
        returns = adv + v_t.numpy()
        old_logp = batch.extras["logp"].numpy()
        actions = batch.actions[self.action_name].numpy()
        inputs_np = {k: v.numpy() for k, v in batch.inputs.items()}
        stats: dict[str, list[float]] = {k: [] for k in ("loss", "policy_loss", "value_loss", "entropy", "kl", "clip")}
        for _ in range(c.epochs):
            order = self.rng.permutation(size)
            for start in range(0, size, c.minibatch_size):
                idx = order[start : start + c.minibatch_size]
                mb_adv = adv[idx]
                if c.normalize_advantages and idx.size > 1:
                    mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                mb_inputs = {k: paddle.to_tensor(v[idx]) for k, v in inputs_np.items()}
                logits = self.model.policy(mb_inputs)  # type: ignore[operator]
                logp = categorical_log_prob(logits, paddle.to_tensor(actions[idx]))
                log_ratio = logp - paddle.to_tensor(old_logp[idx])
                ratio = log_ratio.exp()
                mb_adv_t = paddle.to_tensor(mb_adv)
                surrogate = paddle.minimum(
                    ratio * mb_adv_t, paddle.clip(ratio, 1.0 - c.clip_range, 1.0 + c.clip_range) * mb_adv_t
                )
                policy_loss = -surrogate.mean()
                value_loss = ((self._value(mb_inputs) - paddle.to_tensor(returns[idx])) ** 2).mean()
                entropy = categorical_entropy(logits).mean()
                loss = policy_loss + c.value_coef * value_loss - c.entropy_coef * entropy
                self.apply_gradients(loss, self.optimizer)
                with paddle.no_grad():
                    stats["loss"].append(float(loss))
                    stats["policy_loss"].append(float(policy_loss))
                    stats["value_loss"].append(float(value_loss))
                    stats["entropy"].append(float(entropy))
                    stats["kl"].append(float(((ratio - 1.0) - log_ratio).mean()))
                    stats["clip"].append(float(((ratio - 1.0).abs() > c.clip_range).astype("float32").mean()))
        self.learn_steps += 1
        out = {k: paddle.to_tensor(np.float32(np.mean(v))) for k, v in stats.items() if k not in ("kl", "clip")}
        out["approx_kl"] = paddle.to_tensor(np.float32(np.mean(stats["kl"])))
        out["clip_fraction"] = paddle.to_tensor(np.float32(np.mean(stats["clip"])))
        out["advantage"] = paddle.to_tensor(adv)
        return out
