"""Cold loads of large tokens in helper processes, so that parsing and indexing use every core.

A token with no usable snapshot must read, parse and index every file: about 10 s of Python
for 100,000 memories, all under one GIL. Above ``PARALLEL_MIN`` files the store splits the
list and starts one helper per share (``memvault.load.loader`` run by a fresh interpreter, see
memvault.load.processes: no fork of a threaded server). Each helper reads its files and parses
them as the store would, indexes them all at once (``bulkindex.arrays_of``: the terms
``Index.upsert`` would give, counted by numpy), and writes back its part in the index
snapshot's format (numpy arrays, never pickle).
The store merges the parts (``merge_parts``) and restores the areas from them as from a
snapshot. A helper that cannot start or fails costs only time: the store then loads
those files itself.

Protocol: a JSON request on stdin, ``{"dir": <token folder>, "hot": [id, ...], "archive": [id, ...]}``;
arrays on stdout (memvault.load.pipes); exit status 0. Anything else is a failure.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import operator
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from memvault.disk.files import file_change
from memvault.disk.markdown import Fields, Memory, memory_fields
from memvault.disk.vault import Vault
from memvault.load import processes, snapshot
from memvault.load.pipes import Arrays, answer, run
from memvault.search.bulkindex import arrays_of
from memvault.search.columns import pack_strings, prefixed, unpack_strings
from memvault.search.indexarrays import postings_of

__all__ = [
    "PARALLEL_MIN",
    "Helpers",
    "build_part",
    "fields_of",
    "helpers_for",
    "merge_parts",
    "read_and_parse",
]

log = logging.getLogger("memvault")

PARALLEL_MIN = 20_000  # files to parse before helpers pay for their start (~0.3 s each)
MAX_HELPERS = 4
READ_BATCH = 500  # files read before they are parsed (read_and_parse)
AREAS = (("hot", False), ("archive", True))
_ARCHIVED = 9  # Fields' archived
_CONCATENATED = ("ids.blob", "ids.len", "titles.blob", "titles.len", "dl", "doc_term_counts")


def helpers_for(files: int, setting: int | None) -> int:
    """How many helpers to start for ``files`` files to parse (``setting``: None means one per
    CPU this process may use, at most MAX_HELPERS, and none on a single CPU)."""
    if files < PARALLEL_MIN:
        return 0
    if setting is None:
        cpus = processes.usable_cpus()
        setting = min(MAX_HELPERS, cpus) if cpus > 1 else 0
    return max(0, min(setting, files // (PARALLEL_MIN // 4)))


def read_and_parse(vault: Vault, files: Sequence[tuple[str, bool]]) -> list[Fields]:
    """The files as the store reads them, each as its Memory's fields (those that cannot be read
    are left out): columns are made of them, and a Memory object each cost as much again.

    A batch is read, then parsed: on a virtual machine, a system call between two parses made
    them a fifth slower (50,000 files, same process), which batching makes up for."""
    parsed = []
    for start in range(0, len(files), READ_BATCH):
        batch = files[start : start + READ_BATCH]
        folder = vault.opened()  # once a batch: each file is then one open, not three
        try:
            reads = [(id, archived, vault.read_scanned(id, archived, folder)) for id, archived in batch]
        finally:
            if folder is not None:
                folder.close()
        for id, archived, read in reads:
            if read is not None:
                raw, st = read
                parsed.append(
                    memory_fields(raw, id, archived, st.st_mtime_ns, st.st_size, file_change(st), False)
                )
    return parsed


_FIELDS_OF = operator.attrgetter(*(f.name for f in dataclasses.fields(Memory)))


def fields_of(memory: Memory) -> Fields:
    """A Memory's fields, as memory_fields gives them: what build_part takes."""
    return cast("Fields", _FIELDS_OF(memory))


def build_part(rows: Iterable[Fields]) -> Arrays:
    """Memories (as their fields: ``fields_of`` a Memory) indexed and encoded in the snapshot's
    format (``hot.index.*``, ``hot.memories.*``, ...)."""
    by_area: dict[bool, list[Fields]] = {False: [], True: []}
    for row in rows:
        by_area[row[_ARCHIVED]].append(row)
    out: Arrays = {}
    for name, archived in AREAS:
        listed = by_area[archived]  # arrays_of keeps their order: the id column is the index's
        index = arrays_of([(r[0], r[1], r[2], r[7]) for r in listed])  # id, title, content, tags
        # The postings too, sorted here, on the helpers' cores: the server only joins the parts'.
        index["postings"], index["term_postings"] = postings_of(
            index["doc_terms"], index["doc_term_counts"], len(index["terms.len"])
        )
        out.update(snapshot.area_arrays(name, index, snapshot.fields_to_columns(listed)))
    return out


def merge_parts(parts: Sequence[Mapping[str, npt.NDArray[Any]]]) -> Arrays:
    """One part from several (disjoint memories): columns are concatenated, and each part's term
    ids are mapped into one vocabulary."""
    if not parts:
        return build_part(())
    out: Arrays = {}
    for name, _ in AREAS:
        out.update(_merge_index([prefixed(p, f"{name}.index.") for p in parts], f"{name}.index."))
        memories = [prefixed(p, f"{name}.memories.") for p in parts]
        for key in memories[0]:
            if key == "version":
                if any(m[key].tolist() != memories[0][key].tolist() for m in memories):
                    raise ValueError("parts from different parser versions")
                out[f"{name}.memories.{key}"] = np.array(memories[0][key])  # not a view of a helper's answer
            else:
                out[f"{name}.memories.{key}"] = np.concatenate([m[key] for m in memories])
    return out


