"""Cold loads in helper processes: the same memories and index as a load in the server process."""

from __future__ import annotations

import dataclasses
import logging
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from memvault.disk.vault import Vault
from memvault.load import loader, processes
from memvault.load.snapshot import areas_from as _areas_from
from memvault.ops.service import Service
from memvault.search.columns import prefixed
from memvault.search.index import Index
from memvault.search.indexarrays import add_postings

pytestmark = pytest.mark.anyio

QUERIES = [
    "harbour",
    "tide",
    "report 7",
    "rain",
    "sunny harbour",
    "nordic",
    "übung",
    "東京",
    "harbr",
    "archived",
]


def _fill(folder: Path, n: int) -> None:
    (folder / "archive").mkdir(parents=True)
    (folder / "sub").mkdir()
    weather = ["rain", "sunny", "fog", "storm"]
    for i in range(n):
        text = f"# Harbour note {i}\n\nThe tide report {i} says {weather[i % 4]}; Übung {i % 3} in 東京.\n"
        if i % 5 == 0:
            text = f"---\npriority: P{i % 3}\ntags: [nordic, t{i % 4}]\nimportance: 0.{i % 10}\n---\n" + text
        where = folder / "archive" if i % 7 == 0 else folder / "sub" if i % 11 == 0 else folder
        (where / f"note-{i}.md").write_text(text, encoding="utf-8")
    (folder / "archive" / "old.md").write_text("# Old\n\nan archived memory\n", encoding="utf-8")
    (folder / "broken.md").write_bytes(b"---\npriority: [\n---\n# Broken\n\nbad yaml \xff\n")


def _answers(index: Index) -> list[list[tuple[float, str]]]:
    """Hits with their scores; ties in any order (document numbers differ with load order)."""
    return [sorted((-round(h.score, 5), h.id) for h in index.search(q, limit=200)[0]) for q in QUERIES]


def _same_areas(a, b) -> None:
    def same(memories):  # a copied folder's files have other inodes and ctimes (Memory.change)
        return {id: dataclasses.replace(m, change=0) for id, m in memories.items()}

    for x, y in zip(a, b, strict=True):
        assert same(x.memories) == same(y.memories)
        assert _answers(x.index) == _answers(y.index)


