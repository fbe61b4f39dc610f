"""Multi-turn supervised fine-tuning: the warm start before RL."""
