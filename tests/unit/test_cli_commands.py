"""The CLI's shape: one module per command, each with register() beside run(), every --json
the shared parent's, and nothing below cli/ that takes an argparse Namespace."""

import argparse
import ast
import importlib
import pkgutil
from pathlib import Path

import testbed
import testbed.cli.commands as commands_pkg
from testbed.cli import COMMANDS, build_parser, options

TESTBED = Path(testbed.__file__).parent


def _subparsers(parser, path=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _subparsers(sub, (*path, name))


def test_every_command_module_has_register_and_run_and_is_listed():
    names = [m.name for m in pkgutil.iter_modules(commands_pkg.__path__)]
    assert len(names) >= 25, names  # discovery found them all (capacity made 25)
    for name in names:
        mod = importlib.import_module(f"testbed.cli.commands.{name}")
        assert callable(getattr(mod, "register", None)) and callable(getattr(mod, "run", None)), name
        assert mod in COMMANDS, f"{name} is not in testbed.cli.COMMANDS"
    assert len(COMMANDS) == len(set(COMMANDS)) == len(names)


def test_each_command_runs_its_own_module():
    top = {path[0]: sub for path, sub in _subparsers(build_parser()) if len(path) == 1}
    for mod in COMMANDS:
        command = mod.__name__.rsplit(".", 1)[1].replace("_", "-")
        assert top[command].get_default("func") is mod.run, command


def test_every_json_flag_is_the_shared_parents():
    (shared,) = [a for a in options.JSON._actions if "--json" in a.option_strings]
    with_json = [
        path for path, sub in _subparsers(build_parser()) if any("--json" in a.option_strings for a in sub._actions)
    ]
    assert len(with_json) >= 15  # as many as declared it before the parent existed
    for path, sub in _subparsers(build_parser()):
        for a in sub._actions:
            if "--json" in a.option_strings:
                assert a is shared, f"zlab {' '.join(path)} declares its own --json"
    sources = "".join(p.read_text() for p in (TESTBED / "cli").rglob("*.py") if p.name != "options.py")
    assert '"--json"' not in sources


def test_nothing_below_cli_takes_the_command_line():
    """argparse stays in cli/ (and in the two processes a repeat starts: the collector, which
    samples the queues, and the lossless mode's pause loop)."""
    offenders = []
    for p in TESTBED.rglob("*.py"):
        rel = p.relative_to(TESTBED).as_posix()
        if rel.startswith("cli/") or rel in ("measure/collector.py", "emulation/pauses.py"):
            continue
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            if isinstance(node, ast.ImportFrom) and node.module == "argparse" or "argparse" in names:
                offenders.append(rel)
    assert not offenders


def test_up_detached_starts_the_same_settings_in_its_child():
    """`zlab up -d` re-runs `zlab up --no-cli` in a child: every setting must survive the trip."""
    from dataclasses import replace

    from testbed.cli.commands.up import child_argv, up_options

    argv = [
        "up",
        "zcube:n=4",
        "-d",
        "--rate-scale",
        "2.5e-5",
        "--mtu",
        "9000",
        "--queue-pkts",
        "50",
        "--datapath",
        "netdev",
        "--controller",
        "ryu",
        "--results",
        "/tmp/r",
        "--duration",
        "7.5",
        "--proof",
        "cover",
    ]
    opts = up_options(build_parser().parse_args(argv))
    assert opts.cfg.rate_scale == 2.5e-5 and opts.cfg.mtu_bytes == 9000 and opts.interactive
    assert opts.proof == "cover"
    child = child_argv(opts, "up-x")
    assert child[1:4] == ["-m", "testbed.cli", "up"]
    again = up_options(build_parser().parse_args(child[3:]))
    assert again == replace(opts, interactive=False, run_id="up-x")
