"""`agents.train_mappo`'s command line: a preset, a resume, key=value overrides (`parse_train_args`)."""

from __future__ import annotations

import argparse


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
