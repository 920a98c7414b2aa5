"""Which of the project's dependencies have wheels for Windows and for Linux: asks the package index.

    python -m benchmarks.check_wheels                      # runtime + every extra, win_amd64 and manylinux, Python 3.11
    python -m benchmarks.check_wheels --extras "" --platforms win_amd64

For each target platform, pip resolves the requirements of pyproject.toml as an installation on that
platform would (``pip install --dry-run --report`` with ``--platform``, ``--python-version`` and
``--only-binary=:all:``, into a throw-away ``--target``, with pip's own configuration set aside so
that only the index answers; nothing is installed, and pip reads the
metadata of the wheels it picks, downloading those that the index serves without it, such as torch).
A requirement that no wheel satisfies makes the resolution fail; the requirements are then resolved
one at a time to name every one that has none. Writes ``check_wheels-<date>.json`` and ``.md`` into
``--out-dir``.

Not a test: it asks the package index (PyPI by default; ``--index-url`` for another). torch's CUDA
builds live on download.pytorch.org, not on PyPI: PyPI's win_amd64 torch is the CPU build.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PLATFORMS = ("win_amd64", "manylinux_2_28_x86_64")
PYPI = "https://pypi.org/simple"


def canonical(name: str) -> str:
    """PEP 503 name: ``Jinja2`` -> ``jinja2``, ``lazy_importer`` -> ``lazy-importer``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        raise ValueError(f"not a requirement: {requirement!r}")
    return canonical(match.group(1))


def project_requirements(pyproject: Path, extras: list[str]) -> list[tuple[str, str]]:
    """``[(requirement, group)]``: the runtime dependencies (group ``"runtime"``), then those of each
    extra in ``extras`` that are not already listed."""
    import tomllib  # Python 3.11+

    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise ValueError(f"unknown extras {unknown}; pyproject.toml has {sorted(optional)}")
    out, seen = [], set()
    for group, reqs in [("runtime", project["dependencies"]), *((e, optional[e]) for e in extras)]:
        for req in reqs:
            if requirement_name(req) not in seen:
                seen.add(requirement_name(req))
                out.append((req, group))
    return out


def platform_tags(platform: str) -> list[str]:
    """The ``--platform`` values for one target: a manylinux_2_Y target also takes every older
    manylinux wheel (pip 23 does not widen it by itself); other targets are taken as they are."""
    match = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if not match:
        return [platform]
    newest, arch = int(match.group(1)), match.group(2)
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags = []
    for minor in range(newest, 4, -1):
        tags.append(f"manylinux_2_{minor}_{arch}")
        if minor in legacy:
            tags.append(f"{legacy[minor]}_{arch}")
    return tags


def pip_command(requirements: list[str], platform: str, python: str, index_url: str, target: Path,
                report: Path) -> list[str]:
    version = python.replace(".", "")
    command = [sys.executable, "-m", "pip", "--isolated", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--target", str(target), "--report", str(report), "--only-binary=:all:", "--index-url", index_url,
               "--python-version", python, "--implementation", "cp", "--abi", f"cp{version}"]
    for tag in platform_tags(platform):
        command += ["--platform", tag]
    return command + list(requirements)


def wheel_tags(filename: str) -> str:
    """``cp311-cp311-win_amd64`` from a wheel's file name (its last three fields)."""
    if not filename.endswith(".whl"):
        return "not a wheel"
    return "-".join(filename[: -len(".whl")].split("-")[-3:])


