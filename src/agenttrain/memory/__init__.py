"""The experience pool (ReMe-compatible): experiences summarized from training episodes,
retrieved by task goal and injected into rollouts; see docs/memory.md."""
