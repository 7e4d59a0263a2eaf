"""The memory file format: Memory, tolerant parsing, rendering and byte-preserving frontmatter edits.

Pure functions of text: no file system access (see :mod:`memvault.disk.files` and :mod:`memvault.disk.vault`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

import yaml  # type: ignore[import-untyped]

from memvault.clock import format_time, parse_time
from memvault.disk import names
from memvault.errors import InvalidArgument

PRIORITIES = ("P0", "P1", "P2")
NO_META: Mapping[str, Any] = MappingProxyType({})
DEFAULT_PRIORITY = "P2"
# A hand-placed file larger than this is indexed on its first bytes only and never rewritten: a
# large log saved as a memory must not take the server's memory with it at every start.
MAX_INDEXED_BYTES = 8 * 1024 * 1024

# Keys the server owns; every other frontmatter key is kept verbatim on rewrite.
OWNED_KEYS = (
    "priority", "createdAt", "updatedAt", "lastAccessedAt", "tags", "importance", "supersedes",
    "supersededBy", "literalMarkers",  # literalMarkers: see seal_markers
)  # fmt: skip
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
# An owned key at the start of a frontmatter line: plain or quoted, then ":" and a space or the end.
_FM_KEY = re.compile(r"""^(["']?)([A-Za-z_]\w*)\1[ \t]*:(?:[ \t]|$)""")


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class Memory:
    """One memory as read from its file. ``id`` is relative to the hot or archive folder."""

    id: str
    title: str
    content: str
    priority: str = DEFAULT_PRIORITY
    created_at: datetime | None = None
    updated_at: datetime | None = None
    last_accessed_at: datetime | None = None
    tags: tuple[str, ...] = ()
    importance: float | None = None
    archived: bool = False
    # The parsed frontmatter. Shared and empty unless asked for: the store keeps every memory in memory.
    meta: Mapping[str, Any] = field(default_factory=lambda: NO_META)
    has_frontmatter: bool = True
    problem: str | None = None  # broken frontmatter, unreadable bytes, ...: reported, never fatal
    conflicted: bool = False
    mtime_ns: int = 0
    size: int = 0
    change: int = 0  # ctime and inode as read (see file_change)
    hash: str = ""

    @property
    def path_id(self) -> str:
        """Id relative to the token folder (archived ones under ``archive/``)."""
        return names.key(self.id, self.archived)

    @property
    def writable(self) -> bool:
        return not self.conflicted and self.problem is None


# parse_memory builds one Memory per file, 100,000 at a cold start, and a restart as many from its
# snapshot (memvault.load.snapshot): setting the slots directly, in straight-line code, skips what
# the frozen dataclass's __init__ does per field (a keyword, the default factory,
# object.__setattr__ by name): 5.3 -> 1.4-1.9 us each (a loop over the setters took 3.2-3.5).
(_set_id, _set_title, _set_content, _set_priority, _set_created, _set_updated, _set_accessed, _set_tags,
 _set_importance, _set_archived, _set_meta, _set_has_frontmatter, _set_problem, _set_conflicted,
 _set_mtime_ns, _set_size, _set_change, _set_hash) = (
    getattr(Memory, f.name).__set__ for f in dataclasses.fields(Memory))  # fmt: skip


Fields = tuple[  # a Memory's fields in declaration order: make_memory's arguments
    str, str, str, str, datetime | None, datetime | None, datetime | None, tuple[str, ...], float | None,
    bool, Mapping[str, Any], bool, str | None, bool, int, int, int, str,
]  # fmt: skip


def make_memory(
    id: str, title: str, content: str, priority: str, created: datetime | None, updated: datetime | None,
    accessed: datetime | None, tags: tuple[str, ...], importance: float | None, archived: bool,
    meta: Mapping[str, Any], has_frontmatter: bool, problem: str | None, conflicted: bool, mtime_ns: int,
    size: int, change: int, hash: str,
) -> Memory:  # fmt: skip
    """``Memory(...)`` of these fields, in declaration order."""
    m: Memory = object.__new__(Memory)
    _set_id(m, id)
    _set_title(m, title)
    _set_content(m, content)
    _set_priority(m, priority)
    _set_created(m, created)
    _set_updated(m, updated)
    _set_accessed(m, accessed)
    _set_tags(m, tags)
    _set_importance(m, importance)
    _set_archived(m, archived)
    _set_meta(m, meta)
    _set_has_frontmatter(m, has_frontmatter)
    _set_problem(m, problem)
    _set_conflicted(m, conflicted)
    _set_mtime_ns(m, mtime_ns)
    _set_size(m, size)
    _set_change(m, change)
    _set_hash(m, hash)
    return m


# ---------------------------------------------------------------------------- parsing


def _split(text: str) -> tuple[str | None, str, str | None]:
    """The YAML between the fences (None without a frontmatter block), the body, and why the
    frontmatter could not be used."""
    if text.startswith("---\n"):  # the usual opening line, without the pattern
        opened = 4
    else:
        start = _FM_OPEN.match(text)
        if start is None:
            return None, text, None
        opened = start.end()
    # The closing fence is the first line after the opening one that is `---` (str.find, then
    # the pattern: a multiline search tried every position of the frontmatter).
    at = opened - 1  # the opening line's newline
    while True:
        at = text.find("\n---", at)
        if at < 0:
            return None, text, "frontmatter has no closing '---' line"
        if text.startswith("\n", at + 4):  # `---` and nothing else: what the pattern matches
            return text[opened : at + 1], text[at + 5 :], None
        close = _FM_CLOSE.match(text, at + 1)
        if close is not None:
            break
        at += 1
    body = text[close.end() :]
    return text[opened : close.start()], body[1:] if body.startswith("\n") else body, None


# Fast path for the frontmatter memvault and mem-mcp write: one `key: value` per line with plain
# values. Anything it is not sure of (quotes, block lists, YAML 1.1 booleans, anchors, comments)
# goes to the YAML loader, so both paths give the same result. PyYAML is ~70% of a parse otherwise.
_FAST_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*").fullmatch  # a line is `key: value`
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
    """Frontmatter with a YAML alias (``*name``): never expanded. Nine levels of nine aliases are
    380 bytes that stand for 387 million values; whatever walks them (a repr, a tag list) stalls
    the server, so no alias is taken, whatever it stands for."""

    def __init__(self, line: int) -> None:
        super().__init__(f"alias on line {line}")
        self.line = line


def load_yaml(text: str) -> Any:
    """YAML as the safe loader reads it, but refusing aliases (AliasRefused): what a value expands
    to is then never more than its own text, which the file size bounds. Other YAMLErrors and the
    constructor's own (ValueError on ``2026-02-30``, RecursionError) pass through."""
    if "*" in text:  # no alias without one; the events are read once more only then
        for event in yaml.parse(text, Loader=_LOADER):
            if isinstance(event, yaml.AliasEvent):
                raise AliasRefused(event.start_mark.line + 1)
    return yaml.load(text, Loader=_LOADER)


# Keys and values the fast path took before (strings, so nothing shared can change), by the
# hundred in a vault: a set lookup instead of the patterns. Cleared when full.
_PLAIN_KEYS: set[str] = set()
_PLAIN_WORDS: set[str] = set()
_PLAIN_MAX = 4096


def _plain_frontmatter(fm_text: str) -> dict[str, Any] | None:
    """The frontmatter as the fast path reads it; None if YAML must decide."""
    meta: dict[str, Any] = {}
    for line in fm_text.split("\n"):
        if not line:
            continue  # blank lines, including the one the closing fence leaves, mean nothing to YAML
        # No key character is ":": the key ends at the line's first ": ".
        key, colon, text = line.partition(": ")
        if not colon or key in meta:
            return None
        if key not in _PLAIN_KEYS:
            if _FAST_KEY(key) is None or key.lower() in _YAML_SPECIAL:
                return None  # `on:` / `null:` keys are a bool / None to YAML
            _remember(_PLAIN_KEYS, key)
        if text in _PLAIN_WORDS:
            meta[key] = text
        elif text[-1:] == "Z" and _FAST_TIME.fullmatch(text):  # _fast_value's first case, inline
            try:
                meta[key] = datetime.fromisoformat(text)
            except ValueError:
                return None
        else:
            ok, value = _fast_value(text)
            if not ok:
                return None
            if value is text:
                _remember(_PLAIN_WORDS, text)
            meta[key] = value
    return meta


def _remember(plain: set[str], text: str) -> None:
    if len(plain) >= _PLAIN_MAX:
        plain.clear()
    plain.add(text)


def _normalise(raw: bytes) -> tuple[str, bool]:
    """The text to parse, and whether the bytes were valid UTF-8."""
    try:
        text, valid = raw.decode("utf-8"), True
    except UnicodeDecodeError:
        text, valid = raw.decode("utf-8", errors="replace"), False
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text, valid


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


def seal_markers(text: str) -> str:
    """``text`` as the server writes it: when the body itself holds lines that look like git
    conflict markers (an agent wrote about merges), frontmatter ``literalMarkers`` records the
    body's hash, so the file is not taken for a real conflict, on any machine. A merge that adds
    markers changes the body and the hash no longer matches; markers in the frontmatter always
    count. Without such lines the key is dropped."""
    fm_text, body, _ = _split(text.replace("\r\n", "\n").removeprefix("\ufeff"))
    if fm_text is None:
        return text
    wanted = body_seal(body) if has_conflict_markers(body) else None
    if wanted is None and LITERAL_MARKERS not in fm_text:
        return text
    return rewrite(text, {LITERAL_MARKERS: wanted}, title=None, content=None)


def _title_and_content(body: str, meta: Mapping[str, Any], stem: str) -> tuple[str, str]:
    content = body.rstrip() + "\n"
    footer = content.rfind("\n---")  # nothing in a footer after its `---` starts a line with `---`
    if footer >= 0 and _FOOTER.match(content, footer):
        content = content[:footer]
    content = content.strip("\n")
    heading = _heading(content)
    meta_title = meta.get("title")
    if heading:
        content = content[heading[1] :].lstrip("\n")
    if isinstance(meta_title, str) and meta_title.strip():
        title = meta_title.strip()
    elif heading:
        title = heading[0].strip()
    else:
        title = stem
    return title, content.rstrip()


def _heading(content: str) -> tuple[str, int] | None:
    """_HEADING's group and end: the `# Heading` on the first line without the pattern, the rest with it."""
    if content.startswith("# "):
        end = content.find("\n")
        title = content[2 : end if end >= 0 else None].rstrip(" \t")
        if title:
            return title, end + 1 if end >= 0 else len(content)
    match = _HEADING.match(content)
    return (match.group(1), match.end()) if match else None


def parse_memory(
    raw: bytes, id: str, *, archived: bool = False, mtime_ns: int = 0, size: int | None = None,
    change: int = 0, keep_meta: bool = True,
) -> Memory:  # fmt: skip
    """Parse a memory file tolerantly: never raises for bad content, records the problem instead.

    ``keep_meta=False`` leaves ``meta`` empty: the store holds every memory in memory and does not
    need the frontmatter mapping, which would cost about as much as the rest of the Memory."""
    return make_memory(*memory_fields(raw, id, archived, mtime_ns, size, change, keep_meta))


def memory_fields(
    raw: bytes, id: str, archived: bool, mtime_ns: int, size: int | None, change: int, keep_meta: bool
) -> Fields:
    """parse_memory's Memory as its fields: a loader helper turns 50,000 into columns, no object needed."""
    text, valid = _normalise(raw)
    stem = id.rsplit("/", 1)[-1]
    stem = stem[:-3] if stem.lower().endswith(".md") else stem
    fm_text, body, broken = _split(text)
    meta, problem = _frontmatter(fm_text, broken)
    conflicted = has_conflict_markers(text) and not (
        fm_text is not None
        and problem is None
        and not has_conflict_markers(fm_text)
        and str(meta.get(LITERAL_MARKERS)) == body_seal(body)
    )
    title, content = _title_and_content(body if fm_text is not None and problem is None else text, meta, stem)
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
    if problem is None and not valid:
        # Read with replacement characters, but never written back: that would destroy the bytes.
        problem = "file is not valid UTF-8; the server will not rewrite it"
    created = _time(meta.get("createdAt"))
    if created is None:
        footer = _FOOTER_CREATED.search(text)
        created = parse_time(footer.group(1)) if footer else None
        if created is None and mtime_ns:
            created = datetime.fromtimestamp(mtime_ns / 1e9, UTC)
    priority = meta.get("priority", DEFAULT_PRIORITY)
    if priority.__class__ is not str or priority not in PRIORITIES:
        priority = str(priority).strip().upper()
        if priority not in PRIORITIES:
            priority = DEFAULT_PRIORITY
    importance = meta.get("importance")
    try:
        importance_value = None if importance is None else min(1.0, max(0.0, float(importance)))
    except (TypeError, ValueError):
        importance_value = None
    updated = _time(meta.get("updatedAt")) or created
    imported = meta.get("importedAt")
    return (
        id, title, content, priority, created,
        updated if imported is None else _later(updated, parse_time(imported)),
        _time(meta.get("lastAccessedAt")), _tags(meta.get("tags")), importance_value, archived,
        meta if keep_meta else NO_META, fm_text is not None or broken is not None, problem, conflicted,
        mtime_ns, len(raw) if size is None else size, change, content_hash(raw),
    )  # fmt: skip


def _time(value: Any) -> datetime | None:
    """parse_time(value), which is the value itself for the fast path's UTC times."""
    if value.__class__ is datetime and value.tzinfo is UTC:
        return value
    return parse_time(value)


def _frontmatter(fm_text: str | None, broken: str | None) -> tuple[dict[str, Any], str | None]:
    """The frontmatter's keys and values (none when there is none, or it is broken), and what is
    wrong with it, if anything."""
    problem = broken
    if fm_text is None:
        return {}, problem
    try:
        plain = _plain_frontmatter(fm_text)  # int() of 5,000 digits raises ValueError, as in YAML
        if plain is not None:
            return plain, problem
        loaded = load_yaml(fm_text) if fm_text.strip() else {}
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


def clean_tags(tags: Sequence[str] | None) -> tuple[str, ...]:
    if not tags:
        return ()
    cleaned = _tags(list(tags))
    for tag in cleaned:
        if len(tag) > 100 or "\n" in tag:
            raise InvalidArgument(f"Tag {tag[:40]!r} is too long or has a line break; use short words.")
    return cleaned


# ---------------------------------------------------------------------------- rendering


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, list):
        if all(isinstance(v, str) for v in value):
            return _plain_list(value) or _yaml_dump(tuple(value))
        return _dump(value)
    if isinstance(value, str | int | float):
        return _yaml_dump(value)
    return _dump(value)


