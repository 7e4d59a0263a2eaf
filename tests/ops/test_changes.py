"""The change hub: watcher batches become change keys, told to the listeners of that vault only."""

from __future__ import annotations

from pathlib import Path

from memvault.ops.changes import Change, Changes, key_of


def test_paths_name_memories_archived_memories_the_graph_and_sessions() -> None:
    assert key_of(("deploy-notes.md",)) == "memory:deploy-notes.md"
    assert key_of(("projects", "alpha plan.md")) == "memory:projects/alpha plan.md"
    assert key_of(("archive", "old.md")) == "archive:old.md"
    assert key_of(("graph.jsonl",)) == "graph"
    assert key_of(("sessions", "standup.md")) == "session:standup"
    assert key_of(("sessions", "standup.history.jsonl")) == "session:standup"
    for other in [("notes.txt",), (".hidden.md",), ("archive", ".tmp.md"), ("sessions", "x", "y.md"), ()]:
        assert key_of(other) is None, other


def test_a_vault_hears_its_own_changes_only(tmp_path: Path) -> None:
    hub = Changes(tmp_path)
    alice: list[Change] = []
    bob: list[Change] = []
    stop_alice = hub.listen("alice", alice.append)
    hub.listen("bob", bob.append)
    hub.announce("alice", {tmp_path / "alice" / "a.md", tmp_path / "bob" / "b.md"}, True, False)
    assert alice == [Change(frozenset({"memory:a.md"}), listing=True)]
    assert bob == []
    hub.announce("alice", {tmp_path / "alice" / "notes.txt"}, False, False)  # no resource: nothing
    hub.announce("bob", set(), False, True)  # a rescan: anything may have changed
    assert bob == [Change(frozenset(), listing=True, everything=True)]
    stop_alice()
    stop_alice()  # idempotent
    hub.announce("alice", {tmp_path / "alice" / "a.md"}, False, False)
    assert len(alice) == 1 and hub.listening("alice") == 0 and hub.listening("bob") == 1


def test_a_failing_listener_does_not_starve_the_others(tmp_path: Path) -> None:
    hub = Changes(tmp_path)
    heard: list[Change] = []

    def broken(change: Change) -> None:
        raise RuntimeError("gone")

    hub.listen("alice", broken)
    hub.listen("alice", heard.append)
    hub.announce("alice", {tmp_path / "alice" / "graph.jsonl"}, False, False)
    assert heard == [Change(frozenset({"graph"}))]
