"""benchmarks.check_wheels without the network: pip's report and errors parsed, the per-requirement
fallback, and the Markdown page, from canned pip output."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks import check_wheels as cw

FILES = "https://files.pythonhosted.org/packages/b4/90/e2"


def item(name: str, version: str, wheel: str, requested: bool) -> dict:
    """One entry of `pip install --report`'s "install" list (pip 23.2's layout, trimmed)."""
    return {"download_info": {"url": f"{FILES}/{wheel}", "archive_info": {"hashes": {"sha256": "0" * 64}}},
            "is_direct": False, "requested": requested,
            "metadata": {"metadata_version": "2.1", "name": name, "version": version}}


REPORT = {"version": "1", "pip_version": "23.2.1", "install": [
    item("psutil", "7.2.2", "psutil-7.2.2-cp37-abi3-win_amd64.whl", True),
    item("tensordict", "0.14.3", "tensordict-0.14.3-cp311-cp311-win_amd64.whl", True),
    item("lazy_importer", "0.1.0", "lazy_importer-0.1.0-py3-none-any.whl", False),
    item("Jinja2", "3.1.6", "jinja2-3.1.6-py3-none-any.whl", False),
]}
NO_WHEEL = ("ERROR: Could not find a version that satisfies the requirement vmas==9.9 (from versions: 1.5.2)\n"
            "ERROR: No matching distribution found for vmas==9.9\n")


def test_a_report_gives_each_package_its_wheel_tags_under_its_canonical_name():
    packages = cw.parse_report(REPORT)
    assert sorted(packages) == ["jinja2", "lazy-importer", "psutil", "tensordict"]
    assert packages["psutil"] == {"name": "psutil", "version": "7.2.2", "wheel": "psutil-7.2.2-cp37-abi3-win_amd64.whl",
                                  "tags": "cp37-abi3-win_amd64", "requested": True}
    assert packages["lazy-importer"]["tags"] == "py3-none-any" and not packages["lazy-importer"]["requested"]


def test_the_package_without_a_wheel_is_named_from_pips_error():
    assert cw.unavailable(NO_WHEEL) == ["vmas"]
    assert cw.unavailable("ERROR: No matching distribution found for Foo_Bar>=1\n") == ["foo-bar"]
    assert cw.unavailable("ERROR: ResolutionImpossible: for help visit ...") == []


def test_manylinux_takes_every_older_manylinux_and_windows_only_itself():
    tags = cw.platform_tags("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64" and tags[-1] == "manylinux1_x86_64"
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux2010_x86_64"} <= set(tags)
    assert "manylinux_2_29_x86_64" not in tags and len(tags) == 24 + 3
    assert cw.platform_tags("win_amd64") == ["win_amd64"]


def test_the_pip_command_asks_for_wheels_of_the_target_only(tmp_path):
    cmd = cw.pip_command(["torch>=2.5", "psutil"], "win_amd64", "3.11", cw.PYPI, tmp_path / "t", tmp_path / "r.json")
    assert cmd[:3] == [sys.executable, "-m", "pip"] and cmd[-2:] == ["torch>=2.5", "psutil"]
    for option in (["--only-binary=:all:"], ["--dry-run"], ["--platform", "win_amd64"], ["--python-version", "3.11"],
                   ["--abi", "cp311"], ["--index-url", cw.PYPI], ["--report", str(tmp_path / "r.json")]):
        i = cmd.index(option[0])
        assert cmd[i:i + len(option)] == option


def test_pips_own_configuration_is_set_aside(monkeypatch):
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")
    env = cw.index_only_environment()
    assert "PIP_FIND_LINKS" not in env and env["PIP_CONFIG_FILE"] == cw.os.devnull


@pytest.mark.skipif(sys.version_info < (3, 11), reason="reads pyproject.toml with tomllib (3.11+)")
def test_requirements_are_the_runtime_ones_then_each_extras_new_ones(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\ndependencies = ["torch>=2.5", "numpy"]\n'
                         '[project.optional-dependencies]\ndev = ["pytest>=8", "Torch"]\npeers = ["vmas==1.5.2"]\n')
    assert cw.project_requirements(pyproject, ["dev"]) == [("torch>=2.5", "runtime"), ("numpy", "runtime"),
                                                           ("pytest>=8", "dev")]
    with pytest.raises(ValueError, match=r"unknown extras \['gpu'\].*\['dev', 'peers'\]"):
        cw.project_requirements(pyproject, ["gpu"])
    assert cw.project_requirements(cw.ROOT / "pyproject.toml", [])[0][1] == "runtime"  # the real file parses


def fake_pip(failing: set[str], calls: list[list[str]]):
    """subprocess.run standing in for pip: fails when a requirement in `failing` is asked for,
    else writes REPORT's entries for the requirements asked."""

    def run(cmd, capture_output, text, env):
        reqs = cmd[len(cmd) - cmd[::-1].index("--platform") + 1:]  # after the last --platform's value
        calls.append(reqs)
        if failing & set(reqs):
            return type("Proc", (), {"returncode": 1, "stderr": NO_WHEEL})()
        wanted = {cw.requirement_name(r) for r in reqs}
        install = [i for i in REPORT["install"] if cw.canonical(i["metadata"]["name"]) in wanted]
        Path(cmd[cmd.index("--report") + 1]).write_text(json.dumps({**REPORT, "install": install}))
        return type("Proc", (), {"returncode": 0, "stderr": ""})()

    return run


