"""Run system commands and fail loudly: every tc/ip/ovs-* failure raises with its stderr."""

from __future__ import annotations

import shlex
import subprocess

from ..errors import RuntimeFailure


class CommandError(RuntimeFailure):
    """A command the lab needed (tc, ip, ovs-*, ...) failed; the message holds its stderr."""


def run(cmd: list[str] | str, check: bool = True, input: str | None = None, timeout: float = 60) -> str:
    argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
    try:
        proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise CommandError(f"{argv[0]}: command not found (run: bash scripts/provision.sh)") from None
    except subprocess.TimeoutExpired:
        raise CommandError(f"{' '.join(argv)}: timed out after {timeout} s") from None
    if check and proc.returncode != 0:
        shown = " ".join(argv)
        shown = shown if len(shown) <= 300 else shown[:300] + f" ... ({len(argv)} arguments)"
        raise CommandError(f"{shown} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def ok(cmd: list[str] | str, timeout: float = 30) -> bool:
    try:
        run(cmd, timeout=timeout)
        return True
    except CommandError:
        return False
