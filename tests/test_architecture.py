"""Dependency direction and module docstrings of the memvault package, checked by parsing the source."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parents[1] / "memvault"
# Module paths relative to the package, without .py: "vault", "tools/memories", ...
MODULES = sorted(p.relative_to(PACKAGE).with_suffix("").as_posix() for p in PACKAGE.rglob("*.py"))

# Core modules know nothing of MCP or the HTTP layer; store sits between tools and the core.
NO_MCP_NO_UPPER_LAYERS = (
    "access",
    "area",
    "arguments",
    "bulkindex",
    "canonical",
    "check",
    "clock",
    "columns",
    "edits",
    "config",
    "embedders",
    "embeddings",
    "errors",
    "eviction",
    "files",
    "graph",
    "graphsearch",
    "heap",
    "index",
    "lexicon",
    "markdown",
    "names",
    "reconcile",
    "recall",
    "resources",
    "sessionfiles",
    "sessions",
    "sidecar",
    "snapshot",
    "supersede",
    "sweeps",
    "text",
    "tokens",
    "topics",
    "vault",
    "vectors",
    "watcher",
)
# The parts of the store know nothing of the Store that composes them.
BELOW_STORE = ("access", "area", "arguments", "reconcile", "snapshot", "supersede", "sweeps", "tokens")
# The pure basics: no I/O layers, no server, nothing of the store.
BASICS = ("clock", "names", "text", "markdown", "edits", "eviction", "errors", "graphsearch")
FORBIDDEN = {
    **{name: ("memvault.app", "memvault.tools", "mcp") for name in NO_MCP_NO_UPPER_LAYERS},
    **{name: ("memvault.app", "memvault.tools", "mcp", "memvault.store") for name in BELOW_STORE},
    **{
        name: ("memvault.app", "memvault.tools", "mcp", "memvault.store", "memvault.tokens",
               "memvault.vault", "memvault.sidecar", "memvault.files", "memvault.index", "numpy")
        for name in BASICS
    },
    "store": ("memvault.app", "memvault.tools"),
    # Helper processes import them: they must stay light (no server, no store).
    **{name: ("memvault.app", "memvault.tools", "mcp", "memvault.store", "memvault.embeddings")
       for name in ("loader", "folderscan", "helperio", "spawn")},
}  # fmt: skip
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400


def imported_modules(module: str) -> set[str]:
    """Every module a file imports, anywhere in it (functions and TYPE_CHECKING blocks included).

    ``from memvault import app`` and ``from . import app`` count as importing ``memvault.app``.
    """
    tree = ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # The package is flat, so a relative import is resolved from memvault itself.
                base = "memvault" + (f".{node.module}" if node.module else "")
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def violates(name: str, banned: str) -> bool:
    return name == banned or name.startswith(banned + ".")


def test_the_package_has_the_modules_this_test_guards() -> None:
    assert set(FORBIDDEN) <= set(MODULES), f"missing modules: {set(FORBIDDEN) - set(MODULES)}"


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_core_modules_do_not_import_upper_layers_or_mcp(module: str) -> None:
    bad = sorted(
        name for name in imported_modules(module) for banned in FORBIDDEN[module] if violates(name, banned)
    )
    assert not bad, f"memvault/{module}.py imports {bad}; dependencies must point one way (DESIGN.md)"


@pytest.mark.parametrize("helper", ["loader", "folderscan", "helperio", "spawn"])
def test_helper_modules_stay_light_at_run_time(helper: str) -> None:
    """Helper processes import these; what they pull in, directly or not, every helper pays for.
    ``spawn`` runs before the server's own imports, so it must not even pull in numpy."""
    heavy = ("mcp", "starlette", "memvault.store", "memvault.embeddings", "memvault.tokens")
    heavy += ("numpy", "memvault.vault") if helper == "spawn" else ()
    probe = (
        f"import sys, memvault.{helper}\n"
        f"heavy = {heavy!r}\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", f"importing memvault.{helper} also imports {out.stdout.strip()}"


@pytest.mark.parametrize("module", MODULES)
def test_modules_and_classes_stay_small_enough_to_read(module: str) -> None:
    source = (PACKAGE / f"{module}.py").read_text(encoding="utf-8")
    lines = source.count("\n")
    assert lines <= MAX_MODULE_LINES, f"memvault/{module}.py has {lines} lines; split it by concept"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            assert size <= MAX_CLASS_LINES, f"class {node.name} in memvault/{module}.py has {size} lines"


def test_import_parser_sees_every_form_of_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard itself must catch each spelling, or the tests above could never fail."""
    source = (
        "import mcp\n"
        "from mcp.server import x\n"
        "from memvault import tools\n"
        "from . import app\n"
        "from .store import Store\n"
        "def f():\n"
        "    import memvault.app\n"
    )
    (tmp_path / "probe.py").write_text(source)
    monkeypatch.setattr(f"{__name__}.PACKAGE", tmp_path)
    found = imported_modules("probe")
    for banned in ("mcp", "memvault.tools", "memvault.app", "memvault.store"):
        assert any(violates(name, banned) for name in found), banned
    assert not any(violates(name, "mcp") for name in {"mcpx", "memvault.mcp_like"})


@pytest.mark.parametrize("module", MODULES)
def test_every_module_starts_with_a_one_line_summary_docstring(module: str) -> None:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))
    first = tree.body[0] if tree.body else None
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant), (
        f"memvault/{module}.py must start with a docstring"
    )
    doc = first.value.value
    assert isinstance(doc, str)
    lines = doc.split("\n")
    summary = lines[0].strip()
    assert summary, f"memvault/{module}.py: the docstring's first line must say what the module is for"
    assert len(lines) == 1 or lines[1].strip() == "", (
        f"memvault/{module}.py: the summary must fit on one line (a blank line before any more text)"
    )
