"""memvault's command line: the parser, dispatch to each command, and clear errors for bad arguments."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from commands import MEMVAULT, clean_env

from memvault import __version__
from memvault.cli.main import main

NOTE = "---\npriority: P1\ncreatedAt: 2026-01-05T10:00:00.000Z\n---\n# Deploy\n\nmake stage\n"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of ``memvault argv...``, in this process."""
    try:
        status = main(list(argv))
    except SystemExit as exc:  # argparse: --help, --version and bad arguments
        status = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return status, out, err


def commands(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The commands ``memvault --help`` lists."""
    status, out, _ = run(capsys, "--help")
    assert status == 0
    listed = re.search(r"\{([a-z,-]+)\}", out)
    assert listed, out
    return listed.group(1).split(",")


def test_version_says_which_memvault(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--version")[:2] == (0, f"memvault {__version__}\n")


def test_help_lists_the_commands_a_user_needs(capsys: pytest.CaptureFixture[str]) -> None:
    listed = commands(capsys)
    for name in ("serve", "stdio", "keys", "check", "evict", "migrate", "reindex", "export", "import"):
        assert name in listed
    assert len(listed) == len(set(listed))


def explains(name: str, out: str) -> None:
    usage, _, rest = out.partition("\n\n")
    assert usage.startswith(f"usage: memvault {name}"), name
    description = rest.split("\n\n")[0]
    assert len(description.split()) >= 8, f"memvault {name} --help says too little: {description!r}"


def test_each_command_explains_itself_in_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    for name in commands(capsys):
        if name == "hook":  # its deadline would end this process: see the test of hooks below
            continue
        status, out, err = run(capsys, name, "--help")
        assert (status, err) == (0, ""), name
        explains(name, out)


def test_no_command_says_one_is_needed(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys)
    assert (status, out) == (2, "")
    assert "the following arguments are required: command" in err


def test_an_unknown_command_is_named_with_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "frobnicate")
    assert status == 2
    assert "invalid choice: 'frobnicate'" in err
    assert "'check'" in err and "'serve'" in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("serve", "--port", "abc"), "argument --port: invalid int value: 'abc'"),
        (("keys", "frob"), "argument action: invalid choice: 'frob'"),
        (("nginx",), "the following arguments are required: --backends"),
        (("import",), "the following arguments are required: file"),
        (("evict", "--bogus"), "unrecognized arguments: --bogus"),
    ],
)
def test_a_bad_argument_is_refused_with_what_is_wrong(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], said: str
) -> None:
    status, out, err = run(capsys, *argv)
    assert (status, out) == (2, "")
    assert said in err
    assert "Traceback" not in err


def test_stdio_without_a_token_says_to_pass_one(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, err = run(capsys, "stdio", "--root", str(tmp_path))
    assert (status, out) == (2, "")
    assert err == "memvault: stdio serves one vault: pass --token NAME.\n"


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("MEMVAULT_PORT", "abc", "MEMVAULT_PORT must be a number, not 'abc'."),
        ("MEMVAULT_EMBEDDER", "nonsense", "MEMVAULT_EMBEDDER must be wordllama, hash"),
    ],
)
def test_a_bad_setting_in_the_environment_is_one_clear_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    name: str,
    value: str,
    said: str,
) -> None:
    monkeypatch.setenv(name, value)
    status, out, err = run(capsys, "check", "--root", str(tmp_path))
    assert (status, out) == (2, "")
    assert err.startswith(f"memvault: {said}")
    assert err.count("\n") == 1


def test_a_hook_never_fails_its_client_even_on_a_bad_setting(tmp_path: Path) -> None:
    """Claude Code shows a failing hook to the user: a hook exits 0 and says what is wrong on stderr."""
    done = subprocess.run(
        [str(MEMVAULT), "hook", "session-start", "--root", str(tmp_path)],
        env=clean_env(MEMVAULT_PORT="abc"),
        input="{}",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    assert done.stdout == ""
    assert "MEMVAULT_PORT must be a number" in done.stderr
    helped = subprocess.run(
        [str(MEMVAULT), "hook", "--help"], env=clean_env(), capture_output=True, text=True, timeout=60
    )
    assert (helped.returncode, helped.stderr) == (0, "")
    explains("hook", helped.stdout)


def test_the_root_comes_from_the_environment_unless_given(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    broken = tmp_path / "env" / "alice"
    broken.mkdir(parents=True)
    (broken / "bad.md").write_text("---\npriority: [unclosed\n---\n# Bad\n", encoding="utf-8")
    clean = tmp_path / "flag" / "alice"
    clean.mkdir(parents=True)
    (clean / "deploy.md").write_text(NOTE, encoding="utf-8")
    monkeypatch.setenv("MEMVAULT_ROOT", str(tmp_path / "env"))
    assert run(capsys, "check")[0] == 1  # the environment's root: a broken file to fix
    assert run(capsys, "check", "--root", str(tmp_path / "flag"))[0] == 0  # --root wins


def test_a_command_reaches_the_vault_it_names(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """migrate --dry-run lists the hand-made file and changes nothing; --token keeps to one vault."""
    for token in ("alice", "bob"):
        (tmp_path / token).mkdir()
        (tmp_path / token / f"{token}-plain.md").write_text("# Plain\n\nno frontmatter\n", encoding="utf-8")
    status, out, err = run(capsys, "migrate", "--root", str(tmp_path), "--token", "bob", "--dry-run")
    assert status == 0, err
    assert "bob-plain.md" in out and "alice-plain.md" not in out
    assert (tmp_path / "bob" / "bob-plain.md").read_text(encoding="utf-8") == "# Plain\n\nno frontmatter\n"


def test_a_missing_vault_folder_is_said_not_created(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, err = run(capsys, "check", "--root", str(tmp_path / "nowhere"))
    assert (status, out) == (2, "")
    assert err.startswith("memvault: no vault at ") and "--root DIR or MEMVAULT_ROOT" in err
    assert not (tmp_path / "nowhere").exists()


def test_an_unsafe_token_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, err = run(capsys, "check", "--root", str(tmp_path), "--token", "../etc")
    assert status == 2
    assert err == "memvault: '../etc' is not a valid token.\n"
