"""`run.recipe`: the batch shape a run takes, chosen for its device.

    preset  the preset as written. configs/default.yaml is the CPU's recipe: 64 environments x 64
            steps an iteration, the CPU's measured best (docs/performance.md).
    gpu     configs/recipe_gpu.yaml laid over the preset, before the overrides: thousands of
            environments and a short horizon. A GPU's env step costs about the same from 256 to
            16,384 environments (one H100, docs/performance.md), so width is nearly free there and
            sequential calls are what cost: the recipe plays 2,048 environments x 16 steps an
            iteration, demonstrates and labels over all 2,048 at once, and fits with bigger minibatches.
    auto    gpu where the command line's default preset runs on CUDA, else preset.

`python -m agents.train_mappo run.recipe=gpu run.device=cpu` runs the GPU recipe on a CPU: the same
batches and updates, only slower (how its learning was checked: docs/training.md).
"""

from __future__ import annotations

from pathlib import Path

from agents.config import load_config
from agents.config.schema import Recipe

GPU_RECIPE = Path(__file__).resolve().parents[2] / "configs" / "recipe_gpu.yaml"


def choose_recipe(recipe: Recipe, device_type: str, default_preset: bool) -> Recipe:
    """`run.recipe` resolved: `auto` becomes `gpu` for the default preset on a CUDA device (`device_type`),
    else `preset`; an explicit value stays."""
    if recipe != Recipe.auto:
        return recipe
    return Recipe.gpu if device_type == "cuda" and default_preset else Recipe.preset


def recipe_paths(preset: str | Path, recipe: Recipe) -> list[Path]:
    """The YAML files a run of `preset` under the resolved `recipe` loads, in order: the GPU recipe over the
    preset, or under it where the preset names `run.recipe: gpu` itself (a run's saved `config.yaml`, which
    holds the recipe and the run's overrides of it: laid over it, the recipe would undo them)."""
    if recipe == Recipe.auto:
        raise ValueError("run.recipe=auto must be resolved for a device first (choose_recipe)")
    if recipe != Recipe.gpu:
        return [Path(preset)]
    return [GPU_RECIPE, Path(preset)] if load_config(preset).run.recipe == Recipe.gpu else [Path(preset), GPU_RECIPE]


def describe_recipe(recipe: Recipe, device_type: str) -> str:
    """The banner's line for a resolved `recipe` on a device of `device_type`."""
    if recipe == Recipe.gpu:
        return (
            f"gpu ({GPU_RECIPE.parent.name}/{GPU_RECIPE.name} over the preset: thousands of environments "
            "and a short horizon, as wide is nearly free on a GPU; run.recipe=preset for the preset alone)"
        )
    if device_type == "cuda":
        return "preset (as written; run.recipe=gpu lays the GPU recipe over it: thousands of environments a call)"
    return "preset (as written)"
