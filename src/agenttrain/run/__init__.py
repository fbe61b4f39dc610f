"""What every training run shares, RL and SFT alike: the run folder, checkpoints and exact
resume, metric tracking, seeding, the learning-rate schedule, progress and Ctrl-C handling,
and the config sections common to every recipe. Imports nothing from `rl/` or `sft/`."""
