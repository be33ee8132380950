"""Ready-made agents for common environment shapes."""

from parl.agents.gym_agent import GymAgent

__all__ = ["GymAgent"]
