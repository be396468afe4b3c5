"""`masdsl` command line: check | graph | warm-start | run | sweep | eval | trace | view | export | fmt | new | lsp | env | completion.

Each subcommand lives in `masdsl/commands/<name>.py` with `add_arguments(parser)` and
`main(args) -> int`, imported only when used: `masdsl check` imports `commands/check.py` and
no other command module (never torch, the runtime or MLflow); `masdsl --help` imports none
(it lists `COMMANDS`), only `masdsl completion` imports them all. A heavy command is split
(`masdsl.commands`): its light module names its `BODY` and answers with `prepare(args)` what
needs no torch; the body module is imported here only when the command goes ahead. Exit status: 0 ok, 1 "something to change" (`fmt --check`),
2 user error (also a bad command line), 3 internal error (a bug in masdsl), 130 interrupted (Ctrl-C).

Global flags, accepted before the command or anywhere after it: `--debug` (tracebacks of
internal errors), `-v`/`--verbose` (other libraries' logs: the inference engines' start-up logs,
sets `MASDSL_VERBOSE=1`, which `masdsl.runtime.backends.vllm.environment` reads; without it
`output.libraries` hides INFO lines and loading bars), `-q`/`--quiet` (only warnings, errors
and results), `--color=auto|always|never` (and `NO_COLOR`; `masdsl.commands.output`),
`-h`/`--help` (the command's help, even among a `run`/`eval` command's overrides).
`masdsl --version` prints the installed version.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

import masdsl
from masdsl.commands import output
from masdsl.errors import UserError
from masdsl.startup import start_owned_process

COMMANDS = {
    "check": "parse and validate .mas files; errors with file:line:col",
    "graph": "show the turn graph and the AT-GRPO groups it forms",
    "run": "train a workflow with AT-GRPO (rollout -> group -> update -> sync)",
    "sweep": "train every arm of an override grid on several seeds (Ray tasks), then compare them (MLflow)",
    "eval": "roll out a workflow on its eval split and report metrics by role and turn",
    "trace": "print readable transcripts of a run's episodes",
    "view": "the AT-GRPO groups of a run as an HTML page: K candidates side by side, filters (--serve: on 127.0.0.1)",
    "serve-env": "serve an environment over HTTP, for workflows that name it with `env http(\"http://HOST:PORT\")` "
                 "(--openenv: as an OpenEnv server)",
    "warm-start": "a short supervised warm start on the env's demonstrations, before `run` (a model folder)",
    "export": "write a run's trained policies as Hugging Face folders (or PEFT adapters)",
    "fmt": "rewrite .mas files in the canonical layout (--check: list files that would change)",
    "new": "start a workflow: NAME.mas plus a Python file with a reward function and an env stub",
    "lsp": "language server for editors (stdio): diagnostics, hover, definition, completion, rename",
    "env": "report versions, devices, the sandbox's isolation and the model cache (for bug reports)",
    "completion": "print a shell completion script (bash, zsh or fish)",
}
FULL_PARSER = ("completion",)  # commands that need every command's arguments


VERBOSE_ENV = "MASDSL_VERBOSE"  # set by --verbose; read where engines start (vllm/environment.py)
HELP_FLAGS = ("-h", "--help")
GLOBAL_FLAGS = {"--debug": "debug", "--verbose": "verbose", "-v": "verbose", "--quiet": "quiet", "-q": "quiet"}


def version() -> str:
    """The installed package's version (its metadata), else the source tree's."""
    import importlib.metadata  # start-up: ~30 ms, paid only by `--version`

    try:
        return importlib.metadata.version("masdsl")
    except importlib.metadata.PackageNotFoundError:
        return masdsl.__version__


class _Version(argparse.Action):
    """`--version`, reading the package metadata only when asked."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(f"masdsl {version()}")
        parser.exit()


def command_of(argv: list[str]) -> str | None:
    """The command named on the command line (the first word that is one), else None.

    >>> command_of(["--color", "never", "check", "x.mas"]), command_of(["--help"]), command_of(["chek"])
    ('check', None, None)
    """
    after_color = False
    for word in argv:
        if word in COMMANDS:
            return word
        if not word.startswith("-") and not after_color:
            return None
        after_color = len(word) > 3 and "--color".startswith(word)  # `--color WHEN` (or an abbreviation of it)
    return None