def _plain_list(items: list[str]) -> str | None:
    """A list of plain words (the parser's fast path, _FAST_LIST) as YAML dumps it; None for any
    other. Each new tag list cost a YAML dump (a quarter of a millisecond)."""
    for item in items:
        if item not in _PLAIN_WORDS and (_FAST_WORD.fullmatch(item) is None or item.lower() in _YAML_SPECIAL):
            return None
    return f"[{', '.join(items)}]"


@functools.lru_cache(maxsize=4096, typed=True)  # typed: True and 1 are different YAML
def _yaml_dump(value: str | float | tuple[str, ...]) -> str:
    """A priority, a number or a tag list as YAML: the same few again and again, and each dump is slow."""
    return _dump(list(value) if isinstance(value, tuple) else value)


def _dump(value: Any) -> str:
    dumped: str = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000)
    return dumped.strip().removesuffix("...").strip()


def _owned_lines(fields: Mapping[str, Any]) -> dict[str, str]:
    lines: dict[str, str] = {}
    for key in OWNED_KEYS:
        if key not in fields:
            continue
        value = fields[key]
        if value is None or (key == "tags" and not value):
            lines[key] = ""
        else:
            lines[key] = f"{key}: {_yaml_scalar(list(value) if key == 'tags' else value)}"
    return lines


