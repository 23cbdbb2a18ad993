"""A determinism linter for orchestration bodies: ``python -m durabl lint-orchestrations``.

It reads Python source (it never imports it), finds the bodies registered with
``define`` (``@<anything>.define(...)`` on a function, or ``<anything>.define("type", fn)``
with a function of the same module), and reports direct calls in them whose result differs
between runs (clock reads, randomness, fresh ids, I/O) outside the function given to
``octx.step``. On resume a body runs again from the top, so such a value changes under a
journal that was written with the old one.

It is a static check of direct calls: a helper the body calls is not followed. A line with
``# durabl: ignore`` is skipped.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

IGNORE_MARK = "durabl: ignore"

STEP_HINT = "move it into an octx.step(...) so its result is journaled"
NOW_HINT = "use octx.now() (journaled), or read the clock inside an octx.step(...)"
UUID_HINT = "use octx.uuid(label) (stable across resumes), or move it into an octx.step(...)"

_EXACT = {
    "time.time": NOW_HINT,
    "time.time_ns": NOW_HINT,
    "time.monotonic": NOW_HINT,
    "time.monotonic_ns": NOW_HINT,
    "time.perf_counter": NOW_HINT,
    "time.perf_counter_ns": NOW_HINT,
    "time.localtime": NOW_HINT,
    "time.gmtime": NOW_HINT,
    "datetime.datetime.now": NOW_HINT,
    "datetime.datetime.utcnow": NOW_HINT,
    "datetime.datetime.today": NOW_HINT,
    "datetime.date.today": NOW_HINT,
    "uuid.uuid1": UUID_HINT,
    "uuid.uuid4": UUID_HINT,
    "os.urandom": STEP_HINT,
    "os.getrandom": STEP_HINT,
    "builtins.open": STEP_HINT,
    "builtins.input": STEP_HINT,
}
_PREFIXES = {
    "random": STEP_HINT,
    "secrets": STEP_HINT,
    "requests": STEP_HINT,
    "httpx": STEP_HINT,
    "urllib.request": STEP_HINT,
    "http.client": STEP_HINT,
    "socket": STEP_HINT,
    "subprocess": STEP_HINT,
}
_BUILTINS = {"open", "input"}


@dataclass(frozen=True)
class Finding:
    """One call that makes a body nondeterministic."""

    path: str
    line: int
    col: int
    call: str
    body: str
    hint: str

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line}:{self.col}: {self.call}() in orchestration body "
            f"{self.body!r} gives a different result on resume; {self.hint}"
        )


def _hint_for(name: str) -> str | None:
    if name in _EXACT:
        return _EXACT[name]
    for prefix, hint in _PREFIXES.items():
        if name == prefix or name.startswith(prefix + "."):
            return hint
    return None


class _Imports:
    """Local names -> the dotted names they stand for, from the module's imports."""

    def __init__(self, tree: ast.Module) -> None:
        self.names: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.names[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.names[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name != "*":
                        self.names[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def resolve(self, func: ast.expr) -> str | None:
        """The dotted name a call target stands for, or None."""
        parts: list[str] = []
        while isinstance(func, ast.Attribute):
            parts.append(func.attr)
            func = func.value
        if not isinstance(func, ast.Name):
            return None
        base = self.names.get(func.id)
        if base is None:
            if parts or func.id not in _BUILTINS:
                return None
            base = f"builtins.{func.id}"
        return ".".join([base, *reversed(parts)])


_DECLARERS = ("define", "orchestration")  # Orchestrator.define, durabl_django.orchestration


def _is_define(node: ast.expr) -> bool:
    func = node.func if isinstance(node, ast.Call) else node
    if isinstance(func, ast.Attribute):
        return func.attr in _DECLARERS
    return isinstance(func, ast.Name) and func.id == "orchestration"


def _step_fn_arg(call: ast.Call) -> ast.expr | None:
    """The function argument of an ``<x>.step(name, fn, ...)`` call."""
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "step"):
        return None
    if len(call.args) >= 2:
        return call.args[1]
    for keyword in call.keywords:
        if keyword.arg == "fn":
            return keyword.value
    return None


Function = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


def _bodies(tree: ast.Module) -> Iterator[Function]:
    """Every function registered with ``define`` in this module."""
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.setdefault(node.name, node)
            if any(_is_define(d) for d in node.decorator_list):
                yield node
    seen: set[int] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _is_define(node)):
            continue
        candidates = [*node.args[1:2], *(k.value for k in node.keywords if k.arg == "body")]
        for arg in candidates:
            target: Function | None = None
            if isinstance(arg, ast.Lambda):
                target = arg
            elif isinstance(arg, ast.Name):
                target = functions.get(arg.id)
            if target is not None and id(target) not in seen:
                seen.add(id(target))
                if not any(_is_define(d) for d in getattr(target, "decorator_list", ())):
                    yield target


def _body_name(fn: Function) -> str:
    return "<lambda>" if isinstance(fn, ast.Lambda) else fn.name


def _check_body(fn: Function, imports: _Imports, path: str, lines: list[str]) -> Iterator[Finding]:
    # Functions handed to a step run inside it: nested defs passed by name, and lambdas.
    exempt_ids: set[int] = set()
    exempt_names: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            arg = _step_fn_arg(node)
            if isinstance(arg, ast.Name):
                exempt_names.add(arg.id)
            elif arg is not None:
                exempt_ids.add(id(arg))

    def visit(node: ast.AST) -> Iterator[Finding]:
        if id(node) in exempt_ids:
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in exempt_names:
            return
        if isinstance(node, ast.Call):
            name = imports.resolve(node.func)
            hint = _hint_for(name) if name else None
            line = lines[node.lineno - 1] if node.lineno <= len(lines) else ""
            if name and hint and IGNORE_MARK not in line:
                yield Finding(path, node.lineno, node.col_offset + 1, name, _body_name(fn), hint)
        for child in ast.iter_child_nodes(node):
            yield from visit(child)

    for part in fn.body if isinstance(fn.body, list) else [fn.body]:
        yield from visit(part)


def lint_source(source: str, path: str = "<string>") -> list[Finding]:
    """Findings in one module's source (``SyntaxError`` if it does not parse)."""
    tree = ast.parse(source, filename=path)
    imports = _Imports(tree)
    lines = source.splitlines()
    findings: list[Finding] = []
    for body in _bodies(tree):
        findings.extend(_check_body(body, imports, path, lines))
    return sorted(set(findings), key=lambda f: (f.line, f.col, f.call))


def count_bodies(source: str) -> int:
    return sum(1 for _ in _bodies(ast.parse(source)))


def python_files(paths: Iterable[str]) -> Iterator[str]:
    """The ``.py`` files at or under ``paths`` (``FileNotFoundError`` for a missing one)."""
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
                for name in sorted(files):
                    if name.endswith(".py"):
                        yield os.path.join(root, name)
        elif os.path.isfile(path):
            yield path
        else:
            raise FileNotFoundError(path)
