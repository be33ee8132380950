"""TD3 on Pendulum-v1 with several agents sharing one replay-fed learner."""
