"""Which of the project's dependencies have wheels for Windows and for Linux: asks the package index.

    python -m benchmarks.check_wheels                      # runtime + every extra; win_amd64 and manylinux; Python 3.11
    python -m benchmarks.check_wheels --extras "" --platforms win_amd64

For each target platform it walks the dependency tree from pyproject.toml's requirements, one level
at a time. pip picks each level's wheels for the target (``pip install --dry-run --no-deps --report
--only-binary=:all: --platform ... --python-version ...`` into a throw-away ``--target``, reading
metadata through HTTP range requests instead of downloading whole wheels, with pip's own
configuration set aside so that only the index answers); their ``Requires-Dist`` entries, with
environment markers evaluated for the target, make the next level. pip's own resolver cannot do
this walk: it evaluates markers for the machine it runs on, so a Windows resolution on Linux asks
for torch's Linux-only ``nvidia-nccl-cu13`` and fails. This is a wheel check, not a resolver: a
package is checked once, under the first specifier that asks for it. When a level fails, its
requirements are asked one at a time; one without a wheel is asked again allowing a source
distribution (which pip would build on install: fine for pure-Python packages). Writes
``check_wheels-<date>.json`` and ``.md`` into ``--out-dir``.

Not a test: it asks the package index (PyPI by default; ``--index-url`` for another). torch's other
builds (CPU-only for Linux, CUDA for Windows) live on download.pytorch.org, which this does not ask.
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

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from benchmarks.out_paths import OUT_DIR_HELP, free_stem, out_dir_arg

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PLATFORMS = ("win_amd64", "manylinux_2_28_x86_64")
PYPI = "https://pypi.org/simple"


def marker_environment(platform: str, python: str) -> dict[str, str]:
    """The PEP 508 marker values of a CPython ``python`` on ``platform`` (win_* or *linux*)."""
    windows = platform.startswith("win")
    machine = {"win_amd64": "AMD64", "win32": "x86", "win_arm64": "ARM64"}.get(platform) or platform.rsplit("_", 1)[-1]
    if platform.endswith("x86_64"):
        machine = "x86_64"
    return {
        "sys_platform": "win32" if windows else "linux",
        "platform_system": "Windows" if windows else "Linux",
        "os_name": "nt" if windows else "posix",
        "platform_machine": machine,
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_version": "",
        "implementation_version": f"{python}.0",
        "extra": "",
    }


def project_requirements(pyproject: Path, extras: list[str] | None) -> list[tuple[str, str]]:
    """``[(requirement, group)]``: the runtime dependencies (group ``"runtime"``), then those of each
    extra in ``extras`` (None: every extra, in the file's order) that are not already listed."""
    import tomllib  # Python 3.11+

    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    optional = project.get("optional-dependencies", {})
    extras = list(optional) if extras is None else extras
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise ValueError(f"unknown extras {unknown}; pyproject.toml has {sorted(optional)}")
    out, seen = [], set()
    for group, reqs in [("runtime", project["dependencies"]), *((e, optional[e]) for e in extras)]:
        for req in reqs:
            name = canonicalize_name(Requirement(req).name)
            if name not in seen:
                seen.add(name)
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


def pip_command(
    requirements: list[str],
    platform: str,
    python: str,
    index_url: str,
    target: Path,
    report: Path,
    binary_only: bool = True,
) -> list[str]:
    """pip picking the files of ``requirements`` for the target, without their dependencies: wheels
    only, or (``binary_only=False``) a source distribution where no wheel fits."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "--isolated",
        "--disable-pip-version-check",
        "install",
        "--dry-run",
        "--no-deps",
        "--ignore-installed",
        "--quiet",
        "--use-feature=fast-deps",
        "--target",
        str(target),
        "--report",
        str(report),
        "--index-url",
        index_url,
        "--python-version",
        python,
        "--implementation",
        "cp",
        "--abi",
        f"cp{python.replace('.', '')}",
    ]
    if binary_only:
        command.append("--only-binary=:all:")
    for tag in platform_tags(platform):
        command += ["--platform", tag]
    return command + list(requirements)


def index_only_environment() -> dict[str, str]:
    """This process's environment without pip's settings, and no pip configuration file: only the
    index answers (no local find-links, extra indexes or constraints a machine may configure)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def wheel_tags(filename: str) -> str:
    """``cp311-cp311-win_amd64`` from a wheel's file name (its last three fields)."""
    if not filename.endswith(".whl"):
        return "sdist"
    return "-".join(filename[: -len(".whl")].split("-")[-3:])


def parse_report(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{name: {name, version, wheel, tags, requires}}`` of every package in a pip ``--report``."""
    out = {}
    for item in report["install"]:
        name = canonicalize_name(item["metadata"]["name"])
        wheel = item["download_info"]["url"].rsplit("/", 1)[-1]
        out[name] = {
            "name": name,
            "version": item["metadata"]["version"],
            "wheel": wheel,
            "tags": wheel_tags(wheel),
            "requires": list(item["metadata"].get("requires_dist", [])),
        }
    return out


def last_error(stderr: str) -> str:
    """pip's last ``ERROR:`` line (its verdict), else its last line."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return (errors or lines or ["pip failed"])[-1]


def unavailable(stderr: str) -> list[str]:
    """Names of the packages a failed pip run found no installable file for."""
    names = re.findall(r"No matching distribution found for ([A-Za-z0-9][A-Za-z0-9._-]*)", stderr)
    return sorted({canonicalize_name(n) for n in names})


def needed(requires: list[str], extras: set[str], environment: dict[str, str]) -> list[Requirement]:
    """The ``Requires-Dist`` entries that apply on the target, with the extras asked for."""
    out = []
    for line in requires:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({**environment, "extra": e}) for e in {"", *extras}):
            req.marker = None
            out.append(req)
    return out


def walk(requirements: list[tuple[str, str]], platform: str, python: str, ask) -> dict[str, Any]:
    """Walk the dependency tree for ``platform``; ``ask(requirement strings, binary_only) -> (report
    or None, stderr)`` runs pip. Returns each package's file (a wheel, else a source distribution;
    or why there is neither) and who asked for it."""
    environment = marker_environment(platform, python)
    packages, missing, required_by = {}, {}, {}
    level = []
    for line, group in requirements:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(environment):
            req.marker = None
            level.append((req, group))
    while level:
        fresh = {}
        for req, parent in level:
            name = canonicalize_name(req.name)
            required_by.setdefault(name, []).append(parent)
            if name not in packages and name not in missing and name not in fresh:
                fresh[name] = req
        report, _ = ask([str(r) for r in fresh.values()], True) if fresh else ({"install": []}, "")
        found = parse_report(report) if report is not None else {}
        if report is None:  # one at a time, to name every requirement without a wheel
            for name, req in fresh.items():
                alone, _ = ask([str(req)], True)
                if alone is None:  # no wheel: is there a source distribution pip could build?
                    alone, err = ask([str(req)], False)
                    if alone is None:
                        missing[name] = last_error(err)
                if alone is not None:
                    found.update(parse_report(alone))
        level = []
        for name, info in found.items():
            packages[name] = info
            extras = set(fresh[name].extras) if name in fresh else set()
            level += [(dep, name) for dep in needed(info["requires"], extras, environment)]
    return {"packages": packages, "missing": missing, "required_by": required_by}


def summarize(platform: str, requirements: list[tuple[str, str]], walked: dict[str, Any]) -> dict[str, Any]:
    """One platform's result: each requirement's wheel (or why it has none), and the whole set."""
    packages, missing = walked["packages"], walked["missing"]
    rows = []
    for line, group in requirements:
        name = canonicalize_name(Requirement(line).name)
        if name in packages:
            info = packages[name]
            status = "sdist only" if info["tags"] == "sdist" else "wheel"
            rows.append(
                {
                    "requirement": line,
                    "group": group,
                    "status": status,
                    "version": info["version"],
                    "wheel": info["wheel"],
                    "tags": info["tags"],
                }
            )
        elif name in missing:
            rows.append({"requirement": line, "group": group, "status": "no wheel", "error": missing[name]})
        else:  # its marker leaves it out on this platform
            rows.append({"requirement": line, "group": group, "status": "not needed"})
    everything = [
        {"name": n, "version": p["version"], "wheel": p["wheel"], "required_by": walked["required_by"][n]}
        for n, p in sorted(packages.items())
    ]
    source_only = [p for p in everything if not p["wheel"].endswith(".whl")]
    return {
        "platform": platform,
        "installable": not missing,
        "all_wheels": not missing and not source_only,
        "source_only": source_only,
        "requirements": rows,
        "packages": everything,
        "missing": [
            {"name": n, "error": e, "required_by": walked["required_by"][n]} for n, e in sorted(missing.items())
        ],
    }


def resolve(requirements: list[tuple[str, str]], platform: str, python: str, index_url: str) -> dict[str, Any]:
    """``summarize`` of ``walk`` with pip asking ``index_url``."""
    with tempfile.TemporaryDirectory() as tmp:

        def ask(reqs: list[str], binary_only: bool) -> tuple[dict | None, str]:
            report = Path(tmp) / "report.json"
            report.unlink(missing_ok=True)
            proc = subprocess.run(
                pip_command(reqs, platform, python, index_url, Path(tmp) / "target", report, binary_only),
                capture_output=True,
                text=True,
                env=index_only_environment(),
            )
            return (json.loads(report.read_text(encoding="utf-8")) if proc.returncode == 0 else None), proc.stderr

        return summarize(platform, requirements, walk(requirements, platform, python, ask))


def _cell(row: dict[str, Any]) -> str:
    if row["status"] == "wheel":
        return f"{row['version']} (`{row['tags']}`)"
    if row["status"] == "sdist only":
        return f"{row['version']}, **source only** (`{row['wheel']}`: pip builds it)"
    return "not needed" if row["status"] == "not needed" else f"**nothing installable**: {row['error']}"


def markdown(result: dict[str, Any]) -> str:
    """The result as a Markdown page: one row per requirement, one column per platform."""
    platforms = result["platforms"]
    lines = [
        f"# Wheels for the dependencies, Python {result['python']} ({result['date']})",
        "",
        f"`python -m benchmarks.check_wheels`, pip {result['pip']}, index {result['index_url']}: each "
        "platform's dependency tree from pyproject.toml, wheels only, environment markers evaluated for "
        "that platform.",
        "",
        "| requirement | group | " + " | ".join(p["platform"] for p in platforms) + " |",
        "|---|---|" + "---|" * len(platforms),
    ]
    by_platform = [{r["requirement"]: r for r in p["requirements"]} for p in platforms]
    for req, group in result["requirements"]:
        lines.append(f"| `{req}` | {group} | " + " | ".join(_cell(rows[req]) for rows in by_platform) + " |")
    lines.append("")
    for p in platforms:
        verdict = ["every one has a wheel"] if p["all_wheels"] else []
        if p["source_only"]:
            verdict.append(
                "source distribution only: "
                + ", ".join(f"{s['name']} (for {', '.join(s['required_by'])})" for s in p["source_only"])
            )
        if p["missing"]:
            verdict.append(
                "**nothing installable: "
                + ", ".join(f"{m['name']} (for {', '.join(m['required_by'])})" for m in p["missing"])
                + "**"
            )
        lines.append(f"- {p['platform']}: {len(p['packages'])} packages in the tree; {'; '.join(verdict)}.")
    return "\n".join(lines) + "\n"


def pip_version() -> str:
    out = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True).stdout
    return out.split()[1] if out.startswith("pip ") else "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platforms", nargs="+", default=list(DEFAULT_PLATFORMS))
    parser.add_argument("--python", default="3.11", help="target Python version (default 3.11)")
    parser.add_argument(
        "--extras",
        default="all",
        help="comma-separated extras to check beside the runtime ones (default: all of pyproject.toml's; '' for none)",
    )
    parser.add_argument("--index-url", default=PYPI)
    parser.add_argument(
        "--out-dir", type=out_dir_arg, default=ROOT / "benchmarks" / "results", help=OUT_DIR_HELP
    )  # checked before asking
    args = parser.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", args.python):
        parser.error(f"--python must look like 3.11, got {args.python!r}")
    bad = [p for p in args.platforms if not (p.startswith("win") or "linux" in p)]
    if bad:
        parser.error(f"--platforms takes win_* and *linux* wheel platform tags, got {bad}")
    extras = None if args.extras == "all" else [e for e in args.extras.split(",") if e]
    requirements = project_requirements(ROOT / "pyproject.toml", extras)
    platforms = []
    for platform in args.platforms:
        print(
            f"walking the dependencies of {len(requirements)} requirements for {platform}, Python {args.python}",
            flush=True,
        )
        platforms.append(resolve(requirements, platform, args.python, args.index_url))
    result = {
        "date": dt.date.today().isoformat(),
        "python": args.python,
        "index_url": args.index_url,
        "pip": pip_version(),
        "requirements": requirements,
        "platforms": platforms,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    # a second run of the day keeps the first's files (which the docs may cite): check_wheels-<date>-2, ...
    stem = args.out_dir / free_stem(args.out_dir, f"check_wheels-{result['date']}", (".json", ".md"))
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    page = markdown(result)
    stem.with_suffix(".md").write_text(page, encoding="utf-8")
    print(page)
    return 0 if all(p["installable"] for p in platforms) else 1


if __name__ == "__main__":
    sys.exit(main())
