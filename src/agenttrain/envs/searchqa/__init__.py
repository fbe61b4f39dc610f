"""SearchQA (Search-R1 style, AgentGym): answer a question by searching a corpus.

The package holds the corpus and BM25 retrieval (`corpus`), the questions (`questions`),
AgentGym's reply rules and exact-match reward (`reward`), the environment and its wire
format (`env`), the oracle, and the bundled invented corpus (`bundled`).
"""

from agenttrain.envs.searchqa.corpus import CorpusError
from agenttrain.envs.searchqa.env import SPEC, SearchQAEnv

__all__ = ["SPEC", "CorpusError", "SearchQAEnv"]
