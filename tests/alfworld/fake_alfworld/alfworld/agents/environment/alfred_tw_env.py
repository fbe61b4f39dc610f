"""Test stand-in for `alfworld.agents.environment.alfred_tw_env`: the part agenttrain uses.

`AlfredTWEnv.init_env(batch_size=1)` returns a batch of one game with TextWorld's batch
interface: `reset() -> (texts, infos)`, `step([command]) -> (texts, scores, dones, infos)`,
infos holding lists of `admissible_commands`, `won` and `extra.gamefile`. The game is a
JSON file written by the test fixture: an intro, the commands, and per command the text
answered and whether it wins. TextWorld ends an episode when won or after
`max_nb_steps_per_episode` steps.
"""

import json


class FakeGameBatch:
    def __init__(self, game_file, max_steps):
        with open(game_file) as source:
            self.game = json.load(source)
        self.game_file = game_file
        self.max_steps = max_steps
        self.steps = 0
        self.closed = False

    def _infos(self, won):
        return {
            "admissible_commands": [list(self.game["commands"])],
            "won": [won],
            "extra.gamefile": [self.game_file],
        }

    def reset(self):
        self.steps = 0
        return (self.game["intro"],), self._infos(False)

    def step(self, commands):
        self.steps += 1
        text, won = self.game["answers"].get(commands[0], ["Nothing happened.", False])
        done = won or self.steps >= self.max_steps
        return (text,), (float(won),), (done,), self._infos(won)

    def close(self):
        self.closed = True


class AlfredTWEnv:
    def __init__(self, config, train_eval="train"):
        raise AssertionError("agenttrain must not run the constructor (it scans every game)")

    def init_env(self, batch_size):
        assert batch_size == 1 and self.num_games == 1
        assert self.train_eval == "eval_out_of_distribution"
        assert self.config["env"]["domain_randomization"] is False
        max_steps = self.config["dagger"]["training"]["max_nb_steps_per_episode"]
        return FakeGameBatch(self.game_files[0], max_steps)
