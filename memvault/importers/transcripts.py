"""Past Claude Code session transcripts as session summaries, as the Stop hook would have kept them.

Each transcript is read whole and checked (a damaged line refuses the import, naming it) before
any session is written; a session already captured gets only what came after its capture marker.
Sessions are written one by one: an interrupted import keeps those done, and importing again adds
the rest.
"""

from __future__ import annotations

import re
from pathlib import Path

from memvault.importers.base import Importer, ImportOptions, ImportRefused
from memvault.importers.claude_memory import default_projects
from memvault.ops import capture, transcripts
from memvault.ops.localvault import LocalVault

_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class TranscriptsImporter(Importer):
    name = "transcripts"
    on_interrupt = "the sessions imported so far stay; importing again adds the rest"

    def run(self, options: ImportOptions) -> int:
        assert options.token is not None
        files: list[Path] = []
        for path in default_projects(options.paths):
            if path.is_dir() and not path.is_symlink():
                files += list(transcripts.files_under(path, ".jsonl"))
            elif path.is_file() and not path.is_symlink():
                files.append(path)
            else:
                raise ImportRefused(f"{path} is neither a transcript file nor a folder of them")
        read: list[tuple[Path, str, transcripts.Transcript]] = []
        with self.out.progress("import (reading)") as progress:
            for path in files:
                try:
                    transcript = transcripts.read(path, limit_bytes=1 << 62, strict=True)
                except transcripts.BadTranscript as exc:
                    raise ImportRefused(f"{path}: {exc}") from None
                except OSError as exc:
                    raise ImportRefused(
                        f"cannot read {path} ({exc.strerror or type(exc).__name__})"
                    ) from None
                session_id = transcript.session_id or path.stem
                if not _SESSION_ID.fullmatch(session_id):
                    raise ImportRefused(f"{path}: its session id is not a plain name")
                read.append((path, session_id, transcript))
                progress(1)
        vault = LocalVault(self.settings, options.token)
        sessions = added = 0
        budget = self.settings.max_content_chars // 2
        with self.out.progress("import (writing)", unit=" sessions") as progress:
            for path, session_id, transcript in read:
                project = Path(transcript.cwd).name if transcript.cwd else None
                if options.dry_run:
                    latest = vault.latest_summary(session_id)
                    entries = transcripts.after(transcript.entries, transcripts.marker_in(latest))
                    new = transcripts.turns(entries)
                    done = capture.Captured(len(new), 0)
                    said = f"{len(new)} new requests" if new else "skip (nothing new)"
                    self.out.say(f"  {path} -> session {session_id}: {said}")
                else:
                    try:
                        done = capture.capture(vault, session_id, transcript, budget=budget, project=project)
                    except capture.Refused as exc:
                        self.out.warn(f"memvault: session {session_id} was not imported: {exc}")
                        return 1
                sessions += bool(done.turns)
                added += done.turns
                progress(1)
        verb = "would add" if options.dry_run else "added"
        unchanged = len(read) - sessions
        self.out.say(
            f"{options.token}: {verb} {added} requests to {sessions} sessions ({unchanged} had nothing new)"
        )
        return 0


IMPORTER = TranscriptsImporter
