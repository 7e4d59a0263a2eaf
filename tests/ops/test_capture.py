"""capture: what Claude Code's hooks record of a session, and the context a new session starts with."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from transcripts import SESSION, Transcript

from memvault.ops import transcripts
from memvault.ops.capture import SESSION_TAG, Captured, Refused, capture, project_words, session_context


class Vault:
    """A vault in memory, as the hooks reach one (memvault.ops.capture.VaultAccess)."""

    def __init__(self, *, limit: int = 100_000, p0: Sequence[str] = (), found: Sequence[str] = ()) -> None:
        self.limit = limit
        self.summaries: dict[str, str] = {}
        self.titles: dict[str, tuple[str, tuple[str, ...]]] = {}
        self.p0 = list(p0)
        self.found = list(found)
        self.asked: list[tuple[str, int]] = []

    def latest_summary(self, session_id: str) -> str | None:
        return self.summaries.get(session_id)

    def append_summary(self, session_id: str, text: str, title: str, tags: Sequence[str]) -> None:
        before = self.summaries.get(session_id)
        whole = text if before is None else before + "\n\n" + text
        if len(whole) > self.limit:
            raise Refused(f"the summary would be {len(whole)} characters")
        self.replace_summary(session_id, whole, title, tags)

    def replace_summary(self, session_id: str, text: str, title: str, tags: Sequence[str]) -> None:
        self.summaries[session_id] = text
        self.titles[session_id] = (title, tuple(tags))

    def p0_titles(self) -> list[str]:
        return self.p0

    def recall(self, query: str, limit: int) -> list[str]:
        self.asked.append((query, limit))
        return self.found[:limit]

    def close(self) -> None:
        pass


def read(transcript: Transcript) -> transcripts.Transcript:
    return transcripts.read(transcript.path, limit_bytes=1 << 20)


def session(tmp_path: Path) -> Transcript:
    return Transcript(tmp_path / "session.jsonl", tmp_path / "project")


def test_a_capture_records_each_request_with_its_final_answer(tmp_path: Path) -> None:
    vault, talk = Vault(), session(tmp_path)
    talk.turn("Fix the flaky deploy test", "Looking at it.", "Fixed: the test waited on a fixed sleep.")
    talk.turn("Now update the changelog", "Done: one line under 2.1.")

    done = capture(vault, SESSION, read(talk), budget=10_000, project="webshop")

    summary = vault.summaries[SESSION]
    assert done == Captured(2, len(summary))
    assert "Fix the flaky deploy test" in summary and "Fixed: the test waited on a fixed sleep." in summary
    assert "Now update the changelog" in summary and "Done: one line under 2.1." in summary
    assert "Looking at it." not in summary and "TOOLOUT" not in summary  # only the final answer
    assert vault.titles[SESSION] == ("Claude Code: webshop", (SESSION_TAG, "webshop"))


def test_a_second_capture_adds_only_what_is_new(tmp_path: Path) -> None:
    vault, talk = Vault(), session(tmp_path)
    talk.turn("First request", "First answer.")
    capture(vault, SESSION, read(talk), budget=10_000, project=None)
    first = vault.summaries[SESSION]

    assert capture(vault, SESSION, read(talk), budget=10_000, project=None) == Captured(0, 0)
    assert vault.summaries[SESSION] == first  # nothing new: nothing written

    talk.turn("Second request", "Second answer.")
    done = capture(vault, SESSION, read(talk), budget=10_000, project=None)
    summary = vault.summaries[SESSION]
    assert done.turns == 1
    assert summary.startswith(first)
    assert summary.count("First request") == 1 and summary.count("Second request") == 1


def test_a_project_name_that_is_not_plain_stays_out_of_title_and_tags(tmp_path: Path) -> None:
    vault, talk = Vault(), session(tmp_path)
    talk.turn("Hello", "Hi.")
    capture(vault, SESSION, read(talk), budget=10_000, project="../x; rm -rf ~")
    assert vault.titles[SESSION] == ("Claude Code session", (SESSION_TAG,))


def test_a_summary_that_would_outgrow_its_limit_starts_again_pointing_to_its_history(
    tmp_path: Path,
) -> None:
    vault, talk = Vault(limit=600), session(tmp_path)
    talk.turn("An early request", "An early answer. " * 10)
    capture(vault, SESSION, read(talk), budget=10_000, project=None)
    talk.turn("A later request", "A later answer. " * 10)

    capture(vault, SESSION, read(talk), budget=10_000, project=None)

    summary = vault.summaries[SESSION]
    assert summary.startswith(
        f'[Earlier captures of this session: get_session_history(sessionId="{SESSION}").]'
    )
    assert "A later request" in summary and "An early request" not in summary


def test_project_words_are_the_folder_and_its_remotes_repository_names(tmp_path: Path) -> None:
    project = tmp_path / "webshop"
    (project / ".git").mkdir(parents=True)
    (project / ".git" / "config").write_text(
        '[remote "origin"]\n\turl = git@example.org:acme/shop-backend.git\n'
        '[remote "fork"]\n\turl = https://example.org/me/webshop/\n'
        '[remote "odd"]\n\turl = https://example.org/me/$(touch pwned)\n',
        encoding="utf-8",
    )
    assert project_words(str(project)) == ["webshop", "shop-backend"]


def test_project_words_of_no_folder_a_relative_one_or_a_linked_git_config(tmp_path: Path) -> None:
    assert project_words(None) == []
    assert project_words("relative/webshop") == []
    project = tmp_path / "webshop"
    (project / ".git").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere.config"
    elsewhere.write_text('[remote "origin"]\n\turl = https://example.org/acme/secret.git\n', encoding="utf-8")
    (project / ".git" / "config").symlink_to(elsewhere)
    assert project_words(str(project)) == ["webshop"]  # a link is never read through


def test_a_new_session_starts_with_the_p0_titles_and_what_recall_finds_for_the_project(
    tmp_path: Path,
) -> None:
    project = tmp_path / "webshop"
    project.mkdir()
    vault = Vault(p0=["Never deploy on Fridays"], found=["deploy.md | Deploy steps | 0.90 | make stage"])
    text = session_context(vault, session_id=SESSION, source="startup", cwd=str(project), budget=2000)
    assert "- Never deploy on Fridays" in text
    assert "Related to this project (webshop):\n- deploy.md | Deploy steps" in text
    assert vault.asked == [("webshop", 5)]


def test_a_session_after_a_compaction_gets_its_summary_back_without_markers(tmp_path: Path) -> None:
    vault, talk = Vault(), session(tmp_path)
    talk.turn("Plan the migration", "Plan: three steps.")
    capture(vault, SESSION, read(talk), budget=10_000, project=None)
    text = session_context(vault, session_id=SESSION, source="compact", cwd=None, budget=2000)
    assert "This session before the compaction" in text and "Plan the migration" in text
    assert "<!--" not in text
    assert "Plan the migration" not in session_context(
        vault, session_id=SESSION, source="startup", cwd=None, budget=2000
    )


def test_the_context_is_empty_when_the_vault_has_nothing_to_say() -> None:
    assert session_context(Vault(), session_id=SESSION, source="startup", cwd=None, budget=2000) == ""


def test_the_context_never_passes_its_budget(tmp_path: Path) -> None:
    project = tmp_path / "webshop"
    project.mkdir()
    vault = Vault(p0=[f"Rule {i}: " + "x" * 400 for i in range(50)], found=["y" * 1000] * 5)
    for budget in (300, 1000, 4000):
        text = session_context(vault, session_id=None, source="startup", cwd=str(project), budget=budget)
        assert 0 < len(text) <= budget
    text = session_context(vault, session_id=None, source="startup", cwd=str(project), budget=4000)
    assert "more not shown]" in text
    assert max(len(line) for line in text.splitlines()) <= 302  # a long title is cut ("- " and 300)