def test_helpers_only_for_large_loads_and_never_on_one_cpu(monkeypatch):
    assert loader.helpers_for(loader.PARALLEL_MIN - 1, 4) == 0
    assert loader.helpers_for(100_000, 0) == 0
    assert loader.helpers_for(100_000, 3) == 3
    assert loader.helpers_for(loader.PARALLEL_MIN, 4) == 4
    monkeypatch.setattr(processes.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert loader.helpers_for(100_000, None) == 0
    monkeypatch.setattr(processes.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert loader.helpers_for(100_000, None) == loader.MAX_HELPERS


def test_a_container_cpu_quota_limits_the_helpers(tmp_path, monkeypatch):
    monkeypatch.setattr(processes.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    cpu_max = tmp_path / "cpu.max"
    cpu_max.write_text("150000 100000\n")  # docker run --cpus=1.5
    assert processes.usable_cpus(cpu_max) == 2
    cpu_max.write_text("50000 100000\n")
    assert processes.usable_cpus(cpu_max) == 1
    cpu_max.write_text("max 100000\n")
    assert processes.usable_cpus(cpu_max) == 8
    assert processes.usable_cpus(tmp_path / "missing") == 8
    cpu_max.write_text("garbage")
    assert processes.usable_cpus(cpu_max) == 8


def test_merged_parts_equal_one_part(tmp_path):
    folder = tmp_path / "alice"
    _fill(folder, 60)
    vault = Vault(folder)
    memories = loader.read_and_parse(vault, [(id, archived) for id, archived, _ in vault.scan()])
    whole = _areas_from(loader.merge_parts([loader.build_part(memories)]))
    split = _areas_from(loader.merge_parts([loader.build_part(memories[i::3]) for i in range(3)]))
    _same_areas(whole, split)
    assert len(whole[1].memories) == 10  # 9 numbered + old.md
    assert _areas_from(loader.merge_parts([]))[0].memories == {}


def _load_in_helpers(token_dir, files, helpers):
    with loader.Helpers() as pool:
        pool.start(helpers)
        return pool.load(token_dir, files)


@pytest.mark.slow
def test_helper_processes_read_what_the_store_reads(tmp_path):
    folder = tmp_path / "alice"
    _fill(folder, 40)
    vault = Vault(folder)
    files = [(id, archived) for id, archived, _ in vault.scan()]
    parts = _load_in_helpers(folder, files, 2)
    assert parts is not None and len(parts) == 2
    assert sum(int(p.pop("parsed")[0]) for p in parts) == len(files)
    local = loader.build_part(loader.read_and_parse(vault, files))
    _same_areas(_areas_from(loader.merge_parts(parts)), _areas_from(loader.merge_parts([local])))


@pytest.mark.slow
async def test_a_cold_load_with_helpers_equals_one_without(make_settings, vault_root, monkeypatch):
    _fill(vault_root / "alice", 80)
    copy = vault_root.parent / "copy"
    shutil.copytree(vault_root, copy)  # keeps mtimes
    serial_service = Service(make_settings(root=copy, load_processes=0))
    serial = serial_service.store
    monkeypatch.setattr(loader, "PARALLEL_MIN", 8)
    monkeypatch.setattr("memvault.load.snapshot.MIN_MEMORIES", 0)
    parallel_service = Service(make_settings(load_processes=2))
    parallel = parallel_service.store
    try:
        one = await serial.state("alice")
        two = await parallel.state("alice")
        assert parallel_service.registry.parses == serial_service.registry.parses == 82
        _same_areas((one.hot, one.archive), (two.hot, two.archive))
        assert two.snapshot_parts is not None  # written as the snapshot, not encoded again
        await parallel_service.idle()
        assert (vault_root / "alice" / ".memvault" / "snapshot.npz").is_file()
        assert two.snapshot_parts is None
    finally:
        await serial_service.close()
        await parallel_service.close()
    restarted_service = Service(make_settings())
    restarted = restarted_service.store
    try:
        again = await restarted.state("alice")
        assert restarted_service.registry.parses == 0  # from the snapshot the helpers' parts made
        _same_areas((one.hot, one.archive), (again.hot, again.archive))
        found = await restarted.find("alice", query="nordic", limit=100)
        assert found.total == 16 - 3  # every fifth file, less those in the archive
    finally:
        await restarted_service.close()


CUT_OFF = (  # the start of an answer whose header says 99 bytes: 2 follow
    "import sys; sys.stdin.buffer.read(); "
    "sys.stdout.buffer.write(b'memvault-arrays-1\\n' + bytes([99]) + bytes(7) + b'[[')"
)


@pytest.mark.parametrize(
    ("helper", "said"),
    [
        ("missing", "could not start a loader process"),
        # A helper that exits 0 with a cut-off answer costs time, not the load: the tool call that
        # loads the token still answers.
        ("cut off", "a loader process gave unreadable output"),
    ],
)
async def test_a_failing_helper_means_loading_in_process(
    make_settings, vault_root, monkeypatch, caplog, helper, said
):
    _fill(vault_root / "alice", 30)
    monkeypatch.setattr(loader, "PARALLEL_MIN", 8)
    if helper == "missing":
        monkeypatch.setattr(loader.sys, "executable", sys.executable + "-missing")
    else:
        monkeypatch.setattr(loader.processes, "command", lambda module: [sys.executable, "-c", CUT_OFF])
    service = Service(make_settings(load_processes=2))
    store = service.store
    try:
        with caplog.at_level(logging.WARNING, logger="memvault"):
            state = await store.state("alice")
        assert len(state.hot.memories) + len(state.archive.memories) == 32
        assert said in caplog.text
        assert str(vault_root) not in caplog.text
    finally:
        await service.close()


@pytest.mark.slow
def test_the_helper_refuses_a_bad_request(tmp_path):
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "memvault.load.loader"], input=b"not json", capture_output=True, check=False
    )
    assert done.returncode != 0
    assert done.stderr.decode().strip() == "JSONDecodeError"  # logged by the store: a kind, no path
    parts = _load_in_helpers(tmp_path / "missing", [("a.md", False)], 1)  # unreadable: skipped
    assert parts is not None and len(parts) == 1
    part = parts[0]
    assert int(part["parsed"][0]) == 0
    assert np.asarray(part["hot.index.doc_term_counts"]).size == 0


@pytest.mark.slow
async def test_helpers_start_while_the_scan_goes_on_and_stop_if_it_fails(
    make_settings, vault_root, monkeypatch
):
    _fill(vault_root / "alice", 30)
    monkeypatch.setattr(loader, "PARALLEL_MIN", 8)
    listed, fail = 0, False
    real_walk, real_start = Vault._files, loader.Helpers.start
    started_at: list[int] = []
    spawned: list = []

    def counting_walk(self, *args, **kwargs):
        nonlocal listed
        for found in real_walk(self, *args, **kwargs):
            listed += 1
            yield found
            if fail and listed == 20:
                raise OSError("the disk went away")

    def recording_start(self, count):
        started_at.append(listed)
        real_start(self, count)
        spawned.extend(p for p in self._procs if p not in spawned)

    monkeypatch.setattr(Vault, "_files", counting_walk)
    monkeypatch.setattr(loader.Helpers, "start", recording_start)
    service = Service(make_settings(load_processes=2))
    store = service.store
    try:
        state = await store.state("alice")
        assert len(state.hot.memories) + len(state.archive.memories) == 32
        assert started_at[0] == 8 < listed  # when the scan had listed PARALLEL_MIN files
        assert service.registry.parses == 32 and len(spawned) == 2
    finally:
        await service.close()

    fail, listed = True, 0
    started_at.clear()
    spawned.clear()
    (vault_root / "alice" / ".memvault" / "snapshot.npz").unlink(missing_ok=True)
    service = Service(make_settings(load_processes=2))
    store = service.store
    try:
        with pytest.raises(OSError):
            await store.state("alice")
        assert started_at == [8] and len(spawned) == 2
        assert all(p.returncode is not None for p in spawned)  # stopped and reaped, not left behind
    finally:
        await service.close()


@pytest.mark.parametrize("shares", [1, 2, 3, 7])
def test_merged_parts_postings_are_the_ones_sorted_out_of_the_merged_term_lists(tmp_path, shares):
    """The helpers sort their own parts' postings; joined, they are what sorting the merged index's
    term lists gives (the server did that before), byte for byte."""
    folder = tmp_path / "alice"
    _fill(folder, 60)
    vault = Vault(folder)
    rows = loader.read_and_parse(vault, [(id, archived) for id, archived, _ in vault.scan()])
    parts = [loader.build_part(rows[i::shares]) for i in range(shares)] + [loader.build_part(())]
    merged = loader.merge_parts(parts)
    unsorted = [{k: v for k, v in p.items() if not k.endswith("postings")} for p in parts]
    bare = loader.merge_parts(unsorted)
    for name in ("hot", "archive"):
        want = add_postings(prefixed(bare, f"{name}.index."))
        assert "postings" not in prefixed(bare, f"{name}.index.")  # a part without them: left to areas_from
        for key in ("postings", "term_postings"):
            got = merged[f"{name}.index.{key}"]
            assert got.dtype == want[key].dtype and got.tobytes() == want[key].tobytes(), (name, key)
    _same_areas(_areas_from(merged), _areas_from(bare))
