"""Agents: action formats, conversation starts and expert (oracle) policies."""

from agenttrain.agent.formats import FORMAT_NAMES, ActionFormat, ParsedReply, get_format

__all__ = ["FORMAT_NAMES", "ActionFormat", "ParsedReply", "get_format"]