def test_a_failed_resolution_is_retried_one_requirement_at_a_time(monkeypatch):
    calls = []
    monkeypatch.setattr(cw.subprocess, "run", fake_pip({"vmas==9.9"}, calls))
    reqs = [("psutil>=5.9", "runtime"), ("vmas==9.9", "peers"), ("tensordict<0.15", "runtime")]
    result = cw.resolve(reqs, "win_amd64", "3.11", cw.PYPI)
    assert calls == [["psutil>=5.9", "vmas==9.9", "tensordict<0.15"], ["psutil>=5.9"], ["vmas==9.9"],
                     ["tensordict<0.15"]]
    assert not result["all_wheels"]
    rows = {r["requirement"]: r for r in result["requirements"]}
    assert rows["psutil>=5.9"]["status"] == "wheel" and rows["tensordict<0.15"]["version"] == "0.14.3"
    assert rows["vmas==9.9"] == {"requirement": "vmas==9.9", "group": "peers", "status": "no wheel",
                                 "error": "ERROR: No matching distribution found for vmas==9.9"}


def test_a_resolution_that_succeeds_runs_pip_once_and_reports_every_package(monkeypatch):
    calls = []
    monkeypatch.setattr(cw.subprocess, "run", fake_pip(set(), calls))
    result = cw.resolve([("psutil>=5.9", "runtime")], "win_amd64", "3.11", cw.PYPI)
    assert len(calls) == 1 and result["all_wheels"] and [p["name"] for p in result["packages"]] == ["psutil"]


def test_the_page_has_a_row_per_requirement_and_a_column_per_platform(monkeypatch):
    monkeypatch.setattr(cw.subprocess, "run", fake_pip({"vmas==9.9"}, []))
    reqs = [("psutil>=5.9", "runtime"), ("vmas==9.9", "peers")]
    platforms = [cw.resolve(reqs, p, "3.11", cw.PYPI) for p in ("win_amd64", "manylinux_2_28_x86_64")]
    page = cw.markdown({"date": "2026-11-24", "python": "3.11", "index_url": cw.PYPI, "pip": "23.2.1",
                        "requirements": reqs, "platforms": platforms})
    assert "| requirement | group | win_amd64 | manylinux_2_28_x86_64 |" in page
    assert "| `psutil>=5.9` | runtime | 7.2.2 (`cp37-abi3-win_amd64`) | 7.2.2 (`cp37-abi3-win_amd64`) |" in page
    assert page.count("**no wheel**: ERROR: No matching distribution found for vmas==9.9") == 2
    assert "- win_amd64: 1 packages in the resolved set, **some requirements have no wheel**." in page
