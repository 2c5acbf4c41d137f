"""The `mqindex` command line: one sub-command per module, imported only when used.

Each command module exposes `add_arguments(parser)` and `run(args) -> int`. Only the module of the command
given is imported (to define its arguments and run it): `mqindex --help` and the client commands start
without loading the server, the broker or the HTTP client libraries.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

# command -> (module, one-line help). A command appears once its module exists.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("api.cli.serve", "start broker + index + HTTP on one process"),
    "produce": ("api.cli.client", "produce a message through a server"),
    "consume": ("api.cli.client", "read a partition from an offset"),
    "query": ("api.cli.client", "find messages by key"),
    "get": ("api.cli.client", "fetch one message by id"),
    "nodes": ("api.cli.client", "list the cluster's nodes and the partitions each leads"),
    "reassign": ("api.cli.client", "move a partition to another node"),
    "rebalance": ("api.cli.client", "plan (and with --execute run) moves that even out the partitions"),
    "topics": ("api.cli.topics", "create, list, describe, alter (retention configs) and delete topics"),
    "groups": ("api.cli.groups", "list, describe (lag), delete consumer groups and reset their offsets"),
    "acls": ("api.cli.acls", "add, list and remove access control rules (Kafka ACLs, also for HTTP)"),
    "inspect-index": ("api.cli.inspect_index", "dump an index file (native or RocketMQ format)"),
    "inspect-object": ("api.cli.inspect_object", "dump a stream object's data blocks and index block"),
    "import-rocketmq": ("api.cli.import_rocketmq", "register a directory of RocketMQ tiered index files"),
    "scrub": ("api.cli.scrub", "verify every checksum of the stored objects and index files; list the damaged"),
    "spark-build": ("api.cli.spark_build", "batch-build compacted indexes from the broker's objects"),
    "search": ("api.cli.search", "find messages by key or SQL predicate with a Spark job over the stored objects"),
    "compact": ("api.cli.compact", "run a broker compaction cycle (--now) or show its totals"),
    "security": ("api.cli.security", "print the stored (hashed) form of a token or a SCRAM password"),
    "bench": ("bench.cli", "run benchmarks against their peers"),
}


#: modules of commands that only print their results (they log nothing): no logging set up, a faster start
QUIET = frozenset({"api.cli.client", "api.cli.topics", "api.cli.compact", "api.cli.groups", "api.cli.acls"})


class UsageError(Exception):
    """A mistake in what the user gave that is found after the arguments are parsed (in an environment variable,
    say): the command's usage and the message, exit status 2, as argparse answers a bad argument."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option that takes a value shows its default: the help's own words, else "(default: X)"."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (not action.option_strings or action.nargs == 0 or action.required or "default" in text
                or action.default is argparse.SUPPRESS):
            return text
        if action.default is None or action.default == []:
            return f"{text} (default: none)"
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


