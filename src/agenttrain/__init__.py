"""agenttrain: online RL for LLM agents in AgentGym-style text environments."""

__version__ = "0.1.0"
