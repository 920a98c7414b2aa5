"""`import agents` makes torch's OpenMP threads wait passively, unless torch is loaded already or the user chose."""

import os
import subprocess
import sys

import pytest

PROBE = "import os{pre}; import agents; print(os.environ.get('OMP_WAIT_POLICY'))"


def policy_after(pre: str = "", **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(pre=pre)], env={**clean, **env}, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_the_trainers_processes_wait_passively():
    assert policy_after() == "PASSIVE"


def test_the_users_own_policy_wins():
    assert policy_after(OMP_WAIT_POLICY="ACTIVE") == "ACTIVE"


@pytest.mark.timeout(120)
def test_nothing_is_set_once_torch_has_loaded_its_openmp():
    # OpenMP read its environment when torch loaded: a variable set now would claim what does not hold
    assert policy_after(pre="; import torch") == "None"


def test_the_banner_names_the_policy(monkeypatch):
    from uavsim.machine import hardware

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    assert hardware.banner("cpu").splitlines()[1].endswith(" threads (OMP_WAIT_POLICY=PASSIVE)")
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert hardware.banner("cpu").splitlines()[1].endswith(" threads")
