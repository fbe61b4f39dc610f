"""`agenttrain recipe`: demonstrations -> SFT -> GRPO -> evaluation of each stage, in one run
folder (`runner.py`), from a recipe file (`config.py`), ending in a report (`report.py`)."""

from agenttrain.recipe.config import (
    DemosStage,
    RecipeConfig,
    RecipeEval,
    RFTStage,
    TrainingStage,
    compose_overrides,
    load_recipe,
)
from agenttrain.recipe.runner import Recipe
from agenttrain.run.stages import StageChanged

__all__ = [
    "DemosStage",
    "RFTStage",
    "Recipe",
    "RecipeConfig",
    "RecipeEval",
    "StageChanged",
    "TrainingStage",
    "compose_overrides",
    "load_recipe",
]