def render_new(title: str, content: str, fields: Mapping[str, Any]) -> str:
    """A new file in mem-mcp's layout: frontmatter, '# Title', content, created footer."""
    lines = [line for line in _owned_lines(fields).values() if line]
    created = fields.get("createdAt")
    footer = f"\n\n---\n*Created: {_yaml_scalar(created)}*\n" if created else "\n"
    return "---\n" + "\n".join(lines) + "\n---\n" + f"# {title}\n\n{content.strip()}" + footer


def edit_frontmatter(fm_text: str, fields: Mapping[str, Any]) -> str:
    """Change only the given owned keys in a frontmatter block; every other byte stays as it was.

    A key's value may span continuation lines (a block list of tags); those go with it.
    ``None`` (or empty tags) removes the key.
    """
    wanted = _owned_lines(fields)
    out: list[str] = []
    lines = fm_text.split("\n") if fm_text else []
    done: set[str] = set()
    i = 0
    while i < len(lines):
        line = lines[i]
        match = _FM_KEY.match(line)
        key = match.group(2) if match else None
        if key in wanted:
            i += 1
            while i < len(lines) and (
                lines[i][:1] in (" ", "\t") or lines[i].startswith("- ") or lines[i].rstrip() == "-"
            ):
                i += 1
            if wanted[key] and key not in done:
                out.append(wanted[key])
            done.add(key)
            continue
        out.append(line)
        i += 1
    missing = [wanted[k] for k in wanted if k not in done and wanted[k]]
    if missing:
        # Insert before trailing blank lines so the block keeps its shape.
        tail = 0
        while tail < len(out) and out[len(out) - 1 - tail] == "":
            tail += 1
        out[len(out) - tail : len(out) - tail] = missing
    return "\n".join(out)