class _Version(argparse.Action):
    """--version: the installed package's version, looked up only when asked."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("mqindex")
        except PackageNotFoundError:
            v = "unknown (not installed)"
        print(f"mqindex {v}")
        parser.exit()


def available() -> dict[str, tuple[str, str]]:
    return {name: spec for name, spec in COMMANDS.items() if importlib.util.find_spec(spec[0]) is not None}


#: the client commands' options that may also come before the command (`mqindex --url U topics list`): option ->
#: whether it takes a value. They are the command's own options (each command says which it has), moved after it.
BEFORE_COMMAND = {"--url": True, "--token": True, "--json": False}
#: the top-level options that may also come after the command (`mqindex topics list -v`)
AFTER_COMMAND = ("-v", "--verbose")


def chosen(argv: Sequence[str]) -> str | None:
    """The command named in argv (the first word that is not an option or a value of one), if any."""
    takes_value = False
    for word in argv:
        if takes_value:
            takes_value = False
        elif word == "--":
            return None
        elif not word.startswith("-"):
            return word if word in COMMANDS else None
        else:
            takes_value = BEFORE_COMMAND.get(word, False)
    return None


def command_first(argv: Sequence[str]) -> list[str]:
    """argv with the options of BEFORE_COMMAND given before the command moved after the command's own words (before
    a `--`), so that they mean what they mean after it: `--url U topics list` reads as `topics list --url U`.
    Anything else is left where it is (an option the command does not have is refused by the command's parser)."""
    moved: list[str] = []
    rest: list[str] = []
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--" or not word.startswith("-"):
            break
        name = word.split("=", 1)[0]
        if name in BEFORE_COMMAND:
            n = 2 if BEFORE_COMMAND[name] and "=" not in word else 1
            moved += words[i:i + n]
            i += n
        else:
            rest.append(word)
            i += 1
    rest += words[i:]
    if not moved:
        return rest
    end = rest.index("--") if "--" in rest else len(rest)
    return rest[:end] + moved + rest[end:]


def _own_usage(parser: argparse.ArgumentParser) -> None:
    """Every parser below `parser` (an action of a command: `topics create`) reports its own usage errors."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child.set_defaults(_parser=child)
                _own_usage(child)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; the arguments of the command named in `argv` only (of every command when argv is None)."""
    parser = Parser(prog="mqindex", description="Find messages by key or id on object storage.",
                    epilog="--url, --token and --json may come before the command too (mqindex --url URL topics "
                           "list); -v after it too.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    only = None if argv is None else chosen(argv)
    # a command given: its parser only (each parser costs a millisecond or two); else all of them, to list
    commands = {only: COMMANDS[only]} if only is not None else available()
    for name, (module, help_text) in commands.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module, _name=name, _parser=p)
        if argv is None or name == only:
            mod = importlib.import_module(module)
            add = getattr(mod, f"add_{name.replace('-', '_')}_arguments", None) or mod.add_arguments
            add(p)
            _own_usage(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = command_first(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parse(parser, argv)
    if args.command is None:  # bare `mqindex`: what there is to run
        parser.print_help()
        return 0
    if args._module not in QUIET:
        import logging

        from api.cli import log_format

        log_format.configure(logging.DEBUG if args.verbose else logging.INFO)
        if not args.verbose:
            logging.getLogger("httpx").setLevel(logging.WARNING)  # a request line each: noise beside the output
    mod = importlib.import_module(args._module)
    run = getattr(mod, f"run_{args._name.replace('-', '_')}", None) or mod.run
    try:
        rc = int(run(args) or 0)
        sys.stdout.flush()  # here, not at exit: a reader gone (`| head`) is found while it can be answered
        return rc
    except UsageError as exc:
        args._parser.error(str(exc))  # usage and message on stderr, exit 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _reader_gone()
    except Exception as exc:  # noqa: BLE001 - one clear line for the user, not a traceback
        if args.verbose:
            raise
        from api.security.redact import REDACTOR  # no password or key of a URL in the message

        print(f"mqindex {args._name}: error: {REDACTOR.text(str(exc))}", file=sys.stderr)
        return 1


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """The arguments; an argument nobody takes is refused by the parser of the command (or action) it was given
    to, naming it, with that command's usage (argparse would print the top-level usage), and the nearest option of
    that command when the word looks like a misspelling of it. -v/--verbose after the command means what it means
    before it."""
    args, extra = parser.parse_known_args(argv)
    if any(word in AFTER_COMMAND for word in extra):
        args.verbose = True
        extra = [word for word in extra if word not in AFTER_COMMAND]
    if extra:
        import difflib  # only on this error path: the start of a command stays light

        owner: argparse.ArgumentParser = getattr(args, "_parser", parser)
        message = f"unrecognized arguments: {' '.join(extra)}"
        options = [o for a in owner._actions for o in a.option_strings if o.startswith("--")]
        bad = next((w.split("=", 1)[0] for w in extra if w.startswith("--")), None)
        near = difflib.get_close_matches(bad, options, n=1, cutoff=0.85) if bad else []
        if near:
            message += f" (did you mean {near[0]}?)"
        owner.error(message)
    return args


def _reader_gone() -> int:
    """The end of a pipe was closed (`mqindex consume ... | head -1`): stop quietly, as Unix tools do.

    Python ignores SIGPIPE, so a write to a closed pipe raises BrokenPipeError instead of ending the process the
    way it ends `cat` or `seq`. The standard library's recipe (the `signal` module's "Note on SIGPIPE"): point
    stdout at /dev/null, so that the interpreter's last flush at exit does not fail again with "Exception
    ignored ... BrokenPipeError". The exit status is 141 (128 + SIGPIPE), what the shell reports for `seq` or
    `yes` stopped the same way: not 0, since the output was cut short (`set -o pipefail` sees it as for any
    other tool), and not 1, which this command uses for its errors.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


if __name__ == "__main__":  # python -m api.cli.main: the package's module, whose UsageError the commands raise
    from api.cli import main as package_main

    sys.exit(package_main.main())
