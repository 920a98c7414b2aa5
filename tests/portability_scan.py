"""Find POSIX-only calls that would run on Windows: an AST scan of the project's Python sources.

A finding is a use of something Windows lacks or runs differently, outside a guard:

- a module Windows lacks (``import resource``, ``fcntl``, ``pwd``, ...);
- an ``os`` or ``signal`` name Windows lacks (``os.fork``, ``os.getuid``, ``os.sysconf``,
  ``os.O_DIRECTORY``, ``signal.SIGKILL``, ``signal.alarm``, ...: every ``signal`` name that is
  not in Windows's short list);
- ``os.kill``, which exists on Windows but does something else: signal 0 is ``CTRL_C_EVENT``
  (sent to a console group) and any other number calls ``TerminateProcess`` at once;
- ``os.open`` without a write flag (how a folder is opened for fsync: Windows refuses folders),
  ``open("/proc/...")`` or ``Path("/sys/...")``, ``ctypes.CDLL("...so...")``, and the ``fork`` /
  ``forkserver`` start methods.

Guarded means the code cannot run on Windows, or handles the failure there:

- inside the branch of an ``if`` (or conditional expression, or ``and``/``or`` operand) that is
  not taken on Windows, judged by evaluating the condition with ``sys.platform == "win32"``,
  ``os.name == "nt"``, ``platform.system() == "Windows"``, ``platform.libc_ver() == ("", "")``,
  ``hasattr(os | signal, name)`` answered from the lists below, ``os.path.exists("/proc/...")``
  false, and module-level constants made of these; a condition that names the platform but cannot
  be evaluated counts as a guard for both branches;
- after an ``if`` that is taken on Windows and leaves (``return``, ``raise``, ``pytest.skip``);
- in a test skipped on Windows (``@pytest.mark.skipif(<true on Windows>)``, directly or through a
  module-level name, or a module's ``pytestmark``);
- inside a ``try`` whose handlers catch the failure Windows raises (``ImportError`` for a module,
  ``AttributeError`` for a missing name, ``OSError`` for a folder or ``/proc``, ``ValueError``
  for a start method; ``Exception`` or a bare ``except`` catch all). ``os.kill`` raises nothing
  on Windows, so only a platform branch guards it.

``python -m tests.portability_scan [PATH ...]`` prints the findings (the project's folders by
default); tests/test_portability.py fails on any.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.portability_eval import UNKNOWN, WindowsEvaluator, dotted_name
from tests.portability_names import (
    CATCH_ALL,
    OS_POSIX_ONLY,
    POSIX_MODULES,
    PSEUDO_FILES,
    RAISES,
    SIGNAL_ON_WINDOWS,
    WHY,
    WRITE_FLAGS,
)

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("uavsim", "agents", "benchmarks", "tests", "examples")


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    api: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.api} ({self.why})"


class _Scanner(WindowsEvaluator, ast.NodeVisitor):
    def __init__(self, path: str, tree: ast.Module):
        self.path, self.findings = path, []
        self.modules: dict[str, str] = {}  # local name -> module it names ("_os" -> "os")
        self.imported: dict[str, str] = {}  # local name -> "module.name" (from module import name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.modules[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    self.imported[a.asname or a.name] = f"{node.module}.{a.name}"
        self.constants: dict[str, object] = {}  # module-level names whose value on Windows is known
        self.skip_marks: set[str] = set()  # module-level names of marks that skip on Windows
        self.guarded = 0  # > 0: the code being visited cannot run on Windows
        self.catching: list[frozenset[str]] = []  # exceptions caught by the enclosing try blocks
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                if self._skips_on_windows(stmt.value):
                    self.skip_marks.add(name)
                value = self.on_windows(stmt.value)
                if value is not UNKNOWN:
                    self.constants[name] = value
                if name == "pytestmark" and self._skips_on_windows(stmt.value):
                    self.guarded += 1

    # ------------------------------------------------------------------ findings
    def _report(self, node: ast.AST, api: str, kind: str) -> None:
        if self.guarded:
            return
        raises = RAISES[kind]
        if raises is not None and any(caught & (raises | CATCH_ALL) for caught in self.catching):
            return
        self.findings.append(Finding(self.path, node.lineno, api, WHY[kind]))

    def _check_name(self, node: ast.AST, name: str | None) -> None:
        if name is None:
            return
        parts = name.split(".")
        if parts[0] == "os" and len(parts) == 2:
            if parts[1] == "kill":
                self._report(node, name, "differs")
            elif parts[1] in OS_POSIX_ONLY:
                self._report(node, name, "name")
        elif parts[0] == "signal" and len(parts) >= 2:
            member = parts[2] if parts[1] == "Signals" and len(parts) > 2 else parts[1]  # signal.Signals.SIGKILL
            if member not in SIGNAL_ON_WINDOWS:
                self._report(node, name, "name")

    # ------------------------------------------------------------------ traversal
    def generic_visit(self, node: ast.AST) -> None:
        for _field, value in ast.iter_fields(node):
            if isinstance(value, list):
                if value and isinstance(value[0], ast.stmt):
                    self._visit_body(value)
                else:
                    for item in value:
                        if isinstance(item, ast.AST):
                            self.visit(item)
            elif isinstance(value, ast.AST):
                self.visit(value)

    def _visit_body(self, body: list[ast.stmt]) -> None:
        left = 0  # after an `if` taken on Windows that leaves, the rest of the block cannot run there
        for stmt in body:
            self.visit(stmt)
            if isinstance(stmt, ast.If) and self.on_windows(stmt.test) is True and stmt.body and _leaves(stmt.body[-1]):
                self.guarded += 1
                left += 1
        self.guarded -= left

    def _visit_branches(self, test: ast.AST, body, orelse) -> None:
        self.visit(test)
        value = self.on_windows(test)
        either = value is UNKNOWN and self._names_platform(test)
        for branch, runs in ((body, value is True or value is UNKNOWN), (orelse, value is False or value is UNKNOWN)):
            skip = either or not runs
            self.guarded += skip
            if isinstance(branch, list):
                self._visit_body(branch)
            elif branch is not None:
                self.visit(branch)
            self.guarded -= skip

    def visit_If(self, node: ast.If) -> None:
        self._visit_branches(node.test, node.body, node.orelse)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._visit_branches(node.test, node.body, node.orelse)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        stop = isinstance(node.op, ast.Or)
        decided = 0  # operands after one that decides the result on Windows are not evaluated there
        for value in node.values:
            self.visit(value)
            v = self.on_windows(value)
            if v is not UNKNOWN and bool(v) is stop and not decided:
                self.guarded += 1
                decided = 1
        self.guarded -= decided

    def visit_Try(self, node: ast.Try) -> None:
        caught = set()
        for handler in node.handlers:
            if handler.type is None:
                caught.add("*")
            for t in handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]:
                if t is not None:
                    caught.add((dotted_name(t) or "").rsplit(".", 1)[-1])
        self.catching.append(frozenset(caught))
        self._visit_body(node.body)
        self.catching.pop()
        for part in (node.handlers, node.orelse, node.finalbody):
            for item in part:
                self.visit(item)

    visit_TryStar = visit_Try

    def _visit_definition(self, node) -> None:
        skipped = any(self._skips_on_windows(d) for d in node.decorator_list)
        for field in ("decorator_list", "args", "returns", "bases", "keywords"):  # evaluated at import
            value = getattr(node, field, None)
            for item in value if isinstance(value, list) else [value]:
                if item is not None:
                    self.visit(item)
        self.guarded += skipped
        self._visit_body(node.body)
        self.guarded -= skipped

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _visit_definition

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if a.name.split(".")[0] in POSIX_MODULES:
                self._report(node, f"import {a.name}", "module")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and not node.level:
            if node.module.split(".")[0] in POSIX_MODULES:
                self._report(node, f"from {node.module} import ...", "module")
            for a in node.names:
                if (node.module == "os" and a.name in OS_POSIX_ONLY) or (
                    node.module == "signal" and a.name not in SIGNAL_ON_WINDOWS and a.name != "*"
                ):
                    self._report(node, f"from {node.module} import {a.name}", "from-name")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._check_name(node, self._qualified(node))
        if not isinstance(node.value, ast.Name):  # a.b.c: a.b is checked on its own only past a call
            self.visit(node.value)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.imported and self.imported[node.id] == "os.kill":
            self._report(node, "os.kill", "differs")

    def visit_Call(self, node: ast.Call) -> None:
        name = self._qualified(node.func)
        first = node.args[0] if node.args else None
        if name == "os.open" and len(node.args) >= 2:
            flags = {(dotted_name(n) or "").rsplit(".", 1)[-1] for n in ast.walk(node.args[1])}
            if not flags & WRITE_FLAGS:
                self._report(node, "os.open(..., read-only)", "folder")
        elif (
            name in ("io.open", "pathlib.Path", "pathlib.PurePosixPath")
            or isinstance(node.func, ast.Name)
            and node.func.id in ("open", "Path")
        ) and first is not None:
            if (
                isinstance(first, ast.Constant)
                and isinstance(first.value, str)
                and first.value.startswith(PSEUDO_FILES)
            ):
                self._report(node, f"{dotted_name(node.func)}({first.value!r})", "pseudo-file")
        elif name in ("ctypes.CDLL", "ctypes.PyDLL", "ctypes.cdll.LoadLibrary") and first is not None:
            if any(
                isinstance(c, ast.Constant) and isinstance(c.value, str) and ".so" in c.value for c in ast.walk(first)
            ):
                self._report(node, f"{name}(...so...)", "library")
        elif (name or "").endswith(("get_context", "set_start_method")) and isinstance(first, ast.Constant):
            if first.value in ("fork", "forkserver"):
                self._report(node, f"{name}({first.value!r})", "start-method")
        elif isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) == 2:
            attr = node.args[1]
            module = self._qualified(node.args[0])
            if module in ("os", "signal") and isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                self._check_name(node, f"{module}.{attr.value}")
        self.generic_visit(node)


def _leaves(stmt: ast.stmt) -> bool:
    """Whether ``stmt`` leaves the block: return, raise, continue, break, pytest.skip(), sys.exit()."""
    if isinstance(stmt, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
        return True
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and (dotted_name(stmt.value.func) or "") in ("pytest.skip", "sys.exit", "os._exit")
    )


def scan_source(source: str, path: str = "<string>") -> list[Finding]:
    """Findings in one file's source text."""
    tree = ast.parse(source, filename=path)
    scanner = _Scanner(path, tree)
    scanner.visit(tree)
    return scanner.findings


