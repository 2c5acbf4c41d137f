"""Options of the client commands before the command, and options nobody takes, as a user running `mqindex`
sees them: `mqindex --url U topics list` asks U (it was refused as an unknown command 'U'); `mqindex serve
--kafka-port 9092` names serve and the option with serve's usage (it printed the top-level usage)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from api.cli.main import build_parser, command_first, parse
from tests.api.server import ServerProcess
from tests.api.test_cli_usage_errors import cli, usage_error


def test_url_token_and_json_before_the_command_mean_what_they_mean_after_it(console_server: ServerProcess) -> None:
    url = console_server.url
    assert cli("topics", "create", "global-opts", "--url", url, "--token", "admin-tok").returncode == 0
    after = cli("topics", "list", "--url", url, "--token", "admin-tok", "--json")
    assert after.returncode == 0, after.stderr
    for before in (("--url", url, "--token", "admin-tok", "--json"), (f"--url={url}", "--json", "--token=admin-tok"),
                   ("--json", "--url", url), ):
        r = cli(*before, "topics", "list", *(() if "--token" in " ".join(before) else ("--token", "admin-tok")))
        assert (r.returncode, r.stderr) == (0, ""), r.stderr
        assert json.loads(r.stdout) == json.loads(after.stdout)
        assert "global-opts" in {t["name"] for t in json.loads(r.stdout)}
    # a produce with its options before the command, read back with them after it; -v after the command too
    r = cli("--url", url, "--token", "admin-tok", "produce", "global-opts", "hello", "--key", "k1")
    assert r.returncode == 0, r.stderr
    r = cli("query", "global-opts", "k1", "--url", url, "--token", "admin-tok", "--json", "-v")
    assert r.returncode == 0 and [m["value"] for m in json.loads(r.stdout)] == ["hello"], r.stderr
    # before a command that has no --url, it is that command's unknown option
    usage_error(cli("--url", url, "inspect-index", "nowhere.idx"), "inspect-index",
                f"unrecognized arguments: --url {url}")


def test_an_option_nobody_takes_is_named_with_the_usage_of_its_command() -> None:
    usage_error(cli("serve", "--kafka-port", "9092"), "serve", "unrecognized arguments: --kafka-port 9092")
    usage_error(cli("topics", "create", "t", "--partitons", "3"), "topics create",
                "unrecognized arguments: --partitons 3 (did you mean --partitions?)")
    usage_error(cli("groups", "describe", "g", "--bogus"), "groups describe", "unrecognized arguments: --bogus")
    r = cli("--bogus")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == "mqindex: error: unrecognized arguments: --bogus"


_HOST = st.text(st.sampled_from("abcxyz019"), min_size=1, max_size=12)
_WORD = st.text(st.sampled_from("abcxyz019-_:/."), min_size=1, max_size=12).filter(lambda w: not w.startswith("-"))
_COMMANDS = [("topics", "list"), ("topics", "describe", "orders"), ("query", "orders", "k1"), ("nodes",),
             ("groups", "describe", "g1"), ("produce", "orders", "v", "--key", "k")]


@settings(max_examples=300, deadline=None)
@given(command=st.sampled_from(_COMMANDS), url=st.none() | _HOST.map(lambda w: "http://" + w),
       token=st.none() | _WORD, as_json=st.booleans(), equals=st.booleans(), before=st.lists(st.booleans(),
                                                                                               min_size=3, max_size=3))
def test_global_options_parse_the_same_before_and_after_the_command(command: tuple[str, ...], url: str | None,
                                                                     token: str | None, as_json: bool, equals: bool,
                                                                     before: list[bool]) -> None:
    """Each of --url, --token and --json, wherever it is given (before the command or after it, `--url U` or
    `--url=U`), parses to the same arguments as all of them after the command."""
    options: list[list[str]] = []
    if url is not None:
        options.append([f"--url={url}"] if equals else ["--url", url])
    if token is not None:
        options.append([f"--token={token}"] if equals else ["--token", token])
    if as_json:
        options.append(["--json"])
    head = [w for o, b in zip(options, before, strict=False) if b for w in o]
    tail = [w for o, b in zip(options, before, strict=False) if not b for w in o]
    argv = head + list(command) + tail
    reference = list(command) + [w for o in options for w in o]
    got = parse(build_parser(command_first(argv)), command_first(argv))
    want = parse(build_parser(reference), reference)
    assert {k: v for k, v in vars(got).items() if k != "_parser"} == \
        {k: v for k, v in vars(want).items() if k != "_parser"}
    assert got._parser.prog == want._parser.prog
