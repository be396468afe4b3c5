"""docs/cli.md keeps up with the CLI: every command, every flag (read from the argparse parser
itself) and every exit status the CLI returns is documented, and the command table renders."""

from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

import pytest

from masdsl import cli

ROOT = Path(__file__).parents[1]
DOC = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
PARSER = cli.build_parser()
SUBCOMMANDS = next(a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction)).choices


def shown_flags(parser: argparse.ArgumentParser) -> list[str]:
    """The option strings a parser shows in its help (hidden copies of the global flags left out)."""
    return [s for a in parser._actions if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)
            for s in a.option_strings]


def section(name: str) -> str:
    """The text of the `## \\`masdsl NAME\\`` section, up to the next `## ` heading."""
    m = re.search(rf"^## `masdsl {re.escape(name)}`\s*$(.*?)(?=^## |\Z)", DOC, re.M | re.S)
    assert m, f"docs/cli.md has no `## \\`masdsl {name}\\`` section"
    return m.group(1)


def mentions(text: str, flag: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


def table_rows() -> list[list[str]]:
    """The cells of the command table (the first table: `| command | what it does |`)."""
    lines = DOC[DOC.index("| command | what it does |"):].splitlines()
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows


def test_the_parser_has_every_command():
    assert list(SUBCOMMANDS) == list(cli.COMMANDS)
    assert {"check", "graph", "run", "eval", "trace", "export", "fmt", "new", "lsp", "env", "completion"} <= set(SUBCOMMANDS)


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_command_is_in_the_table_and_has_a_section(name):
    assert any(row[0].startswith(f"`masdsl {name}") for row in table_rows()), f"`masdsl {name}` not in the table"
    assert section(name).strip()


def test_the_command_table_renders():
    rows = table_rows()
    assert len(rows) == len(cli.COMMANDS), [r[0] for r in rows]
    assert all(len(row) == 2 and row[1] for row in rows), rows  # two cells each: no stray `|`
    first = DOC.index("| command | what it does |")
    assert DOC.count("| `masdsl export", first) == 1  # one export row, inside the table


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_flag_of_a_command_is_in_its_section(name):
    text = section(name)
    missing = [f for f in shown_flags(SUBCOMMANDS[name]) if not mentions(text, f)]
    assert not missing, f"docs/cli.md, `masdsl {name}`: flags not documented: {missing}"


def test_every_global_flag_is_documented():
    habits = DOC[DOC.index("## Habits every command shares"):]
    missing = [f for f in shown_flags(PARSER) if not mentions(habits, f)]
    assert not missing, f"global flags not in docs/cli.md: {missing}"
    for value in ("auto", "always", "never"):
        assert f"--color={value}" in DOC or value in DOC[DOC.index("--color"):][:800]
    assert "NO_COLOR" in DOC


def returned_codes() -> set[int]:
    """The exit statuses the CLI returns: every integer `return` in cli.py and the commands."""
    codes = {2}  # argparse's own usage errors
    files = [ROOT / "masdsl" / "cli.py", *sorted((ROOT / "masdsl" / "commands").glob("*.py"))]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name == "main":
                for ret in ast.walk(node):
                    if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Constant) \
                            and isinstance(ret.value.value, int) and not isinstance(ret.value.value, bool):
                        codes.add(ret.value.value)
    return codes


def test_every_exit_status_is_documented():
    codes = returned_codes()
    assert {0, 1, 2, 3, 130} <= codes, codes
    table = DOC[DOC.index("## Exit status"):DOC.index("## Habits every command shares")]
    documented = {int(c) for c in re.findall(r"^\| \*\*(\d+)\*\* \|", table, re.M)}
    assert codes <= documented, f"exit statuses not in docs/cli.md: {sorted(codes - documented)}"
