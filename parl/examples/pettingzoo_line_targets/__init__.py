"""PettingZoo parallel API example: walkers that each reach their own target on a line (PPO)."""
