"""Reinforcement learning: advantage estimators, losses, KL, the trainer and its checkpoints."""
