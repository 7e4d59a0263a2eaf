"""parse_memory as it was before the fast paths (6de4f9c), kept as the reference they must equal."""

# The code below is the old module's parsing half, unchanged but for its imports: the new
# parser's tests compare every field of its Memory with this one's, input by input.

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from memvault.clock import parse_time
from memvault.disk.markdown import NO_META, Memory

PRIORITIES = ("P0", "P1", "P2")
DEFAULT_PRIORITY = "P2"
MAX_INDEXED_BYTES = 8 * 1024 * 1024
LITERAL_MARKERS = "literalMarkers"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # PyYAML's C loader when built with libyaml
_FM_OPEN = re.compile(r"\A---[ \t]*\r?\n")
_FM_CLOSE = re.compile(r"^---[ \t]*\r?$", re.MULTILINE)
_FOOTER = re.compile(r"\n+---[ \t]*\n+\*Created: [^*\n]*\*[ \t]*\n*\Z")
_FOOTER_CREATED = re.compile(r"^\*Created: ([^*\n]+)\*[ \t]*$", re.MULTILINE)
_FIRST_HEADING = re.compile(r"^# (.+?)[ \t]*$", re.M)
_HEADING = re.compile(r"\A[ \t]*\n*# (.+?)[ \t]*(?:\n|\Z)")
_CONFLICT_START = re.compile(r"^<<<<<<<(?: |$)", re.MULTILINE)
_CONFLICT_END = re.compile(r"^>>>>>>>(?: |$)", re.MULTILINE)
_CONFLICT_SEPARATOR = re.compile(r"^=======[ \t]*$", re.MULTILINE)


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


# ---------------------------------------------------------------------------- parsing


@dataclass(frozen=True, slots=True)
class _Split:
    fm_text: str | None  # YAML between the fences, None without a frontmatter block
    body: str
    broken: str | None  # why the frontmatter could not be used


def _split(text: str) -> _Split:
    start = _FM_OPEN.match(text)
    if start is None:
        return _Split(None, text, None)
    # The closing fence is the first line after the opening one that is `---` (str.find, then
    # the pattern: a multiline search tried every position of the frontmatter).
    at = start.end() - 1  # the opening line's newline
    while True:
        at = text.find("\n---", at)
        if at < 0:
            return _Split(None, text, "frontmatter has no closing '---' line")
        close = _FM_CLOSE.match(text, at + 1)
        if close is not None:
            break
        at += 1
    fm_text = text[start.end() : close.start()]
    body = text[close.end() :]
    if body.startswith("\n"):
        body = body[1:]
    return _Split(fm_text, body, None)


# Fast path for the frontmatter memvault and mem-mcp write: one `key: value` per line with plain
# values. Anything it is not sure of (quotes, block lists, YAML 1.1 booleans, anchors, comments)
# goes to the YAML loader, so both paths give the same result. PyYAML is ~70% of a parse otherwise.
_FAST_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*): ([^\n]*)")
_FAST_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?Z")
_FAST_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?")
_FAST_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_FAST_LIST = re.compile(r"\[([A-Za-z][A-Za-z0-9_-]*(?:, [A-Za-z][A-Za-z0-9_-]*)*)?\]")
_YAML_SPECIAL = frozenset("y n yes no on off true false null nan inf".split())


def _fast_value(text: str) -> tuple[bool, Any]:
    if _FAST_TIME.fullmatch(text):
        try:  # the parse_time of this form: an aware UTC datetime ("Z" gives UTC itself)
            return True, datetime.fromisoformat(text)
        except ValueError:  # a non-date like 2026-02-30: YAML decides (a problem)
            return False, None
    if _FAST_NUMBER.fullmatch(text):
        return True, float(text) if "." in text else int(text)
    if _FAST_WORD.fullmatch(text) and text.lower() not in _YAML_SPECIAL:
        return True, text
    match = _FAST_LIST.fullmatch(text)
    if match:
        items = match.group(1).split(", ") if match.group(1) else []
        if any(item.lower() in _YAML_SPECIAL for item in items):
            return False, None
        return True, items
    return False, None


class AliasRefused(yaml.YAMLError):
    def __init__(self, line: int) -> None:
        super().__init__(f"alias on line {line}")
        self.line = line


def load_yaml(text: str) -> Any:
    if "*" in text:
        for event in yaml.parse(text, Loader=_LOADER):
            if isinstance(event, yaml.AliasEvent):
                raise AliasRefused(event.start_mark.line + 1)
    return yaml.load(text, Loader=_LOADER)


def _load_frontmatter(fm_text: str) -> Any:
    meta: dict[str, Any] = {}
    for line in fm_text.split("\n"):
        if not line:
            continue  # blank lines, including the one the closing fence leaves, mean nothing to YAML
        match = _FAST_LINE.fullmatch(line)
        if match is None or match.group(1) in meta or match.group(1).lower() in _YAML_SPECIAL:
            return load_yaml(fm_text)  # `on:` / `null:` keys are a bool / None to YAML
        ok, value = _fast_value(match.group(2))
        if not ok:
            return load_yaml(fm_text)
        meta[match.group(1)] = value
    return meta


