"""A vault reached through its files when no server runs, under the server's own locks.

The hooks' calls: the token's folder lock around every change, the sidecar brought in line with the
files first, as the tools do."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence

from memvault.config import Settings
from memvault.disk.vault import folder_lock
from memvault.errors import MemvaultError, UnknownSession
from memvault.ops.capture import Refused
from memvault.ops.service import Service
from memvault.records import sync
from memvault.records.sidecar import Sidecar, sidecar_path
from memvault.records.summaries import SessionSummaries
from memvault.records.sync import SessionFiles


class LocalVault:
    """One token's vault on disk (memvault.ops.capture.VaultAccess). A read never creates the token's
    folder; the first write does, as a tool's would."""

    def __init__(self, settings: Settings, token: str) -> None:
        # The hooks read memories by words only: no embedder to load, no watcher, no helper process.
        tools = tuple(group for group in settings.tools if group != "recall")
        self.settings = settings.replace(watch=False, load_processes=0, tools=tools)
        self.token = token
        self.folder = settings.token_dir(token)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._service: Service | None = None

    # ------------------------------------------------------------------ sessions

    def _sessions(self, sidecar: Sidecar | Callable[[], Sidecar]) -> SessionSummaries:
        return SessionSummaries(
            sidecar, max_chars=self.settings.max_content_chars, files=SessionFiles(self.folder)
        )

    def latest_summary(self, session_id: str) -> str | None:
        if not sidecar_path(self.folder).is_file() and not sync.has_files(self.folder):
            return None
        with Sidecar.open(self.folder) as sidecar:
            sync.sync(sidecar, self.folder)
            try:
                return self._sessions(sidecar).latest(session_id)[0].summary
            except UnknownSession:
                return None

    @contextlib.contextmanager
    def _changing(self) -> Iterator[SessionSummaries]:
        if self.folder.is_symlink():
            raise Refused("the vault's folder is a symbolic link; replace it with a real folder")
        with Sidecar.open(self.folder) as sidecar, folder_lock(self.folder):
            sync.sync(sidecar, self.folder)
            yield self._sessions(sidecar)

    def append_summary(self, session_id: str, text: str, title: str, tags: Sequence[str]) -> None:
        self._refusing(lambda: self._append(session_id, text, title, tags, replace=False))

    def replace_summary(self, session_id: str, text: str, title: str, tags: Sequence[str]) -> None:
        self._refusing(lambda: self._append(session_id, text, title, tags, replace=True))

    def _append(self, session_id: str, text: str, title: str, tags: Sequence[str], *, replace: bool) -> None:
        with self._changing() as sessions:
            if replace:
                sessions.upsert(session_id, text, title=title, tags=tags)
            else:
                sessions.append(session_id, text, title=title, tags=tags)

    @staticmethod
    def _refusing(work: Callable[[], None]) -> None:
        try:
            work()
        except MemvaultError as exc:
            raise Refused(str(exc)) from None

    # ------------------------------------------------------------------ memories

    def _memories(self, query: str | None, limit: int | None) -> list[tuple[str, str, str]]:
        """(id, title, priority) of the hot memories, best matches for ``query`` first."""
        if not self.folder.is_dir() or self.folder.is_symlink():
            return []
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        loop = self._loop

        async def find() -> list[tuple[str, str, str]]:
            if self._service is None:
                self._service = Service(self.settings)
            found = await self._service.store.find(self.token, query=query, limit=limit)
            return [(m.id, m.title, m.priority) for m in found.memories]

        return loop.run_until_complete(find())

    def p0_titles(self) -> list[str]:
        return [f"{title} ({id})" for id, title, priority in self._memories(None, None) if priority == "P0"]

    def recall(self, query: str, limit: int) -> list[str]:
        return [f"{id} | {title}" for id, title, _ in self._memories(query, limit)]

    def close(self) -> None:
        if self._loop is None:
            return
        if self._service is not None:
            self._loop.run_until_complete(self._service.close())
        self._loop.close()
        self._loop = None
