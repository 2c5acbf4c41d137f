"""What `mqindex` shows before it talks to anything: the command list, --version, every flag's help and default,
one wording for the data directory, and a start that loads no server or HTTP library."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from api.cli import data_dir
from api.cli.main import COMMANDS, HelpFormatter, build_parser

MQINDEX = str(Path(sys.executable).parent / "mqindex")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MQINDEX, *args], capture_output=True, text=True, timeout=60)


def test_bare_command_lists_the_commands() -> None:
    r = run()
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "error" not in r.stdout
    for name in COMMANDS:
        assert re.search(rf"^\s+{re.escape(name)}\b", r.stdout, re.M), name


def test_version() -> None:
    from importlib.metadata import version

    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"mqindex {version('mqindex')}"


def _parsers(p: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.ArgumentParser]]:
    out = [(path, p)]
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sp in a.choices.items():
                out += _parsers(sp, f"{path} {name}")
    return out


def _flat(text: str) -> str:
    return "".join(text.split())  # argparse wraps lines at spaces and hyphens


def test_every_flag_has_help_and_shows_its_default() -> None:
    checked = 0
    for path, p in _parsers(build_parser(), "mqindex"):
        shown = _flat(p.format_help())
        fmt = HelpFormatter(path)
        for a in p._actions:
            if isinstance(a, argparse._HelpAction | argparse._SubParsersAction):
                continue
            assert a.help, f"{path} {a.option_strings or a.dest}: no help text"
            text = fmt._expand_help(a)  # what --help prints for it
            assert _flat(text) in shown, f"{path} {a.option_strings}"
            if a.option_strings and a.nargs != 0 and not a.required:
                assert "default" in text, f"{path} {a.option_strings}: the help does not show the default: {text!r}"
            checked += 1
    assert checked > 100
    r = run("consume", "--help")
    assert _flat("first offset to read (default: 0)") in _flat(r.stdout)


def test_topics_help_lists_every_action() -> None:
    r = run("topics", "--help")
    for action in ("create", "alter", "describe", "list", "delete"):
        assert re.search(rf"^\s+{action}\s", r.stdout, re.M), action
    assert "delete" in _flat(run("--help").stdout).split("topics", 1)[1].split("inspect-index")[0]


def test_one_wording_for_the_data_dir_default() -> None:
    helps = {}
    for path, p in _parsers(build_parser(), "mqindex"):
        for a in p._actions:
            if "--data-dir" in a.option_strings:
                helps[path] = a.help
    assert set(helps) == {"mqindex serve", "mqindex scrub", "mqindex import-rocketmq", "mqindex spark-build"}
    assert all(h.startswith(data_dir.HELP) for h in helps.values()), helps


HEAVY = ("httpx", "fastapi", "uvicorn", "pyarrow", "numpy", "kafka", "aiokafka", "broker", "index_file",
         "index_service", "jobs", "storage_tier", "api.http", "api.config")


@pytest.mark.parametrize("argv", [["--help"], ["query", "--help"], ["get", "--help"], ["query", "t", "k", "--url",
                                                                                         "http://127.0.0.1:1"]])
def test_start_loads_no_server_or_http_library(argv: list[str]) -> None:
    code = ("import sys, contextlib, io\n"
            "from api.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "    try:\n"
            f"        main({argv!r})\n"
            "    except SystemExit:\n"
            "        pass\n"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m.startswith('api.http')"
            " or m == 'api.config'))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", f"mqindex {' '.join(argv)} imported {r.stdout}"
