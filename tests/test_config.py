"""Tests of memvault.config: every MEMVAULT_* variable, CLI overrides, clear errors, and the README table."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest

from memvault.config import SETTINGS, TOOL_GROUPS, Settings
from memvault.errors import InvalidArgument

README = Path(__file__).parents[1] / "README.md"


def test_defaults_without_any_variable() -> None:
    s = Settings.from_env({})
    assert s == Settings()
    assert s.root == Path("memories")
    assert (s.host, s.port) == ("127.0.0.1", 3000)
    assert s.allowed_hosts == ()
    assert s.tokens_file is None
    assert (s.max_body_bytes, s.max_content_chars, s.max_reply_chars) == (1024 * 1024, 100_000, 20_000)
    assert (s.ttl_p1_days, s.ttl_p2_days, s.capacity, s.evict_interval_hours) == (90.0, 30.0, 50, 24.0)
    assert s.access_writeback == "day"
    assert s.dedupe_window_seconds == 300.0
    assert s.watch is True
    assert s.poll_interval_seconds == 2.0
    assert s.tools == TOOL_GROUPS
    assert s.log_level == "info"


def test_every_variable_is_parsed_to_its_type(tmp_path: Path) -> None:
    env = {
        "MEMVAULT_ROOT": str(tmp_path / "vault"),
        "MEMVAULT_HOST": "0.0.0.0",
        "MEMVAULT_PORT": "8080",
        "MEMVAULT_ALLOWED_HOSTS": "mybox:3000, mybox:* ,,other",
        "MEMVAULT_TOKENS_FILE": str(tmp_path / "tokens.txt"),
        "MEMVAULT_MAX_BODY_BYTES": "2048",
        "MEMVAULT_MAX_CONTENT_CHARS": "500",
        "MEMVAULT_MAX_REPLY_CHARS": "4000",
        "MEMVAULT_TTL_P1_DAYS": "45.5",
        "MEMVAULT_TTL_P2_DAYS": "7",
        "MEMVAULT_CAPACITY": "12",
        "MEMVAULT_EVICT_INTERVAL_HOURS": "0.5",
        "MEMVAULT_ACCESS_WRITEBACK": "always",
        "MEMVAULT_DEDUPE_WINDOW_SECONDS": "60",
        "MEMVAULT_WATCH": "false",
        "MEMVAULT_POLL_INTERVAL_SECONDS": "0.25",
        "MEMVAULT_TOOLS": "memories, graph",
        "MEMVAULT_LOG_LEVEL": "debug",
    }
    s = Settings.from_env(env)
    assert s.root == tmp_path / "vault"
    assert s.host == "0.0.0.0"
    assert s.port == 8080
    assert s.allowed_hosts == ("mybox:3000", "mybox:*", "other")
    assert s.tokens_file == tmp_path / "tokens.txt"
    assert (s.max_body_bytes, s.max_content_chars, s.max_reply_chars) == (2048, 500, 4000)
    assert s.ttl_p1_days == 45.5
    assert s.ttl_p2_days == 7.0
    assert isinstance(s.ttl_p2_days, float)
    assert s.capacity == 12
    assert s.evict_interval_hours == 0.5
    assert s.access_writeback == "always"
    assert s.dedupe_window_seconds == 60.0
    assert s.watch is False
    assert s.poll_interval_seconds == 0.25
    assert s.tools == ("memories", "graph")
    assert s.log_level == "debug"


FIELD_TYPES = {f.name: str(f.type) for f in dataclasses.fields(Settings)}
# Valid non-default values for settings whose strings are a closed set.
SAMPLES = {
    "access_writeback": ("never", "never"),
    "log_level": ("Warning", "warning"),
    "host": ("::1", "::1"),
    "embedder": ("openai", "openai"),
    "reranker": ("cross-encoder:/models/ce", "cross-encoder:/models/ce"),
    "load_processes": (" 3 ", 3),
    "path_tokens": ("on", "on"),
    "sync": ("git", "git"),
}


def sample(name: str) -> tuple[str, object]:
    """A valid non-default (raw, parsed) pair for any setting, chosen by its field type."""
    if name in SAMPLES:
        return SAMPLES[name]
    default = getattr(Settings(), name)
    kind = FIELD_TYPES[name]
    if kind == "bool":
        return ("no" if default else "yes"), not default
    if kind == "int":
        return f" {default + 1} ", default + 1
    if kind == "float":
        return str(default + 0.5), default + 0.5
    if kind.startswith("tuple"):
        items = default[:1] if default else ("x", "y")
        return " , ".join(items) + ",", tuple(items)
    if "Path" in kind:
        return "/srv/memvault-test", Path("/srv/memvault-test")
    return " some-value ", "some-value"


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_each_setting_is_read_from_its_variable(name: str) -> None:
    raw, expected = sample(name)
    s = Settings.from_env({SETTINGS[name].env: raw})
    assert getattr(s, name) == expected
    assert type(getattr(s, name)) is type(expected)
    others = {n: getattr(s, n) for n in SETTINGS if n != name}
    assert others == {n: getattr(Settings(), n) for n in SETTINGS if n != name}


@pytest.mark.parametrize("name", sorted(n for n in SETTINGS if FIELD_TYPES[n] in ("int", "float", "bool")))
def test_a_non_numeric_or_non_boolean_value_names_its_variable(name: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        Settings.from_env({SETTINGS[name].env: "not-a-value"})
    assert SETTINGS[name].env in str(info.value)


def test_every_setting_has_a_settings_field() -> None:
    fields = {f.name for f in dataclasses.fields(Settings)}
    assert set(SETTINGS) == fields  # each field is a documented variable, each variable a field
    for name, spec in SETTINGS.items():
        assert spec.env == f"MEMVAULT_{name.upper()}"
        assert spec.help.strip()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", True),
        ("true", True),
        ("TRUE", True),
        (" yes ", True),
        ("on", True),
        ("0", False),
        ("false", False),
        ("No", False),
        ("off", False),
    ],
)
def test_boolean_spellings(raw: str, expected: bool) -> None:
    assert Settings.from_env({"MEMVAULT_WATCH": raw}).watch is expected


def test_empty_variables_count_as_unset() -> None:
    env = {spec.env: "" for spec in SETTINGS.values()}
    assert Settings.from_env(env) == Settings()


def test_unrelated_variables_are_ignored() -> None:
    assert Settings.from_env({"PORT": "1", "MEMVAULT": "x", "MEMVAULT_NOPE": "y"}) == Settings()


def test_root_and_tokens_file_expand_the_home_folder() -> None:
    s = Settings.from_env({"MEMVAULT_ROOT": "~/vault", "MEMVAULT_TOKENS_FILE": "~/tokens"})
    assert s.root == Path("~/vault").expanduser()
    assert s.tokens_file == Path("~/tokens").expanduser()
    assert "~" not in str(s.root)


def test_an_infinite_ttl_switches_that_ttl_off() -> None:
    assert math.isinf(Settings.from_env({"MEMVAULT_TTL_P1_DAYS": "inf"}).ttl_p1_days)


def test_cli_overrides_win_over_the_environment(tmp_path: Path) -> None:
    env = {"MEMVAULT_PORT": "8080", "MEMVAULT_ROOT": "/from/env", "MEMVAULT_WATCH": "true"}
    s = Settings.from_env(env, port=9090, root=tmp_path, watch=False)
    assert (s.port, s.root, s.watch) == (9090, tmp_path, False)


def test_a_none_override_means_not_given() -> None:
    s = Settings.from_env({"MEMVAULT_PORT": "8080"}, port=None, host=None)
    assert (s.port, s.host) == (8080, "127.0.0.1")


def test_overrides_are_validated_too() -> None:
    with pytest.raises(InvalidArgument, match="MEMVAULT_PORT"):
        Settings.from_env({}, port=70000)


@pytest.mark.parametrize(
    ("env", "raw"),
    [
        ("MEMVAULT_PORT", "http"),
        ("MEMVAULT_PORT", "80.5"),
        ("MEMVAULT_PORT", "0"),
        ("MEMVAULT_PORT", "65536"),
        ("MEMVAULT_PORT", "-1"),
        ("MEMVAULT_MAX_BODY_BYTES", "1MiB"),
        ("MEMVAULT_MAX_BODY_BYTES", "0"),
        ("MEMVAULT_MAX_CONTENT_CHARS", "-5"),
        ("MEMVAULT_MAX_REPLY_CHARS", "lots"),
        ("MEMVAULT_CAPACITY", "0"),
        ("MEMVAULT_CAPACITY", "ten"),
        ("MEMVAULT_TTL_P1_DAYS", "ninety"),
        ("MEMVAULT_TTL_P1_DAYS", "-1"),
        ("MEMVAULT_TTL_P2_DAYS", "nan"),
        ("MEMVAULT_EVICT_INTERVAL_HOURS", "daily"),
        ("MEMVAULT_EVICT_INTERVAL_HOURS", "-24"),
        ("MEMVAULT_DEDUPE_WINDOW_SECONDS", "5m"),
        ("MEMVAULT_DEDUPE_WINDOW_SECONDS", "-1"),
        ("MEMVAULT_POLL_INTERVAL_SECONDS", "0"),
        ("MEMVAULT_POLL_INTERVAL_SECONDS", "-2"),
        ("MEMVAULT_POLL_INTERVAL_SECONDS", "inf"),
        ("MEMVAULT_WATCH", "maybe"),
        ("MEMVAULT_WATCH", "2"),
        ("MEMVAULT_ACCESS_WRITEBACK", "sometimes"),
        ("MEMVAULT_ACCESS_WRITEBACK", "DAY!"),
        ("MEMVAULT_TOOLS", "memories,everything"),
        ("MEMVAULT_LOG_LEVEL", "verbose"),
    ],
)
def test_invalid_values_name_the_variable(env: str, raw: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        Settings.from_env({env: raw})
    assert env in str(info.value)


def test_log_level_is_case_insensitive() -> None:
    assert Settings.from_env({"MEMVAULT_LOG_LEVEL": "WARNING"}).log_level.lower() == "warning"


def test_zero_ttl_and_zero_intervals_are_allowed() -> None:
    s = Settings.from_env(
        {
            "MEMVAULT_TTL_P2_DAYS": "0",
            "MEMVAULT_EVICT_INTERVAL_HOURS": "0",
            "MEMVAULT_DEDUPE_WINDOW_SECONDS": "0",
        }
    )
    assert (s.ttl_p2_days, s.evict_interval_hours, s.dedupe_window_seconds) == (0.0, 0.0, 0.0)


def test_token_dir_is_under_the_root(tmp_path: Path) -> None:
    assert Settings(root=tmp_path).token_dir("alice") == tmp_path / "alice"


def test_settings_are_immutable() -> None:
    s = Settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.port = 1  # type: ignore[misc]
    assert s.replace(port=1).port == 1
    assert s.port == 3000


def test_every_setting_is_documented_in_the_readme_configuration_table() -> None:
    assert README.is_file(), "README.md is missing; it must document every MEMVAULT_* setting in a table"
    text = README.read_text(encoding="utf-8")
    table_rows = [line for line in text.splitlines() if line.lstrip().startswith("|")]
    documented = set(re.findall(r"MEMVAULT_[A-Z0-9_]+", "\n".join(table_rows)))
    missing = sorted(spec.env for spec in SETTINGS.values() if spec.env not in documented)
    assert not missing, f"settings missing from README.md's configuration table: {missing}"


def test_load_processes_is_auto_or_a_count() -> None:
    assert Settings.from_env({"MEMVAULT_LOAD_PROCESSES": "Auto"}).load_processes is None
    assert Settings.from_env({"MEMVAULT_LOAD_PROCESSES": "0"}).load_processes == 0
    for bad in ("-1", "many"):
        with pytest.raises(InvalidArgument, match="MEMVAULT_LOAD_PROCESSES"):
            Settings.from_env({"MEMVAULT_LOAD_PROCESSES": bad})