# Where text files are written or read for the user (run configs, results, reports): on Windows a text file
# without an encoding is in the locale's code page (cp1252, cp949, cp936), which cannot hold every character of
# a path or a table and which OmegaConf, reading YAML as UTF-8, does not read back. The tests' own files are ASCII.
PRODUCT = ("uavsim", "agents", "benchmarks", "examples")
TEXT_ENCODING_WHY = "text in the locale's code page on Windows: give encoding='utf-8'"


def text_without_encoding(source: str, path: str = "<string>") -> list[Finding]:
    """``Path.read_text`` / ``write_text`` and ``open`` in a text mode (a constant mode without ``b``, or
    none) called without ``encoding``, in one file's source text."""
    found = []
    for node in ast.walk(ast.parse(source, filename=path)):
        if not isinstance(node, ast.Call) or any(k.arg == "encoding" for k in node.keywords):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("read_text", "write_text"):
            found.append(Finding(path, node.lineno, f".{func.attr}()", TEXT_ENCODING_WHY))
        elif (isinstance(func, ast.Name) and func.id == "open") or dotted_name(func) == "io.open":
            mode = (
                node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
            )
            if mode is None or isinstance(mode, ast.Constant) and isinstance(mode.value, str) and "b" not in mode.value:
                found.append(Finding(path, node.lineno, "open() in text mode", TEXT_ENCODING_WHY))
    return found


def scan_paths(paths: list[Path], check=scan_source) -> list[Finding]:
    """``check``'s findings (``scan_source``: POSIX-only uses) in every ``*.py`` file under ``paths`` (files or
    folders), in path order."""
    files = sorted({f for p in paths for f in ([p] if p.is_file() else p.rglob("*.py"))})
    found = []
    for f in files:
        label = f.relative_to(ROOT).as_posix() if f.is_relative_to(ROOT) else str(f)
        found += check(f.read_text(encoding="utf-8"), label)
    return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    findings = scan_paths([Path(a) for a in args] or [ROOT / d for d in SCANNED])
    for f in findings:
        print(f)
    print(f"{len(findings)} unguarded POSIX-only use(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
