"""Acrobot-v1 DQN with several agents feeding one learner through ExpReplayHelper."""
