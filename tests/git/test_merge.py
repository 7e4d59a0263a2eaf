"""The merge driver's dispatch: which merge a file takes by its path, a file memvault does not own
merged as git would, and a deletion against an edit. Each merge has its own test module
(test_mergegraph, test_mergememory, test_mergesessions)."""

from __future__ import annotations

from memvault.git.merge import kind_of, merge_file, resolve_modify_delete
from memvault.git.mergegraph import merge_graph
from memvault.git.mergememory import merge_memory
from memvault.git.mergesessions import merge_history, merge_session_markdown
from memvault.records.summaryfiles import Version, render_markdown


def test_each_file_takes_its_merge_by_path() -> None:
    assert kind_of("vault/team/graph.jsonl") == "graph"
    assert kind_of("team/sessions/standup.history.jsonl") == "history"
    assert kind_of("sessions/standup.md") == "session"
    assert kind_of("team/notes/deploy.md") == "memory"
    assert kind_of("team/archive/OLD.MD") == "memory"
    assert kind_of("README.txt") is None


def test_a_file_memvault_does_not_own_merges_as_git_merge_file_does() -> None:
    base, ours, theirs = b"a\nb\nc\n", b"A\nb\nc\n", b"a\nb\nC\n"
    assert merge_file(base, ours, theirs, "notes.txt").data == b"A\nb\nC\n"
    clash = merge_file(base, b"1\nb\nc\n", b"2\nb\nc\n", "notes.txt")
    assert not clash.clean
    assert clash.data == b"<<<<<<< ours\n1\n=======\n2\n>>>>>>> theirs\nb\nc\n"


def test_a_deletion_against_an_edit_keeps_the_edit() -> None:
    assert resolve_modify_delete(b"old", None, b"new") == b"new"
    assert resolve_modify_delete(b"old", b"new", None) == b"new"
    assert resolve_modify_delete(b"old", b"old", None) is None
    assert resolve_modify_delete(b"old", None, None) is None


def test_each_file_reaches_its_own_merge_through_the_driver() -> None:
    # Both sides add at the end: a line merge would conflict, each of memvault's merges does not.
    ada = b'{"type":"entity","name":"ada","entityType":"person","observations":[]}\n'
    grace = b'{"type":"entity","name":"grace","entityType":"person","observations":[]}\n'
    driven = merge_file(b"", ada, grace, "team/graph.jsonl")
    assert driven.clean and not driven.extra and driven.data == merge_graph(b"", ada, grace)
    one = b'{"version":1,"ts":"2026-03-01T09:00:00.000Z","summary":"one"}\n'
    two = b'{"version":1,"ts":"2026-03-01T09:05:00.000Z","summary":"two"}\n'
    driven = merge_file(b"", one, two, "team/sessions/standup.history.jsonl")
    assert driven.clean and driven.data == merge_history(b"", one, two)
    first = b"---\nupdatedAt: 2026-01-01T00:00:00.000Z\n---\n# A\n\none\n"
    second = b"---\nupdatedAt: 2026-01-02T00:00:00.000Z\n---\n# B\n\ntwo\n"
    driven = merge_file(b"", first, second, "team/notes/a.md")
    assert driven.extra and driven == merge_memory(
        b"", first, second, path="team/notes/a.md", memory_id="a.md"
    )
    # Two sides' first version of a summary: numbered again, where two memories would make a conflict copy.
    mine = render_markdown(Version("standup", 1, "2026-03-01T09:00:00.000Z", None, (), "Ada: one"), "")
    yours = render_markdown(Version("standup", 1, "2026-03-01T09:05:00.000Z", None, (), "Grace: two"), "")
    driven = merge_file(b"", mine, yours, "team/sessions/standup.md")
    assert not driven.extra and b"version: 2\n" in driven.data
    assert driven == merge_session_markdown(
        b"", mine, yours, path="team/sessions/standup.md", memory_id="standup.md"
    )