def _normalise(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def has_conflict_markers(text: str) -> bool:
    """Git's markers at line starts, in git's order: <<<<<<<, then =======, then >>>>>>>."""
    start = _CONFLICT_START.search(text) if "<<<<<<<" in text else None
    if start is None:
        return False
    separator = _CONFLICT_SEPARATOR.search(text, start.end())
    return separator is not None and _CONFLICT_END.search(text, separator.end()) is not None


def body_seal(body: str) -> str:
    """A short hash of a memory's body (after the frontmatter), line endings normalised."""
    digest = hashlib.blake2b(body.replace("\r\n", "\n").encode("utf-8"), digest_size=8).hexdigest()
    return f"h{digest}"  # a letter first: YAML must not read it as a number


def _title_and_content(body: str, meta: Mapping[str, Any], stem: str) -> tuple[str, str]:
    content = body.rstrip() + "\n"
    footer = content.rfind("\n---")  # nothing in a footer after its `---` starts a line with `---`
    if footer >= 0 and _FOOTER.match(content, footer):
        content = content[:footer]
    content = content.strip("\n")
    heading = _HEADING.match(content)
    meta_title = meta.get("title")
    if heading:
        content = content[heading.end() :].lstrip("\n")
    if isinstance(meta_title, str) and meta_title.strip():
        title = meta_title.strip()
    elif heading:
        title = heading.group(1).strip()
    else:
        title = stem
    return title, content.rstrip()


def parse_memory(
    raw: bytes,
    id: str,
    *,
    archived: bool = False,
    mtime_ns: int = 0,
    size: int | None = None,
    change: int = 0,
    keep_meta: bool = True,
) -> Memory:
    """Parse a memory file tolerantly: never raises for bad content, records the problem instead.

    ``keep_meta=False`` leaves ``meta`` empty: the store holds every memory in memory and does not
    need the frontmatter mapping, which would cost about as much as the rest of the Memory."""
    text = _normalise(raw)
    stem = id.rsplit("/", 1)[-1]
    stem = stem[:-3] if stem.lower().endswith(".md") else stem
    split = _split(text)
    meta, problem = _frontmatter(split)
    conflicted = has_conflict_markers(text) and not (
        split.fm_text is not None
        and problem is None
        and not has_conflict_markers(split.fm_text)
        and str(meta.get(LITERAL_MARKERS)) == body_seal(split.body)
    )
    body = split.body if split.fm_text is not None and problem is None else text
    title, content = _title_and_content(body, meta, stem)
    if problem is not None and title == stem:
        # Broken frontmatter: the whole text is the content (a person must see it to fix it), but
        # its `# Heading` still names it better than the filename.
        heading = _FIRST_HEADING.search(text)
        title = heading.group(1).strip() if heading else stem
    if problem is None and size is not None and size > len(raw) >= MAX_INDEXED_BYTES:  # read was cut
        problem = (
            f"file is over {MAX_INDEXED_BYTES // 2**20} MiB; only its start is indexed, and the server "
            "will not rewrite it"
        )
    if problem is None:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            # Read with replacement characters, but never written back: that would destroy the bytes.
            problem = "file is not valid UTF-8; the server will not rewrite it"
    created = parse_time(meta.get("createdAt"))
    if created is None:
        footer = _FOOTER_CREATED.search(text)
        created = parse_time(footer.group(1)) if footer else None
    mtime = datetime.fromtimestamp(mtime_ns / 1e9, UTC) if mtime_ns else None
    created = created or mtime
    priority = str(meta.get("priority", DEFAULT_PRIORITY)).strip().upper()
    if priority not in PRIORITIES:
        priority = DEFAULT_PRIORITY
    importance = meta.get("importance")
    try:
        importance_value = None if importance is None else min(1.0, max(0.0, float(importance)))
    except (TypeError, ValueError):
        importance_value = None
    return Memory(
        id=id,
        title=title,
        content=content,
        priority=priority,
        created_at=created,
        updated_at=_later(parse_time(meta.get("updatedAt")) or created, parse_time(meta.get("importedAt"))),
        last_accessed_at=parse_time(meta.get("lastAccessedAt")),
        tags=_tags(meta.get("tags")),
        importance=importance_value,
        archived=archived,
        meta=meta if keep_meta else NO_META,
        has_frontmatter=split.fm_text is not None or split.broken is not None,
        problem=problem,
        conflicted=conflicted,
        mtime_ns=mtime_ns,
        size=len(raw) if size is None else size,
        change=change,
        hash=content_hash(raw),
    )


def _frontmatter(split: _Split) -> tuple[dict[str, Any], str | None]:
    """The frontmatter's keys and values (none when there is none, or it is broken), and what is
    wrong with it, if anything."""
    problem = split.broken
    if split.fm_text is None:
        return {}, problem
    try:
        loaded = _load_frontmatter(split.fm_text) if split.fm_text.strip() else {}
    except AliasRefused as exc:
        problem = (
            f"YAML alias in frontmatter (line {exc.line + 1}), which memvault does not expand; "
            "write the value out in full"
        )
        loaded = None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        problem = f"invalid YAML in frontmatter{where}"
        loaded = None
    except Exception as exc:
        # PyYAML lets constructor errors escape as ValueError etc. (`createdAt: 2026-02-30`,
        # `!!int abc`, very deep nesting); a hand edit must never make the file unreadable.
        problem = f"invalid value in frontmatter ({type(exc).__name__})"
        loaded = None
    if loaded is None:
        loaded = {}
    if isinstance(loaded, dict):
        return {str(k): v for k, v in loaded.items()}, problem
    return {}, problem or "frontmatter is not a mapping of keys to values"


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    """An imported copy was written when it was imported (``importedAt``), whatever its source's
    ``updatedAt`` says: eviction's grace for fresh memories counts from then."""
    if a is None or b is None:
        return a or b
    return max(a, b)


def _tags(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        items: list[Any] = [part for part in re.split(r"[,\s]+", value) if part]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        return ()
    return tuple(dict.fromkeys(str(item).strip() for item in items if str(item).strip()))
