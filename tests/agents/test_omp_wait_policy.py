"""`import agents` leaves torch's OpenMP wait policy to the user: a run alone spins at barriers (OpenMP's
default), which the planner and PPO need on 2 threads (docs/performance.md, "Design choices, measured")."""

import os
import subprocess
import sys

PROBE = "import os; import agents; print(os.environ.get('OMP_WAIT_POLICY'))"


def policy_after(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_importing_agents_sets_no_wait_policy():
    # PASSIVE made the coordinated planner 3x and PPO 1.5x slower on 2 threads alone (2-core Zen 4 EPYC)
    assert policy_after() == "None"
    assert policy_after(OMP_WAIT_POLICY="PASSIVE") == "PASSIVE"


def test_the_banner_names_the_policy(monkeypatch):
    from uavsim.machine import hardware

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert hardware.banner("cpu").splitlines()[1].endswith(" (OMP_WAIT_POLICY=PASSIVE)")
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert hardware.banner("cpu").splitlines()[1].endswith((" thread", " threads"))
