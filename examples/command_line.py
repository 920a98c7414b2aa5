"""The examples' command line: each ``main``'s scalar keyword arguments as options, so that ``--help``
says what a script does and what it takes, and a mistyped option stops it before any worker starts."""

import argparse
import inspect
import sys


def run(main, doc: str) -> None:
    """Call ``main`` with the options given on the command line (``--batch-size 8`` for ``batch_size``)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    for name, p in inspect.signature(main).parameters.items():
        if type(p.default) in (int, float, str):  # tuples of prompts and the like stay the script's own
            flag = "--" + name.replace("_", "-")
            parser.add_argument(flag, dest=name, type=type(p.default), default=p.default, help=f"default: {p.default}")
    args = parser.parse_args(sys.argv[1:])
    main(**vars(args))
