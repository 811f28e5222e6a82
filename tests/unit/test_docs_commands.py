"""The ``noetl-cloud ...`` commands README.md and docs/*.md show parse against the CLI's argument parser
(parse only: nothing runs), and the README lists every subcommand the parser has.

A command is taken from a fenced code block line or an inline code span, up to a comment, a shell
operator or the end of the span; the synopsis forms the docs use are read as a person reads them:
``[...]`` is an option shown present (the first of ``a|b``), ``<name>`` a value, a trailing
``...`` "more of the same", two spaces or more start the line's description.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from noetl_cloud.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`]+)`")  # a span may wrap onto the next line
#: The program at the start of a command, or after ``$(`` / ``&&`` / ``;`` (not an image tag's name).
_COMMAND = re.compile(r"(?:^|\$\(|&&\s*|;\s*)(?:\S*/)?noetl-cloud(?=\s|$)(.*)")
_END = re.compile(r"\s+#|&&|\|\||;|\)|\s{2,}|\s\|\s")


def commands(text: str) -> list[str]:
    """Every ``noetl-cloud`` command of a markdown text, as written (after the program name)."""
    found = []
    pieces = [line for block in _FENCE.findall(text) for line in block.splitlines()[1:-1]]
    pieces += [span.replace("\n", " ") for span in _SPAN.findall(_FENCE.sub("", text))]
    for piece in pieces:
        piece = piece.strip()
        while (match := _COMMAND.search(piece)) is not None:
            rest = match.group(1)
            command = _END.split(rest, maxsplit=1)[0].strip()
            if command:
                found.append(command)
            piece = rest
    return found


def argv_of(command: str) -> list[str]:
    """The arguments a synopsis stands for."""
    text = re.sub(r"<[^>]+>", "x", command)
    text = re.sub(r"(?<!\S)\[([^\]|]*)\|[^\]]*\](?!\S)", r"\1", text)  # [a|b] -> a
    text = re.sub(r"(?<!\S)\[|\](?!\S)", " ", text)  # [--opt v] -> --opt v; a value's own brackets stay
    argv = shlex.split(text)
    return [
        arg for index, arg in enumerate(argv) if not (arg == "..." and index and not argv[index - 1].startswith("-"))
    ]


def all_commands() -> list[tuple[str, str]]:
    return [(doc.relative_to(ROOT).as_posix(), cmd) for doc in DOCS for cmd in commands(doc.read_text())]


def test_the_docs_show_commands_of_every_subcommand() -> None:
    shown = {argv_of(cmd)[0] for _, cmd in all_commands() if argv_of(cmd)}
    assert {"local", "db", "run", "execute", "spool", "replay", "subscribe", "demo", "--version"} <= shown


def test_the_readme_lists_every_subcommand_of_the_parser() -> None:
    parser = build_parser()
    (sub,) = [action for action in parser._actions if action.dest == "command"]
    listed = {argv_of(cmd)[0] for cmd in commands((ROOT / "README.md").read_text()) if argv_of(cmd)}
    assert set(sub.choices) <= listed, set(sub.choices) - listed  # type: ignore[arg-type]


@pytest.mark.parametrize("where,command", all_commands())
def test_each_documented_command_parses(where: str, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A command parses; a mention in prose (`noetl-cloud run`) names a real command and lacks only the
    arguments it requires."""
    argv = argv_of(command)
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:  # --help and --version end the parse with 0; a bad command with 2
        err = capsys.readouterr().err
        mention = "the following arguments are required" in err and not all_options_given(argv)
        assert exc.code == 0 or mention, f"{where}: noetl-cloud {command}: {err}"


def all_options_given(argv: list[str]) -> bool:
    """Whether ``argv`` looks like a whole command rather than a mention (it has options or values)."""
    return any(arg.startswith("-") or "." in arg or "/" in arg for arg in argv[1:])


def test_the_extraction_reads_spans_blocks_and_synopses() -> None:
    text = (
        'Run `eval "$(.venv/bin/noetl-cloud local env)"` then\n'
        "`noetl-cloud local down --purge && noetl-cloud local up`.\n"
        "```\nnoetl-cloud spool ls <subscription> [--lane L] [--limit 100]   list  # comment\n```\n"
    )
    assert commands(text) == [
        "spool ls <subscription> [--lane L] [--limit 100]",
        "local env",
        "local down --purge",
        "local up",
    ]
    assert argv_of("run p.yaml [--set k=v ...]") == ["run", "p.yaml", "--set", "k=v"]
    assert argv_of("local up [--roles all|execute,ingress]") == ["local", "up", "--roles", "all"]
    assert argv_of("execute p.yaml --set letters='[x, y]'") == ["execute", "p.yaml", "--set", "letters=[x, y]"]