def parse_report(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    """``{name: {name, version, wheel, tags, requested}}`` of every package in a pip ``--report``."""
    out = {}
    for item in report["install"]:
        name = canonical(item["metadata"]["name"])
        wheel = item["download_info"]["url"].rsplit("/", 1)[-1]
        out[name] = {"name": name, "version": item["metadata"]["version"], "wheel": wheel, "tags": wheel_tags(wheel),
                     "requested": bool(item.get("requested"))}
    return out


def unavailable(stderr: str) -> list[str]:
    """Names of the packages a failed pip run found no installable file for."""
    names = re.findall(r"No matching distribution found for ([A-Za-z0-9][A-Za-z0-9._-]*)", stderr)
    return sorted({canonical(n) for n in names})


def summarize(platform: str, requirements: list[tuple[str, str]], packages: dict[str, dict[str, str]],
              missing: dict[str, str]) -> dict[str, Any]:
    """One platform's result: each requirement's wheel (or why it has none) and the whole set."""
    rows = []
    for req, group in requirements:
        name = requirement_name(req)
        if name in packages:
            rows.append({"requirement": req, "group": group, "status": "wheel", **packages[name]})
        else:
            rows.append({"requirement": req, "group": group, "status": "no wheel",
                         "error": missing.get(name, "not resolved")})
    return {"platform": platform, "all_wheels": not missing and all(r["status"] == "wheel" for r in rows),
            "requirements": rows, "packages": sorted(packages.values(), key=lambda p: p["name"])}


def index_only_environment() -> dict[str, str]:
    """This process's environment without pip's settings, and no pip configuration file: only the
    index answers (no local find-links, extra indexes or constraints a machine may configure)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def resolve(requirements: list[tuple[str, str]], platform: str, python: str, index_url: str) -> dict[str, Any]:
    """Resolve all requirements for ``platform``; on failure, each one alone, to find those without wheels."""
    with tempfile.TemporaryDirectory() as tmp:
        def run(reqs: list[str]) -> tuple[dict | None, str]:
            report = Path(tmp) / "report.json"
            report.unlink(missing_ok=True)
            proc = subprocess.run(pip_command(reqs, platform, python, index_url, Path(tmp) / "target", report),
                                  capture_output=True, text=True, env=index_only_environment())
            return (json.loads(report.read_text()) if proc.returncode == 0 else None), proc.stderr

        report, stderr = run([r for r, _ in requirements])
        if report is not None:
            return summarize(platform, requirements, parse_report(report), {})
        packages, missing = {}, {}
        for req, _ in requirements:
            alone, err = run([req])
            if alone is None:
                reason = err.strip().splitlines()[-1] if err.strip() else "pip failed"
                for name in unavailable(err) or [requirement_name(req)]:
                    missing[name] = reason
            else:
                packages.update(parse_report(alone))
        return summarize(platform, requirements, packages, missing)


def markdown(result: dict[str, Any]) -> str:
    """The result as a Markdown page: one row per requirement, one column per platform."""
    platforms = result["platforms"]
    names = [p["platform"] for p in platforms]
    lines = [f"# Wheels for the dependencies, Python {result['python']} ({result['date']})", "",
             f"`python -m benchmarks.check_wheels`: pip {result['pip']} resolved pyproject.toml's requirements "
             f"against {result['index_url']} as an installation on each platform would, wheels only "
             "(`pip install --dry-run --report --only-binary=:all: --platform ...`).", "",
             "| requirement | group | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    by_platform = [{r["requirement"]: r for r in p["requirements"]} for p in platforms]
    for req, group in result["requirements"]:
        cells = []
        for rows in by_platform:
            r = rows[req]
            cells.append(f"{r['version']} (`{r['tags']}`)" if r["status"] == "wheel" else f"**no wheel**: {r['error']}")
        lines.append(f"| `{req}` | {group} | " + " | ".join(cells) + " |")
    lines.append("")
    for p in platforms:
        verdict = "every package has a wheel" if p["all_wheels"] else "**some requirements have no wheel**"
        lines.append(f"- {p['platform']}: {len(p['packages'])} packages in the resolved set, {verdict}.")
    lines += ["", "torch from PyPI is the CPU build on Windows (and a CUDA build on Linux x86-64); the CUDA builds "
              "for Windows come from download.pytorch.org (see README.md), which this check does not ask."]
    return "\n".join(lines) + "\n"


def pip_version() -> str:
    out = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True).stdout
    return out.split()[1] if out.startswith("pip ") else "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platforms", nargs="+", default=list(DEFAULT_PLATFORMS))
    parser.add_argument("--python", default="3.11", help="target Python version (default 3.11)")
    parser.add_argument("--extras", default="dev,peers,pipelines,video",
                        help="comma-separated extras to check beside the runtime dependencies ('' for none)")
    parser.add_argument("--index-url", default=PYPI)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python):
        parser.error(f"--python must look like 3.11, got {args.python!r}")
    requirements = project_requirements(ROOT / "pyproject.toml", [e for e in args.extras.split(",") if e])
    platforms = []
    for platform in args.platforms:
        print(f"resolving {len(requirements)} requirements for {platform}, Python {args.python} ...", flush=True)
        platforms.append(resolve(requirements, platform, args.python, args.index_url))
    result = {"date": dt.date.today().isoformat(), "python": args.python, "index_url": args.index_url,
              "pip": pip_version(), "requirements": requirements, "platforms": platforms}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    stem = args.out_dir / f"check_wheels-{result['date']}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    page = markdown(result)
    stem.with_suffix(".md").write_text(page)
    print(page)
    return 0 if all(p["all_wheels"] for p in platforms) else 1


if __name__ == "__main__":
    sys.exit(main())
