"""Echo: a third-party agenttrain environment, installed as a plug-in.

The package's metadata names `register` under the `agenttrain.envs` entry point:

    [project.entry-points."agenttrain.envs"]
    echo = "agenttrain_echo:register"
"""

from agenttrain.envs import register as register_environment
from agenttrain_echo.env import EchoEnv


def register() -> None:
    """Called by agenttrain when it first looks an environment up."""
    register_environment("echo", EchoEnv, words=1)
