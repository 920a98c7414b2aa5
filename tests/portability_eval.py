"""What an expression is worth on Windows: the platform-guard reasoning of `tests.portability_scan`.

`WindowsEvaluator.on_windows` evaluates a condition as Windows would (``sys.platform == "win32"``,
``os.name == "nt"``, ``hasattr(os, ...)`` from the lists of `tests.portability_names`, ...), and
`_skips_on_windows` tells whether a pytest mark skips there. The scanner subclasses it."""

from __future__ import annotations

import ast

from tests.portability_names import OS_POSIX_ONLY, PSEUDO_FILES, SIGNAL_ON_WINDOWS


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()


def dotted_name(node: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


class WindowsEvaluator:
    """Needs ``self.modules``, ``self.imported`` (how the file names modules), ``self.constants``
    and ``self.skip_marks`` (module-level names known on Windows), set by the subclass."""

    # ------------------------------------------------------------------ names
    def _qualified(self, node: ast.AST) -> str | None:
        """``os.kill`` for ``os.kill`` / ``_os.kill`` / ``kill`` (from os import kill)."""
        dotted = dotted_name(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head in self.imported:
            return self.imported[head] + (f".{rest}" if rest else "")
        if head in self.modules:
            return self.modules[head] + (f".{rest}" if rest else "")
        return None

    # ------------------------------------------------------------------ evaluation on Windows
    def on_windows(self, node: ast.AST) -> object:
        """The value of expression ``node`` on Windows, or UNKNOWN."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.Tuple, ast.List)):
            items = tuple(self.on_windows(e) for e in node.elts)
            return UNKNOWN if any(i is UNKNOWN for i in items) else items
        if isinstance(node, ast.Name) and node.id not in self.modules and node.id not in self.imported:
            return self.constants.get(node.id, UNKNOWN)
        name = self._qualified(node)
        if name == "sys.platform":
            return "win32"
        if name == "os.name":
            return "nt"
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            value = self.on_windows(node.operand)
            return UNKNOWN if value is UNKNOWN else not value
        if isinstance(node, ast.BoolOp):
            return self._bool_op(node)
        if isinstance(node, ast.Compare):
            return self._compare(node)
        if isinstance(node, ast.Subscript):
            value, index = self.on_windows(node.value), self.on_windows(node.slice)
            try:
                return UNKNOWN if UNKNOWN in (value, index) else value[index]
            except (TypeError, IndexError, KeyError):
                return UNKNOWN
        if isinstance(node, ast.Call):
            return self._call(node)
        return UNKNOWN

    def _bool_op(self, node: ast.BoolOp) -> object:
        stop = isinstance(node.op, ast.Or)  # the value that decides an `or` (an `and`: False)
        unknown = False
        for value in node.values:
            v = self.on_windows(value)
            if v is UNKNOWN:
                unknown = True
            elif bool(v) is stop:
                return v
        return UNKNOWN if unknown else (not stop)

    def _compare(self, node: ast.Compare) -> object:
        left = self.on_windows(node.left)
        ops = {
            ast.Eq: lambda a, b: a == b,
            ast.NotEq: lambda a, b: a != b,
            ast.In: lambda a, b: a in b,
            ast.NotIn: lambda a, b: a not in b,
        }
        for op, right_node in zip(node.ops, node.comparators):
            right = self.on_windows(right_node)
            if left is UNKNOWN or right is UNKNOWN or type(op) not in ops:
                return UNKNOWN
            try:
                if not ops[type(op)](left, right):
                    return False
            except TypeError:
                return UNKNOWN
            left = right
        return True

    def _call(self, node: ast.Call) -> object:
        name = self._qualified(node.func)
        args = [self.on_windows(a) for a in node.args]
        if name == "platform.system":
            return "Windows"
        if name == "platform.libc_ver":
            return ("", "")
        if name in ("os.path.exists", "os.path.isdir", "os.path.isfile") and args and isinstance(args[0], str):
            return False if args[0].startswith(PSEUDO_FILES) else UNKNOWN
        if isinstance(node.func, ast.Name) and node.func.id == "hasattr" and len(node.args) == 2:
            module, attr = self._qualified(node.args[0]), args[1]
            if module == "os" and isinstance(attr, str):
                return attr not in OS_POSIX_ONLY
            if module == "signal" and isinstance(attr, str):
                return attr in SIGNAL_ON_WINDOWS
            return UNKNOWN
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("startswith", "endswith", "lower", "upper"):
            receiver = self.on_windows(node.func.value)
            if isinstance(receiver, str) and all(a is not UNKNOWN for a in args):
                return getattr(receiver, node.func.attr)(*args)
        return UNKNOWN

    def _names_platform(self, node: ast.AST) -> bool:
        for sub in ast.walk(node):
            name = self._qualified(sub) if isinstance(sub, (ast.Attribute, ast.Name)) else None
            if name in ("sys.platform", "os.name") or (name or "").startswith("platform."):
                return True
            if isinstance(sub, ast.Name) and sub.id in self.constants:
                return True
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "hasattr":
                return True
        return False

    def _skips_on_windows(self, node: ast.AST) -> bool:
        """Whether ``node`` is a pytest mark (or a list of them) that skips on Windows."""
        if isinstance(node, (ast.List, ast.Tuple)):
            return any(self._skips_on_windows(e) for e in node.elts)
        if isinstance(node, ast.Name):
            return node.id in self.skip_marks
        if isinstance(node, ast.Call) and (dotted_name(node.func) or "").endswith("mark.skipif") and node.args:
            return self.on_windows(node.args[0]) is True
        return False
