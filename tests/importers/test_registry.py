"""memvault.importers: every kind found by its name, the registry light, the seam one for all."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memvault import importers


@pytest.mark.parametrize("kind", importers.names(import_from=False))
def test_each_kind_is_found_by_its_name(kind: str) -> None:
    importer = importers.find(kind)
    assert issubclass(importer, importers.Importer) and importer.name == kind


def test_import_from_offers_the_other_tools_kinds_and_not_memvaults_own_export() -> None:
    assert importers.names() == ("claude-memory", "claude-md", "transcripts", "notes", "memory-jsonl")
    assert "export" in importers.names(import_from=False)


def test_an_unknown_kind_is_refused_naming_the_kinds() -> None:
    with pytest.raises(LookupError, match="claude-md"):
        importers.find("evernote")


def test_the_registry_imports_no_importer_until_one_is_asked_for() -> None:
    """Building the command line (a hook's start) reads the registry; the importers stay unloaded."""
    probe = (
        "import sys, memvault.importers\n"
        "print(sorted(m for m in sys.modules if m.startswith(('memvault.importers.', 'memvault.ops'))"
        " and m != 'memvault.importers.base'))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