def add_global_flags(p: argparse.ArgumentParser, top: bool) -> None:
    """The global flags: shown on the top parser, accepted (hidden) after each command."""
    def shown(text: str) -> str:
        return text if top else argparse.SUPPRESS

    default = {} if top else {"default": argparse.SUPPRESS}
    p.add_argument("--debug", action="store_true", help=shown("show Python tracebacks for internal errors"), **default)
    p.add_argument("-v", "--verbose", action="store_true", **default,
                   help=shown("show other libraries' logs: the engines' start-up (vLLM, Triton), INFO lines, "
                              "loading bars (hidden by default)"))
    p.add_argument("-q", "--quiet", action="store_true", **default,
                   help=shown("only warnings, errors and results: no progress bars or status lines"))
    p.add_argument("--color", choices=output.COLOR_MODES, metavar="WHEN", **({"default": "auto"} if top else default),
                   help=shown("colour: auto (a terminal, and NO_COLOR unset), always, never (default: auto)"))


def build_parser(command: str | None = None, bare: bool = False) -> argparse.ArgumentParser:
    """The CLI's parser; with `command`, only that command's module is imported (the others'
    arguments are not needed to parse its command line); `bare`, none (a command line without a
    command: `--help`, `--version`, a mistyped command)."""
    parser = argparse.ArgumentParser(prog="masdsl", description="Multi-agent LLM workflows trained with AT-GRPO.")
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    add_global_flags(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_global_flags(p, top=False)
        p.set_defaults(_parser=p)
        if bare or (command is not None and name != command):
            continue
        try:
            module_name = f"masdsl.commands.{name.replace('-', '_')}"  # warm-start -> warm_start
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def global_flags(args: argparse.Namespace) -> bool:
    """Take the global flags and `-h`/`--help` out of a command's overrides (`run FILE --help`:
    argparse leaves words after the file there); True when help was asked for."""
    rest = getattr(args, "overrides", None)
    if not rest:
        return False
    kept, words = [], iter(rest)
    for word in words:
        if word in GLOBAL_FLAGS:
            setattr(args, GLOBAL_FLAGS[word], True)
        elif word == "--color" or word.startswith("--color="):
            value = word.partition("=")[2] if "=" in word else next(words, "")
            if value not in output.COLOR_MODES:
                raise UserError(f"--color: expected one of {', '.join(output.COLOR_MODES)}; got `{value}`")
            args.color = value
        elif word not in HELP_FLAGS:
            kept.append(word)
    args.overrides = kept
    return any(a in HELP_FLAGS for a in rest)


def prepare(args: argparse.Namespace) -> bool:
    """Apply the global flags (colour, quiet, verbose); True when the command's help was asked for."""
    asked_help = global_flags(args)
    if getattr(args, "quiet", False) and getattr(args, "verbose", False):
        raise UserError("--quiet and --verbose together: pick one")
    output.configure(getattr(args, "color", "auto"), getattr(args, "quiet", False))
    if getattr(args, "verbose", False):
        os.environ[VERBOSE_ENV] = "1"  # inherited by the engine processes started later
    output.libraries(getattr(args, "verbose", False))  # before the libraries load: they read it at import
    return asked_help


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed command. A split command's light module answers first (`prepare`: the
    refusals, `--dry-run`, `--print-config`); its body module, which imports torch and the rest at
    its top, is imported only when the command goes ahead, and gets what `prepare` made."""
    light = args._module
    if not hasattr(light, "BODY"):
        return int(light.main(args) or 0)
    prepared = light.prepare(args)
    if isinstance(prepared, int):  # answered without the body
        return prepared
    return int(importlib.import_module(light.BODY).main(args, prepared) or 0)


def main(argv: list[str] | None = None) -> int:
    command = command_of(sys.argv[1:] if argv is None else argv)
    parser = build_parser(None if command in FULL_PARSER else command, bare=command is None)
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    args._root_parser = parser
    try:
        if prepare(args):
            args._parser.print_help()
            return 0
        if not hasattr(args, "_module"):
            print(f"masdsl: `{args.command}` is not available in this build", file=sys.stderr)
            return 3
        return run_command(args)
    except UserError as exc:
        print(exc.render(color=output.use_color(sys.stderr)), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("masdsl: interrupted", file=sys.stderr)
        return 130
    except Exception:  # noqa: BLE001 - the last line of defence: never a raw traceback
        if getattr(args, "debug", False):
            traceback.print_exc()
        else:
            exc = sys.exc_info()[1]
            print(f"internal error: {type(exc).__name__}: {exc}\nthis is a bug in masdsl; rerun with --debug for the traceback", file=sys.stderr)
        return 3


def program() -> int:
    """The `masdsl` command and `python -m masdsl`: a process of masdsl's own (`masdsl.startup`)."""
    start_owned_process()
    return main()


if __name__ == "__main__":
    sys.exit(program())
