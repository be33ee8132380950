"""MinAtar Breakout with DQN and PPO on the MinAtar paper's network (``parl train minatar_breakout_dqn``)."""
