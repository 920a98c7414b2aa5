"""Every relative link in the Markdown a user reads resolves: README, CHANGELOG, docs/, examples/ and
the results READMEs name files and folders that exist in the tree (results folders are slimmed
and modules move; a link left behind is a dead end for a reader)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# [text](target) and [text]: target; images too. Targets with a scheme (https:, mailto:) are not files.
INLINE = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.MULTILINE)
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)


def markdown_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    for folder in ("docs", "examples", "configs", "benchmarks/results"):
        files += sorted((ROOT / folder).rglob("*.md"))
    return [f for f in files if f.is_file()]


def relative_targets(text: str) -> list[str]:
    """The link targets of ``text`` that name a path in the tree (no scheme, no pure anchor), code spans left out."""
    text = CODE.sub("", text)
    targets = INLINE.findall(text) + REFERENCE.findall(text)
    return [t for t in targets if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", t) and not t.startswith("#")]


def test_the_link_pattern_finds_inline_reference_and_image_links_but_not_code_or_urls():
    text = "[a](docs/x.md) ![g](img.gif) [b](https://x.org) [c](#anchor) `[d](no.md)`\n[e]: ../y.md\n"
    assert relative_targets(text) == ["docs/x.md", "img.gif", "../y.md"]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path: Path):
    missing = []
    for target in relative_targets(path.read_text(encoding="utf-8")):
        file_part = target.split("#", 1)[0]
        if file_part and not (path.parent / file_part).exists():
            missing.append(target)
    assert not missing, f"{path.relative_to(ROOT)} links to paths that do not exist: {missing}"