def _merge_index(parts: Sequence[Mapping[str, npt.NDArray[Any]]], prefix: str) -> Arrays:
    terms: list[str] = []
    termid: dict[str, int] = {}
    doc_terms = []
    mappings = []  # each part's term ids -> the merged ones
    for part in parts:
        mapping = np.zeros(max(1, len(part["terms.len"])), dtype=np.uint32)
        mappings.append(mapping)
        for i, term in enumerate(unpack_strings(part["terms.blob"], part["terms.len"])):
            if term:  # "" is a freed id, which no document refers to
                tid = termid.get(term)
                if tid is None:
                    tid = termid[term] = len(terms)
                    terms.append(term)
                mapping[i] = tid
        flat = np.asarray(part["doc_terms"], dtype=np.uint32)
        doc_terms.append((mapping[flat >> 8] << np.uint32(8)) | (flat & np.uint32(0xFF)))
    out = {key: np.concatenate([p[key] for p in parts]) for key in _CONCATENATED}
    out["doc_terms"] = np.concatenate(doc_terms).astype(np.uint32)
    out["terms.blob"], out["terms.len"] = pack_strings(terms)
    if all("postings" in part for part in parts):
        out["postings"], out["term_postings"] = _merged_postings(parts, mappings, len(terms))
    return {prefix + key: value for key, value in out.items()}


def _merged_postings(
    parts: Sequence[Mapping[str, npt.NDArray[Any]]], mappings: Sequence[npt.NDArray[np.uint32]], nterms: int
) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.int64]]:
    """``postings_of`` the merged index, from each part's own postings: a term's postings are its
    postings in each part in turn, the part's documents numbered after the parts before it (each
    part's are in document order already). Sorting 3.5 million entries again took the server
    0.2-0.3 s, with the helpers' cores idle."""
    groups, owners, counts, starts, shifted = [], [], [], [], []
    offset = base = 0
    for number, (part, mapping) in enumerate(zip(parts, mappings, strict=True)):
        count = np.asarray(part["term_postings"], dtype=np.int64)
        groups.append(mapping[: len(count)].astype(np.int64))
        owners.append(np.full(len(count), number, dtype=np.int64))
        counts.append(count)
        starts.append(base + np.cumsum(count) - count)
        shifted.append(np.asarray(part["postings"], dtype=np.uint32) + np.uint32(offset << 8))
        offset += len(part["dl"])
        base += int(count.sum())
    group, count, start = (np.concatenate(a) for a in (groups, counts, starts))
    order = np.lexsort((np.concatenate(owners), group))  # by term, then part
    count, start = count[order], start[order]
    ends = np.cumsum(count)
    taken = np.repeat(start - (ends - count), count) + np.arange(base, dtype=np.int64)
    postings = np.concatenate(shifted)[taken] if base else np.zeros(0, dtype=np.uint32)
    term_postings = np.zeros(nterms, dtype=np.int64)
    np.add.at(term_postings, group[order], count)
    return postings, term_postings


# ---------------------------------------------------------------------------- the store's side


class Helpers:
    """Helper processes, started before their work is known: a store starts them as soon as its
    scan has listed ``PARALLEL_MIN`` files, and their interpreters start and import (0.3-0.4 s
    each) on the core the scan leaves free. Those not given work are stopped on exit."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[bytes] | None] = []  # None: could not be started

    def __enter__(self) -> Helpers:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
        self._procs = []

    def start(self, count: int) -> None:
        """At least ``count`` helpers running (or failed to start)."""
        while len(self._procs) < count:
            try:
                self._procs.append(
                    subprocess.Popen(
                        processes.command("loader"),
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        env=processes.environment(),
                    )
                )
            except OSError as exc:
                log.warning(
                    "could not start a loader process (%s); loading in this process", type(exc).__name__
                )
                self._procs.append(None)

    def load(self, token_dir: Path, files: Sequence[tuple[str, bool]]) -> list[Arrays] | None:
        """``files`` read, parsed and indexed by the helpers started, in equal shares; None if
        any of them failed. Each helper takes one share."""
        procs, self._procs = self._procs, []
        n, helpers = len(files), len(procs)
        shares = [files[i * n // helpers : (i + 1) * n // helpers] for i in range(helpers)]
        with ThreadPoolExecutor(max_workers=max(1, helpers), thread_name_prefix="memvault-loader") as pool:
            results = list(
                pool.map(lambda job: _ask(job[0], token_dir, job[1]), zip(procs, shares, strict=True))
            )
        if not results or any(r is None for r in results):
            return None
        return [r for r in results if r is not None]


def _ask(
    proc: subprocess.Popen[bytes] | None, token_dir: Path, files: Sequence[tuple[str, bool]]
) -> Arrays | None:
    if proc is None:
        return None
    # Two lists of names: a pair per file took three times as long to write and five to read.
    hot = [id for id, archived in files if not archived]
    request = json.dumps({"dir": str(token_dir), "hot": hot, "archive": [id for id, a in files if a]})
    stdout, stderr = proc.communicate(request.encode("utf-8"))
    return answer("a loader process", "loading in this process", proc.returncode, stdout, stderr)


# ---------------------------------------------------------------------------- the helper's side


def main() -> int:
    return run(lambda: _part(json.loads(sys.stdin.buffer.read())))


def _part(request: dict[str, Any]) -> Arrays:
    vault = Vault(Path(request["dir"]))
    files = [(id, False) for id in request["hot"]] + [(id, True) for id in request["archive"]]
    rows = read_and_parse(vault, files)
    part = build_part(rows)
    part["parsed"] = np.array([len(rows)], dtype=np.int64)
    return part


if __name__ == "__main__":
    sys.exit(main())
