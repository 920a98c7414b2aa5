"""`agents.train_mappo`'s command line: a preset, a resume, key=value overrides (`parse_train_args`), and the
config they name (`resolve_config`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from agents.config import Config, Recipe, load_config
from agents.config.recipe import GPU_RECIPE, choose_recipe, recipe_paths
from agents.run import machine_defaults
from agents.run.process import pick_device
from agents.run.resume import resume_config

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"


class _Once(argparse.Action):
    """An option given once: a second `--config` silently replaced the first (the presets are not layered)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest) is not None:
            parser.error(f"{option_string} given twice; one preset, then key=value overrides")
        setattr(namespace, self.dest, values)


def parse_train_args(argv: list[str] | None, description: str | None) -> argparse.Namespace:
    """`python -m agents.train_mappo`'s command line (`description`: its --help text)."""
    p = argparse.ArgumentParser(
        prog="python -m agents.train_mappo",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--config",
        default=None,
        action=_Once,
        help="YAML preset file, e.g. configs/smoke.yaml (default: configs/default.yaml; on CUDA with "
        "configs/recipe_gpu.yaml laid over it, run.recipe=auto); the keys: --print-config, docs/training.md",
    )
    p.add_argument(
        "--resume",
        default=None,
        metavar="RUN_DIR_OR_CKPT",
        help="continue a run from its newest checkpoint (or the given checkpoint file)",
    )
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config (every key, with its value) as YAML and exit without training",
    )
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. train.amp=bf16")
    return p.parse_intermixed_args(argv)  # --config may come before, between or after the overrides


def resolve_config(args: argparse.Namespace) -> Config:
    """The config the command line names: a preset (under `run.recipe`, `agents.config.recipe`) and
    overrides, or a resumed run's with overrides. Raises ValueError or TypeError naming the bad key,
    file or option."""
    if args.resume is None:
        preset = args.config or DEFAULT_CONFIG
        if Path(preset).resolve() == GPU_RECIPE.resolve():  # alone it lays its keys over the schema's, not a preset
            raise ValueError(
                f"--config {preset}: the GPU recipe is laid over a preset, not one itself; pass run.recipe=gpu "
                "(over configs/default.yaml, or over --config PRESET)"
            )
        cfg = load_config(preset, args.overrides)
        device = pick_device(cfg.run.device)
        recipe = choose_recipe(cfg.run.recipe, device.type, default_preset=args.config is None)
        as_preset = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, recipe=Recipe.preset))
        if recipe == Recipe.preset:
            return as_preset
        gpu = load_config(recipe_paths(preset, recipe), [*args.overrides, f"run.recipe={recipe.value}"])
        # chosen here, not asked for: a GPU too small for the recipe's batch (a 4-6 GiB laptop's) runs the preset;
        # under torchrun every rank must choose alike, so there a run that does not fit is refused, as ever
        single = machine_defaults.launched_ranks() == 1
        shortfall = machine_defaults.recipe_shortfall(gpu, device) if cfg.run.recipe == Recipe.auto and single else None
        if shortfall:
            print(f"note: {shortfall}: the preset instead (run.recipe=gpu insists)", file=sys.stderr)
            return as_preset
        return gpu
    if args.config is not None:
        raise ValueError("--resume continues with the run's saved config; pass key=value overrides instead of --config")
    return resume_config(args.resume, args.overrides)
