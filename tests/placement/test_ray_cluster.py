"""The Ray backend on a real two-node cluster, started on this machine as docs/placement.md says.

A head and a second node, each ``ray start`` of its own with one CPU, token authentication
(Ray 2.60) and the token file copied to the second node's home, as between two machines. A
driver process (``ray_cluster_driver.py``) maps over both with ``dp_map(..., backend="ray",
address=...)``; the test kills the second node (its processes) mid-map. The nodes run
``ray start --block`` in sessions of their own, so that stopping them touches no other Ray on the
machine (``ray stop`` would stop every one).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason='needs pip install -e ".[ray]"'),
    pytest.mark.skipif(
        sys.platform == "win32", reason="Ray does not support multi-node clusters on Windows (and no killpg there)"
    ),
    pytest.mark.skipif(not (Path(sys.executable).parent / "ray").exists(), reason="no ray CLI beside sys.executable"),
    pytest.mark.timeout(120),
]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RAY = Path(sys.executable).parent / "ray"  # the CLI of the Ray this interpreter imports
START_TIMEOUT_S = 60
MAP_TIMEOUT_S = 60
# the GCS declares a node dead after failure_threshold missed health checks (default: 5 of one
# every 3 s); faster here, so that a killed node's actor is reported in a second or two
FAST_HEALTH_CHECKS = {
    "RAY_health_check_initial_delay_ms": "0",
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_failure_threshold": "3",
}


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Cluster:
    """A head and a second node on 127.0.0.1, each a ``ray start --block`` in its own session."""

    def __init__(self, root: Path):
        self.root = root
        # Ray's sockets live under its temp dir, and a socket's path has at most 107 bytes: pytest's
        # tmp_path is too deep for them
        self.ray_dir = Path(tempfile.mkdtemp(prefix="ray-"))
        self.head_home, self.second_home = root / "head", root / "second"
        self.nodes: dict[str, subprocess.Popen] = {}
        self.base_env = {
            **os.environ,
            "RAY_AUTH_MODE": "token",
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
            **FAST_HEALTH_CHECKS,
        }
        self.base_env.pop("RAY_ADDRESS", None)
        self.port = free_ports(1)[0]
        self.address = f"127.0.0.1:{self.port}"

    def env(self, home: Path, **extra: str) -> dict[str, str]:
        return {**self.base_env, "HOME": str(home), **extra}

    def start(self) -> None:
        # the token, made on the head's machine and copied to the other's ~/.ray/auth_token
        self.head_home.mkdir()
        subprocess.run(
            [str(RAY), "get-auth-token", "--generate"],
            env=self.env(self.head_home),
            check=True,
            capture_output=True,
            timeout=START_TIMEOUT_S,
        )
        token = (self.head_home / ".ray" / "auth_token").read_bytes()
        (self.second_home / ".ray").mkdir(parents=True)
        (self.second_home / ".ray" / "auth_token").write_bytes(token)
        client, dashboard = free_ports(2)
        self.launch(
            "head",
            self.head_home,
            "--head",
            f"--port={self.port}",
            f"--ray-client-server-port={client}",
            f"--dashboard-port={dashboard}",
            "--include-dashboard=false",
            f"--temp-dir={self.ray_dir}",
        )
        self.launch("second", self.second_home, f"--address={self.address}")

    def launch(self, name: str, home: Path, *args: str) -> None:
        (agent_port,) = free_ports(1)
        log = self.root / f"{name}.log"
        cmd = [str(RAY), "start", "--block", "--node-ip-address=127.0.0.1", "--num-cpus=1"]
        cmd += ["--object-store-memory=100000000", f"--dashboard-agent-listen-port={agent_port}"]
        cmd += ["--disable-usage-stats", "--include-log-monitor=false", *args]
        with log.open("wb") as f:
            proc = subprocess.Popen(
                cmd,
                env=self.env(home, PLACEMENT_TEST_NODE=name),
                stdout=f,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the raylet and its agents
            )
        self.nodes[name] = proc
        deadline = time.monotonic() + START_TIMEOUT_S
        # printed once the node is registered with the head, before --block waits
        while "Ray runtime started." not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                raise AssertionError(f"ray start of the {name} node failed (exit {proc.poll()}):\n{tail}")
            time.sleep(0.2)

    def kill(self, name: str) -> None:
        """Kill a node at once, as a machine that is lost: its process group (the raylet, its agents)
        and every process under it (Ray's workers run in groups of their own)."""
        proc = self.nodes.pop(name)
        try:
            tree = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        _signal_group(proc, signal.SIGKILL)
        for p in tree:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        proc.wait(timeout=30)
        psutil.wait_procs(tree, timeout=30)

    def stop(self) -> None:
        """Kill every node's process group. (A SIGTERM would have ``ray start --block`` drain its
        node for up to 30 s first.)"""
        for name in list(self.nodes):
            self.kill(name)
        shutil.rmtree(self.ray_dir, ignore_errors=True)

    def drive(self, n: int, delay: float, on_log=None) -> dict:
        """Run the driver over ``n`` items; ``on_log(names)`` sees the item files as they appear."""
        log_dir, out = self.root / f"items-{n}-{delay}", self.root / f"out-{n}-{delay}.json"
        log_dir.mkdir()
        cmd = [sys.executable, str(HERE / "ray_cluster_driver.py"), self.address, str(n), str(delay), str(log_dir)]
        with (self.root / "driver.log").open("ab") as f:
            proc = subprocess.Popen(
                [*cmd, str(out)], env=self.env(self.head_home), cwd=ROOT, stdout=f, stderr=subprocess.STDOUT
            )
            try:
                deadline = time.monotonic() + MAP_TIMEOUT_S
                while proc.poll() is None and time.monotonic() < deadline:
                    if on_log is not None:
                        on_log({p.name for p in log_dir.iterdir()})
                    time.sleep(0.05)
                if proc.poll() is None:
                    raise AssertionError(f"the map did not end within {MAP_TIMEOUT_S}s:\n{self.driver_tail()}")
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(timeout=30)
        assert proc.returncode == 0, f"the driver failed:\n{self.driver_tail()}"
        return json.loads(out.read_text())

    def driver_tail(self) -> str:
        return (self.root / "driver.log").read_text(errors="replace")[-4000:]


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # start_new_session: the group's id is the leader's pid
    except ProcessLookupError:
        pass


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_a_map_spans_both_nodes_and_a_node_killed_mid_map_loses_no_item(cluster):
    """One map (each cluster start and map costs seconds): both nodes take items, and once the
    second has finished two the test kills it; every result still comes back, in order."""
    n = 40
    done_at_kill: list[int] = []

    def kill_second_once_it_worked(names: set[str]) -> None:
        done = [name for name in names if not name.endswith(".ready")]  # "<item>-<node>"
        if not done_at_kill and sum(name.endswith("-second") for name in done) >= 2:
            done_at_kill.append(len(done))
            cluster.kill("second")

    out = cluster.drive(n, 0.1, on_log=kill_second_once_it_worked)
    assert done_at_kill and done_at_kill[0] < n, "the second node was not killed mid-map"
    assert [x for x, _ in out["results"]] == list(range(n))
    assert {node for _, node in out["results"]} == {"head", "second"}
    # the kill was seen: the second node's actor reported dead, the item it ran retried elsewhere
    assert out["died"] and all("died" in m for m in out["died"]), out["died"]
