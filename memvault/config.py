"""Settings: every MEMVAULT_* variable, read once, passed down explicitly."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memvault.errors import InvalidArgument
from memvault.kinds import embedder_kind, reranker_kind

WRITEBACK_MODES = ("day", "always", "never")
TOOL_GROUPS = ("memories", "recall", "sessions", "graph")
SYNC_MODES = ("off", "git")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
MOST_PROCESSES = 64  # serve --processes: each a full server of its own


@dataclass(frozen=True, slots=True)
class Setting:
    """One documented setting: its environment name, default and meaning (for README and --help)."""

    env: str
    default: str
    help: str


@dataclass(frozen=True, slots=True)
class Settings:
    root: Path = Path("memories")
    host: str = "127.0.0.1"
    port: int = 3000
    allowed_hosts: tuple[str, ...] = ()
    tokens_file: Path | None = None
    keys_file: Path | None = None
    path_tokens: str = "auto"
    max_body_bytes: int = 1024 * 1024
    max_connections: int = 1000
    processes: int = 1
    max_sessions_per_token: int = 100
    max_sessions_per_client: int = 1000
    header_timeout_seconds: float = 10.0
    max_import_line_bytes: int = 16 * 1024 * 1024
    max_content_chars: int = 100_000
    max_reply_chars: int = 20_000
    ttl_p1_days: float = 90.0
    ttl_p2_days: float = 30.0
    capacity: int = 50
    evict_interval_hours: float = 24.0
    evict_grace_hours: float = 24.0
    access_writeback: str = "day"
    dedupe_window_seconds: float = 300.0
    watch: bool = True
    poll_interval_seconds: float = 2.0
    max_loaded_tokens: int = 100
    load_processes: int | None = None  # None: one per CPU, at most 4 (see loader.helpers_for)
    tools: tuple[str, ...] = TOOL_GROUPS
    graph_max_path_len: int = 4
    graph_entries_per_term: int = 5
    graph_max_results: int = 50
    embedder: str = "wordllama"
    recall_floor: float = 0.05
    reranker: str = "maxsim"
    embed_url: str | None = None
    embed_key: str | None = field(default=None, repr=False)
    embed_model: str | None = None
    log_level: str = "info"
    hook_context_chars: int = 2000
    hook_timeout_seconds: float = 0.8
    sync: str = "off"
    sync_interval_seconds: float = 30.0

    def token_dir(self, token: str) -> Path:
        return self.root / token

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **overrides: Any) -> Settings:
        """Build settings from MEMVAULT_* variables; explicit overrides (CLI flags) win."""
        values: dict[str, Any] = {}
        for name, spec in SETTINGS.items():
            raw = environ.get(spec.env)
            if raw is None or raw == "":
                continue
            values[name] = _parse(name, spec.env, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        if self.access_writeback not in WRITEBACK_MODES:
            raise InvalidArgument(
                f"MEMVAULT_ACCESS_WRITEBACK must be one of {', '.join(WRITEBACK_MODES)}, "
                f"not {self.access_writeback!r}."
            )
        unknown = [g for g in self.tools if g not in TOOL_GROUPS]
        if unknown:
            raise InvalidArgument(
                f"MEMVAULT_TOOLS has unknown group(s) {', '.join(unknown)}; "
                f"choose from {', '.join(TOOL_GROUPS)}."
            )
        for name in _AT_LEAST_ONE:
            if getattr(self, name) < 1:
                raise InvalidArgument(f"MEMVAULT_{name.upper()} must be at least 1.")
        if self.load_processes is not None and self.load_processes < 0:
            raise InvalidArgument("MEMVAULT_LOAD_PROCESSES must be auto, 0 (no helpers) or more.")
        if self.graph_max_path_len < 0:
            raise InvalidArgument("MEMVAULT_GRAPH_MAX_PATH_LEN must be 0 (no connecting paths) or more.")
        if self.processes > MOST_PROCESSES:
            raise InvalidArgument(f"MEMVAULT_PROCESSES must be from 1 to {MOST_PROCESSES}.")
        if not 0 < self.port < 65536:
            raise InvalidArgument("MEMVAULT_PORT must be between 1 and 65535.")
        # Durations: 0 is meaningful (no TTL grace, sweep on every read, no dedupe); negative or nan is not.
        for name in (
            "ttl_p1_days",
            "ttl_p2_days",
            "evict_interval_hours",
            "evict_grace_hours",
            "dedupe_window_seconds",
        ):
            value = getattr(self, name)
            if math.isnan(value) or value < 0:
                raise InvalidArgument(
                    f"MEMVAULT_{name.upper()} must be 0 or more (inf: never), not {value!r}."
                )
        if not 0 < self.hook_timeout_seconds < math.inf:
            raise InvalidArgument("MEMVAULT_HOOK_TIMEOUT_SECONDS must be a positive number of seconds.")
        if not 0 < self.header_timeout_seconds < math.inf:
            raise InvalidArgument("MEMVAULT_HEADER_TIMEOUT_SECONDS must be a positive number of seconds.")
        if not 0 < self.poll_interval_seconds < math.inf:  # 0 would spin the polling observer
            raise InvalidArgument(
                "MEMVAULT_POLL_INTERVAL_SECONDS must be a positive number of seconds, "
                f"not {self.poll_interval_seconds!r}."
            )
        embedder_kind(self.embedder)  # an unknown kind fails at start-up, not at the first recall
        if self.path_tokens not in ("auto", "on", "off"):
            raise InvalidArgument(f"MEMVAULT_PATH_TOKENS must be auto, on or off, not {self.path_tokens!r}.")
        reranker_kind(self.reranker)
        if not 0 <= self.recall_floor < 1:
            raise InvalidArgument(
                "MEMVAULT_RECALL_FLOOR must be a share of the best score from 0 (no floor) up to, "
                f"not including, 1; not {self.recall_floor!r}."
            )
        if self.sync not in SYNC_MODES:
            raise InvalidArgument(f"MEMVAULT_SYNC must be off or git, not {self.sync!r}.")
        if not 0 < self.sync_interval_seconds < math.inf:
            raise InvalidArgument("MEMVAULT_SYNC_INTERVAL_SECONDS must be a positive number of seconds.")
        if self.log_level not in LOG_LEVELS:  # uvicorn looks the name up as given and fails late
            raise InvalidArgument(
                f"MEMVAULT_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, not {self.log_level!r}."
            )


_AT_LEAST_ONE = (  # counts and sizes where 0 would refuse everything
    "max_body_bytes",
    "max_import_line_bytes",
    "max_connections",
    "processes",
    "max_sessions_per_token",
    "max_sessions_per_client",
    "max_content_chars",
    "max_reply_chars",
    "capacity",
    "max_loaded_tokens",
    "graph_entries_per_term",
    "graph_max_results",
    "hook_context_chars",
)


SETTINGS: dict[str, Setting] = {
    "root": Setting("MEMVAULT_ROOT", "./memories", "Folder holding one sub-folder per token."),
    "host": Setting("MEMVAULT_HOST", "127.0.0.1", "Address to listen on (0.0.0.0 in Docker)."),
    "port": Setting("MEMVAULT_PORT", "3000", "Port to listen on."),
    "allowed_hosts": Setting(
        "MEMVAULT_ALLOWED_HOSTS",
        "(empty)",
        "Extra Host header values accepted, comma-separated (e.g. `mybox:3000`, `mybox:*`); "
        "localhost and 127.0.0.1 on any port are always accepted. "
        "`*` accepts any Host (a foreign Origin is still refused).",
    ),
    "tokens_file": Setting(
        "MEMVAULT_TOKENS_FILE", "(unset)", "File with one allowed token per line; others are refused."
    ),
    "keys_file": Setting(
        "MEMVAULT_KEYS_FILE",
        "(unset)",
        "Keys file (`memvault keys`): clients send `Authorization: Bearer <key>` to `/mcp`; the key names "
        "the vault and whether it is read-only.",
    ),
    "path_tokens": Setting(
        "MEMVAULT_PATH_TOKENS",
        "auto",
        "Whether `/mcp/<token>` URLs work: `auto` (only without a keys file), `on` or `off`.",
    ),
    "max_body_bytes": Setting("MEMVAULT_MAX_BODY_BYTES", "1048576", "Largest HTTP request body (413 above)."),
    "max_connections": Setting(
        "MEMVAULT_MAX_CONNECTIONS",
        "1000",
        "Most open HTTP connections (SSE streams included); the next one is answered 503 and closed. "
        "`serve` raises the open-file limit to fit.",
    ),
    "processes": Setting(
        "MEMVAULT_PROCESSES",
        "1",
        "Server processes `serve` runs on the one root (about a core each): it accepts connections and "
        "hands each to the process of its vault (the token in the path, else the bearer key).",
    ),
    "max_sessions_per_token": Setting(
        "MEMVAULT_MAX_SESSIONS_PER_TOKEN",
        "100",
        "Most open MCP sessions of one token; a new one closes that token's least recently used.",
    ),
    "max_sessions_per_client": Setting(
        "MEMVAULT_MAX_SESSIONS_PER_CLIENT",
        "1000",
        "Most open MCP sessions of one client address; a new one closes that client's least recently used.",
    ),
    "header_timeout_seconds": Setting(
        "MEMVAULT_HEADER_TIMEOUT_SECONDS",
        "10",
        "A new connection that sends no complete request within this time is closed.",
    ),
    "max_import_line_bytes": Setting(
        "MEMVAULT_MAX_IMPORT_LINE_BYTES",
        "16777216",
        "Longest line `memvault import` reads (16 MiB); a longer one stops the import before it writes.",
    ),
    "max_content_chars": Setting(
        "MEMVAULT_MAX_CONTENT_CHARS", "100000", "Largest content of one memory, in characters."
    ),
    "max_reply_chars": Setting(
        "MEMVAULT_MAX_REPLY_CHARS", "20000", "Largest tool reply; longer replies say what was left out."
    ),
    "ttl_p1_days": Setting("MEMVAULT_TTL_P1_DAYS", "90", "P1 memories not accessed this long are archived."),
    "ttl_p2_days": Setting("MEMVAULT_TTL_P2_DAYS", "30", "P2 memories not accessed this long are archived."),
    "capacity": Setting("MEMVAULT_CAPACITY", "50", "Most hot memories per token after a sweep."),
    "evict_interval_hours": Setting(
        "MEMVAULT_EVICT_INTERVAL_HOURS", "24", "Least time between two automatic sweeps of one token."
    ),
    "evict_grace_hours": Setting(
        "MEMVAULT_EVICT_GRACE_HOURS",
        "24",
        "A memory written, updated or imported this recently is never archived (by TTL or capacity).",
    ),
    "access_writeback": Setting(
        "MEMVAULT_ACCESS_WRITEBACK",
        "day",
        "When a read writes `lastAccessedAt` into the file: `day` (once per UTC day), `always`, `never`.",
    ),
    "dedupe_window_seconds": Setting(
        "MEMVAULT_DEDUPE_WINDOW_SECONDS",
        "300",
        "The same title and content written again within this window returns the existing file.",
    ),
    "watch": Setting("MEMVAULT_WATCH", "true", "Watch the vault for hand edits (false: poll only)."),
    "poll_interval_seconds": Setting(
        "MEMVAULT_POLL_INTERVAL_SECONDS", "2", "Rescan interval when the file watcher is unavailable."
    ),
    "max_loaded_tokens": Setting(
        "MEMVAULT_MAX_LOADED_TOKENS",
        "100",
        "Most token indexes kept in memory; the least recently used unload.",
    ),
    "load_processes": Setting(
        "MEMVAULT_LOAD_PROCESSES",
        "auto",
        "Helper processes that read and index a token of 20,000+ files without a snapshot, in parallel; "
        "`auto`: one per CPU (at most 4, none on one CPU); 0: always in the server process.",
    ),
    "tools": Setting(
        "MEMVAULT_TOOLS", "memories,recall,sessions,graph", "Tool groups to offer, comma-separated."
    ),
    "graph_max_path_len": Setting(
        "MEMVAULT_GRAPH_MAX_PATH_LEN",
        "4",
        "search_nodes: most relations on a path joining the matches of two query terms (0: no paths).",
    ),
    "graph_entries_per_term": Setting(
        "MEMVAULT_GRAPH_ENTRIES_PER_TERM",
        "5",
        "search_nodes: best matches per query term, where connecting paths start.",
    ),
    "graph_max_results": Setting(
        "MEMVAULT_GRAPH_MAX_RESULTS", "50", "search_nodes: most entities in one result."
    ),
    "embedder": Setting(
        "MEMVAULT_EMBEDDER",
        "wordllama",
        "Embeddings for `recall`: `wordllama` (its weights ship in the package: nothing is downloaded), "
        "`hash` (built in, offline), `model2vec:<name-or-path>`, `sentence-transformers:<name-or-path>` "
        "or `openai`; one that cannot load falls back to `hash`.",
    ),
    "recall_floor": Setting(
        "MEMVAULT_RECALL_FLOOR",
        "0.05",
        "`recall` leaves out results scoring below this share of the best one (0: none left out).",
    ),
    "reranker": Setting(
        "MEMVAULT_RERANKER",
        "maxsim",
        "`recall` reranks its best candidates: `maxsim` (late interaction over WordLlama's token "
        "table; off with another embedder), `off`, or `cross-encoder:<model folder>` (needs "
        "sentence-transformers; one that cannot load is left out with one log line).",
    ),
    "embed_url": Setting(
        "MEMVAULT_EMBED_URL",
        "https://api.openai.com/v1",
        "`openai` embedder: base URL of an OpenAI-compatible API.",
    ),
    "embed_key": Setting(
        "MEMVAULT_EMBED_KEY", "(unset)", "`openai` embedder: API key (sent as a bearer token)."
    ),
    "embed_model": Setting(
        "MEMVAULT_EMBED_MODEL", "text-embedding-3-small", "`openai` embedder: model name."
    ),
    "log_level": Setting("MEMVAULT_LOG_LEVEL", "info", "debug, info, warning or error."),
    "hook_context_chars": Setting(
        "MEMVAULT_HOOK_CONTEXT_CHARS",
        "2000",
        "Most characters `memvault hook session-start` gives a new Claude Code session (P0 titles, "
        "what recall finds for the project, the summary saved before a compaction).",
    ),
    "hook_timeout_seconds": Setting(
        "MEMVAULT_HOOK_TIMEOUT_SECONDS",
        "0.8",
        "Longest a `memvault hook` works before it gives up (exit status 0, one line on stderr), so it "
        "never holds Claude Code up.",
    ),
    "sync": Setting(
        "MEMVAULT_SYNC",
        "off",
        "`git`: `memvault serve` commits what changed in the vault, fetches, merges with memvault's "
        "merge driver and pushes, every interval and soon after a write (see Sync with git); `off`.",
    ),
    "sync_interval_seconds": Setting(
        "MEMVAULT_SYNC_INTERVAL_SECONDS",
        "30",
        "With `MEMVAULT_SYNC=git`: seconds between two syncs when nothing is written.",
    ),
}

# How a variable's text becomes a value follows the field's declared type (Settings' annotations).
_FIELD_TYPES = {f.name: str(f.type) for f in dataclasses.fields(Settings)}


def _parse(name: str, env: str, raw: str) -> Any:
    kind = _FIELD_TYPES[name]
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
    except ValueError:
        raise InvalidArgument(f"{env} must be a number, not {raw!r}.") from None
    if kind == "bool":
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise InvalidArgument(f"{env} must be true or false, not {raw!r}.")
    if kind.startswith("tuple["):
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if kind.startswith("Path"):
        return Path(raw).expanduser()
    if name == "log_level":
        return raw.strip().lower()
    if kind == "int | None":  # a count, or auto
        if raw.strip().lower() == "auto":
            return None
        try:
            return int(raw)
        except ValueError:
            raise InvalidArgument(f"{env} must be a number or auto, not {raw!r}.") from None
    return raw.strip()
