"""The driver process of ``test_ray_cluster.py``: one ``dp_map(..., backend="ray")`` over a cluster.

Run as ``python ray_cluster_driver.py ADDRESS ITEMS DELAY LOG_DIR OUT``: it maps ITEMS items over
two CPU workers of the cluster at ADDRESS, each item sleeping DELAY seconds on its worker and
leaving a file ``LOG_DIR/<item>-<node>`` when done (the test watches them to kill a node
mid-map), and writes to OUT, as JSON, the results (``[item, node]`` in the order returned) and
the messages of the ``WorkerDiedWarning`` s it saw. A process of its own, so that Ray's
connection and token settings stay out of the test process.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path

from agents.placement import WorkerDiedWarning, dp_map

NODES = ("head", "second")


def make_node_reporter(device):
    """Item ``(x, delay, log_dir)`` -> ``(x, node)``: the node's name comes from the environment
    that the test gave its ``ray start`` (Ray's workers inherit it). Before its first item, a
    worker waits (up to a minute) until a worker on each node is ready, so that the first one up
    does not run every item while the other is still importing torch."""
    node = os.environ["PLACEMENT_TEST_NODE"]
    waited = False

    def run(item):
        nonlocal waited
        x, delay, log_dir = item
        Path(log_dir, f"{node}.ready").touch()
        deadline = time.monotonic() + 60
        while not waited and not all(Path(log_dir, f"{n}.ready").exists() for n in NODES):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no worker on one of the nodes {NODES} within 60 s")
            time.sleep(0.05)
        waited = True
        time.sleep(delay)
        Path(log_dir, f"{x}-{node}").touch()
        return x, node

    return run


def main(argv: list[str]) -> None:
    address, n, delay, log_dir, out = argv
    items = [(x, float(delay), log_dir) for x in range(int(n))]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = dp_map(make_node_reporter, items, ["cpu", "cpu"], backend="ray", address=address, progress=False)
    died = [str(w.message) for w in caught if issubclass(w.category, WorkerDiedWarning)]
    Path(out).write_text(json.dumps({"results": results, "died": died}))


if __name__ == "__main__":
    main(sys.argv[1:])