def rewrite(raw_text: str, fields: Mapping[str, Any], *, title: str | None, content: str | None) -> str:
    """New text of an existing file with some owned fields and optionally title/content replaced.

    Unknown keys, key order, line endings (CRLF kept) and untouched body bytes are preserved.
    """
    bom = "\ufeff" if raw_text.startswith("\ufeff") else ""
    text = raw_text[len(bom) :]
    crlf = "\r\n" in text
    if crlf:
        text = text.replace("\r\n", "\n")
    fm_text, body, _ = _split(text)
    if fm_text is None:
        fm_text = ""  # legacy file: the whole original text becomes the body, under a new frontmatter
    new_fm = edit_frontmatter(fm_text, fields)
    if title is not None or content is not None:
        body = _replace_body(body, title, content)
    out = "---\n" + (new_fm + "\n" if new_fm and not new_fm.endswith("\n") else new_fm) + "---\n" + body
    if crlf:
        out = out.replace("\n", "\r\n")
    return bom + out


def _replace_body(body: str, title: str | None, content: str | None) -> str:
    footer_match = _FOOTER.search(body.rstrip() + "\n")
    footer = footer_match.group(0) if footer_match else "\n"
    main = body.rstrip() + "\n"
    if footer_match:
        main = main[: footer_match.start()]
    heading = _HEADING.match(main)
    old_title = heading.group(1).strip() if heading else None
    old_content = main[heading.end() :].strip("\n") if heading else main.strip("\n")
    new_title = title if title is not None else old_title
    new_content = content.strip() if content is not None else old_content
    head = f"# {new_title}\n\n" if new_title else ""
    return head + new_content + (footer if footer.strip() else "\n")
