"""benchmarks.check_wheels without the network: pip's report and errors parsed, markers evaluated
for the target platform, the level-by-level walk with its one-at-a-time fallback, and the Markdown
page, from canned pip output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import check_wheels as cw

FILES = "https://files.pythonhosted.org/packages/b4/90/e2"


def item(name: str, version: str, wheel: str, requires: list[str] | None = None) -> dict:
    """One entry of `pip install --report`'s "install" list (pip 23.2's layout, trimmed)."""
    metadata = {"metadata_version": "2.1", "name": name, "version": version}
    if requires is not None:
        metadata["requires_dist"] = requires
    return {
        "download_info": {"url": f"{FILES}/{wheel}", "archive_info": {"hashes": {"sha256": "0" * 64}}},
        "is_direct": False,
        "requested": True,
        "metadata": metadata,
    }


# an index as pip would answer for win_amd64: torch needs nccl only on Linux, and nccl has no wheel here
INDEX = {
    "torch": item(
        "torch",
        "2.13.0",
        "torch-2.13.0-cp311-cp311-win_amd64.whl",
        ["filelock", 'nvidia-nccl-cu13==2.29.7; platform_system == "Linux"', 'pyyaml; extra == "pyyaml"'],
    ),
    "tensordict": item(
        "tensordict",
        "0.14.3",
        "tensordict-0.14.3-cp311-cp311-win_amd64.whl",
        ["torch", 'orjson; python_version < "3.13"', "lazy_importer"],
    ),
    "filelock": item("filelock", "4.2.12", "filelock-4.2.12-py3-none-any.whl"),
    "orjson": item("orjson", "3.13.0", "orjson-3.13.0-cp311-cp311-win_amd64.whl", []),
    "lazy-importer": item("lazy_importer", "0.1.0", "lazy_importer-0.1.0-py3-none-any.whl", []),
    "pyyaml": item("PyYAML", "6.0.3", "pyyaml-6.0.3-cp311-cp311-win_amd64.whl", []),
}
SDISTS = {
    "vmas": item("vmas", "1.5.2", "vmas-1.5.2.tar.gz", ["numpy", "pyglet<=1.5.27"]),
    "pyglet": item("pyglet", "1.5.27", "pyglet-1.5.27-py3-none-any.whl", []),
}
NO_WHEEL = (
    "ERROR: Could not find a version that satisfies the requirement {0} (from versions: none)\n"
    "ERROR: No matching distribution found for {0}\n"
)


def fake_ask(index: dict, calls: list[list[str]], sdists: dict | None = None):
    """pip standing in: answers from `index` (wheels; with binary_only=False also from `sdists`),
    fails a run that asks for a package it lacks. Calls asking for source distributions too are
    recorded with a "+sdist" mark."""

    def ask(reqs: list[str], binary_only: bool):
        calls.append(reqs if binary_only else [*reqs, "+sdist"])
        available = index if binary_only else {**(sdists or {}), **index}
        names = [cw.canonicalize_name(cw.Requirement(r).name) for r in reqs]
        lacking = [r for r, n in zip(reqs, names) if n not in available]
        if lacking:
            return None, NO_WHEEL.format(lacking[0])
        return {"install": [available[n] for n in names]}, ""

    return ask


def test_a_report_gives_each_package_its_wheel_tags_and_requirements_under_its_canonical_name():
    packages = cw.parse_report({"install": [INDEX["lazy-importer"], INDEX["pyyaml"], INDEX["torch"]]})
    assert sorted(packages) == ["lazy-importer", "pyyaml", "torch"]
    assert packages["torch"]["tags"] == "cp311-cp311-win_amd64" and packages["lazy-importer"]["tags"] == "py3-none-any"
    assert packages["torch"]["requires"][0] == "filelock" and packages["pyyaml"]["version"] == "6.0.3"
    assert cw.parse_report({"install": [INDEX["filelock"]]})["filelock"]["requires"] == []  # no requires_dist


def test_the_package_without_a_wheel_is_named_from_pips_error():
    notice = "\n[notice] A new release of pip is available: 23.2.1 -> 26.3\n"
    assert cw.last_error(NO_WHEEL.format("vmas==9.9") + notice) == "ERROR: No matching distribution found for vmas==9.9"
    assert cw.last_error("") == "pip failed" and cw.last_error("Killed\n") == "Killed"
    assert cw.unavailable(NO_WHEEL.format("vmas==9.9")) == ["vmas"]
    assert cw.unavailable("ERROR: No matching distribution found for Foo_Bar>=1\n") == ["foo-bar"]
    assert cw.unavailable("ERROR: ResolutionImpossible: for help visit ...") == []


def test_markers_are_evaluated_for_the_target_not_for_this_machine():
    windows, linux = cw.marker_environment("win_amd64", "3.11"), cw.marker_environment("manylinux_2_28_x86_64", "3.13")
    assert (windows["platform_system"], windows["sys_platform"], windows["platform_machine"]) == (
        "Windows",
        "win32",
        "AMD64",
    )
    assert (linux["platform_system"], linux["os_name"], linux["platform_machine"]) == ("Linux", "posix", "x86_64")
    requires = INDEX["torch"]["metadata"]["requires_dist"]
    assert [r.name for r in cw.needed(requires, set(), windows)] == ["filelock"]
    assert [r.name for r in cw.needed(requires, {"pyyaml"}, linux)] == ["filelock", "nvidia-nccl-cu13", "pyyaml"]
    orjson = ['orjson; python_version < "3.13"']
    assert cw.needed(orjson, set(), windows) and not cw.needed(orjson, set(), linux)


def test_the_walk_follows_the_targets_dependencies_level_by_level():
    calls = []
    walked = cw.walk(
        [("torch>=2.5", "runtime"), ("tensordict<0.15", "runtime")], "win_amd64", "3.11", fake_ask(INDEX, calls)
    )
    assert calls == [["torch>=2.5", "tensordict<0.15"], ["filelock", "orjson", "lazy_importer"]]  # torch once
    assert sorted(walked["packages"]) == ["filelock", "lazy-importer", "orjson", "tensordict", "torch"]
    assert walked["missing"] == {} and walked["required_by"]["torch"] == ["runtime", "tensordict"]


def test_a_failed_level_is_asked_one_at_a_time_and_names_what_has_no_wheel():
    calls = []
    walked = cw.walk(
        [("torch>=2.5", "runtime"), ("tensordict<0.15", "runtime")],
        "manylinux_2_28_x86_64",
        "3.11",
        fake_ask(INDEX, calls),
    )
    assert calls[1] == ["filelock", "nvidia-nccl-cu13==2.29.7", "orjson", "lazy_importer"]
    assert calls[2:] == [
        ["filelock"],
        ["nvidia-nccl-cu13==2.29.7"],
        ["nvidia-nccl-cu13==2.29.7", "+sdist"],
        ["orjson"],
        ["lazy_importer"],
    ]
    assert walked["missing"] == {
        "nvidia-nccl-cu13": "ERROR: No matching distribution found for nvidia-nccl-cu13==2.29.7"
    }
    assert "filelock" in walked["packages"]  # the others of the failed level still count
    result = cw.summarize("manylinux_2_28_x86_64", [("torch>=2.5", "runtime")], walked)
    assert not result["all_wheels"] and not result["installable"] and result["missing"][0]["required_by"] == ["torch"]
    assert result["requirements"] == [
        {
            "requirement": "torch>=2.5",
            "group": "runtime",
            "status": "wheel",
            "version": "2.13.0",
            "wheel": "torch-2.13.0-cp311-cp311-win_amd64.whl",
            "tags": "cp311-cp311-win_amd64",
        }
    ]


def test_a_package_with_only_a_source_distribution_is_installable_and_its_dependencies_are_walked():
    calls = []
    reqs = [("filelock", "runtime"), ("vmas==1.5.2", "peers")]
    walked = cw.walk(
        reqs,
        "win_amd64",
        "3.11",
        fake_ask(
            {
                **INDEX,
                "numpy": item("numpy", "2.4.6", "numpy-2.4.6-cp311-cp311-win_amd64.whl", []),
                "pyglet": SDISTS["pyglet"],
            },
            calls,
            SDISTS,
        ),
    )
    assert calls[:4] == [["filelock", "vmas==1.5.2"], ["filelock"], ["vmas==1.5.2"], ["vmas==1.5.2", "+sdist"]]
    assert calls[4:] == [["numpy", "pyglet<=1.5.27"]]
    result = cw.summarize("win_amd64", reqs, walked)
    assert result["installable"] and not result["all_wheels"]
    assert result["requirements"][1]["status"] == "sdist only" and result["requirements"][1]["tags"] == "sdist"
    assert [s["name"] for s in result["source_only"]] == ["vmas"] and result["source_only"][0]["required_by"] == [
        "peers"
    ]
    page = cw.markdown(
        {
            "date": "2026-11-24",
            "python": "3.11",
            "index_url": cw.PYPI,
            "pip": "23.2.1",
            "requirements": reqs,
            "platforms": [result],
        }
    )
    assert "| `vmas==1.5.2` | peers | 1.5.2, **source only** (`vmas-1.5.2.tar.gz`: pip builds it) |" in page
    assert "- win_amd64: 4 packages in the tree; source distribution only: vmas (for peers)." in page


def test_a_top_level_requirement_whose_marker_excludes_the_platform_is_not_needed():
    reqs = [("filelock", "runtime"), ('pywin32>=300; sys_platform == "win32"', "runtime")]
    linux = cw.summarize(
        "manylinux_2_28_x86_64", reqs, cw.walk(reqs, "manylinux_2_28_x86_64", "3.11", fake_ask(INDEX, []))
    )
    assert linux["all_wheels"] and linux["requirements"][1]["status"] == "not needed"
    windows = cw.summarize("win_amd64", reqs, cw.walk(reqs, "win_amd64", "3.11", fake_ask(INDEX, [])))
    assert not windows["all_wheels"] and windows["requirements"][1]["status"] == "no wheel"


def test_manylinux_takes_every_older_manylinux_and_windows_only_itself():
    tags = cw.platform_tags("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64" and tags[-1] == "manylinux1_x86_64"
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux2010_x86_64"} <= set(tags)
    assert "manylinux_2_29_x86_64" not in tags and len(tags) == 24 + 3
    assert cw.platform_tags("win_amd64") == ["win_amd64"]


def test_the_pip_command_asks_for_wheels_of_the_target_only_without_dependencies(tmp_path):
    cmd = cw.pip_command(["torch>=2.5", "psutil"], "win_amd64", "3.11", cw.PYPI, tmp_path / "t", tmp_path / "r.json")
    assert cmd[:3] == [sys.executable, "-m", "pip"] and cmd[-2:] == ["torch>=2.5", "psutil"]
    assert "--only-binary=:all:" not in cw.pip_command(
        ["vmas"], "win_amd64", "3.11", cw.PYPI, tmp_path / "t", tmp_path / "r.json", binary_only=False
    )
    for option in (
        ["--only-binary=:all:"],
        ["--dry-run"],
        ["--no-deps"],
        ["--platform", "win_amd64"],
        ["--python-version", "3.11"],
        ["--abi", "cp311"],
        ["--index-url", cw.PYPI],
        ["--report", str(tmp_path / "r.json")],
    ):
        i = cmd.index(option[0])
        assert cmd[i : i + len(option)] == option


def test_pips_own_configuration_is_set_aside(monkeypatch):
    monkeypatch.setenv("PIP_FIND_LINKS", "/opt/wheels")
    env = cw.index_only_environment()
    assert "PIP_FIND_LINKS" not in env and env["PIP_CONFIG_FILE"] == cw.os.devnull


def test_resolve_runs_pip_with_the_report_file(monkeypatch):
    def run(cmd, capture_output, text, env):
        assert env["PIP_CONFIG_FILE"] == cw.os.devnull
        Path(cmd[cmd.index("--report") + 1]).write_text(json.dumps({"install": [INDEX["filelock"]]}))
        return type("Proc", (), {"returncode": 0, "stderr": ""})()

    monkeypatch.setattr(cw.subprocess, "run", run)
    result = cw.resolve([("filelock", "runtime")], "win_amd64", "3.11", cw.PYPI)
    assert result["all_wheels"] and [p["name"] for p in result["packages"]] == ["filelock"]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="reads pyproject.toml with tomllib (3.11+)")
def test_requirements_are_the_runtime_ones_then_each_extras_new_ones(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "x"\ndependencies = ["torch>=2.5", "numpy"]\n'
        '[project.optional-dependencies]\ndev = ["pytest>=8", "Torch"]\npeers = ["vmas==1.5.2"]\n'
    )
    assert cw.project_requirements(pyproject, ["dev"]) == [
        ("torch>=2.5", "runtime"),
        ("numpy", "runtime"),
        ("pytest>=8", "dev"),
    ]
    with pytest.raises(ValueError, match=r"unknown extras \['gpu'\].*\['dev', 'peers'\]"):
        cw.project_requirements(pyproject, ["gpu"])
    every = [("torch>=2.5", "runtime"), ("numpy", "runtime"), ("pytest>=8", "dev"), ("vmas==1.5.2", "peers")]
    assert cw.project_requirements(pyproject, None) == every  # None: every extra, in the file's order
    assert cw.project_requirements(cw.ROOT / "pyproject.toml", [])[0][1] == "runtime"  # the real file parses


def test_the_page_has_a_row_per_requirement_and_a_column_per_platform():
    reqs = [("torch>=2.5", "runtime"), ("filelock", "runtime")]
    platforms = [
        cw.summarize(p, reqs, cw.walk(reqs, p, "3.11", fake_ask(INDEX, [])))
        for p in ("win_amd64", "manylinux_2_28_x86_64")
    ]
    page = cw.markdown(
        {
            "date": "2026-11-24",
            "python": "3.11",
            "index_url": cw.PYPI,
            "pip": "23.2.1",
            "requirements": reqs,
            "platforms": platforms,
        }
    )
    assert "| requirement | group | win_amd64 | manylinux_2_28_x86_64 |" in page
    assert "| `filelock` | runtime | 4.2.12 (`py3-none-any`) | 4.2.12 (`py3-none-any`) |" in page
    assert "- win_amd64: 2 packages in the tree; every one has a wheel." in page
    assert (
        "- manylinux_2_28_x86_64: 2 packages in the tree; **nothing installable: nvidia-nccl-cu13 (for torch)**."
        in page
    )


def test_a_second_run_on_a_day_keeps_the_first_report(tmp_path, monkeypatch):
    def resolve(requirements, platform, python, index_url):
        return cw.summarize(platform, requirements, cw.walk(requirements, platform, python, fake_ask(INDEX, [])))

    class Day(cw.dt.date):  # both runs on one day, whenever the test runs
        @classmethod
        def today(cls):
            return cls(2026, 12, 5)

    monkeypatch.setattr(cw.dt, "date", Day)
    monkeypatch.setattr(cw, "resolve", resolve)
    monkeypatch.setattr(cw, "pip_version", lambda: "23.2.1")
    monkeypatch.setattr(cw, "project_requirements", lambda path, extras: [("filelock", "runtime")])
    for _ in range(2):
        assert cw.main(["--extras", "", "--platforms", "win_amd64", "--out-dir", str(tmp_path)]) == 0
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {f"check_wheels-2026-12-05{n}{s}" for n in ("", "-2") for s in (".json", ".md")}, names


def test_it_runs_before_torch_is_installed():
    """A wheel check is what one runs before installing: the module and its imports need no torch."""
    code = "import sys, benchmarks.check_wheels; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=cw.ROOT).returncode == 0
