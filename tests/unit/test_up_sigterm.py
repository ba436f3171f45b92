"""A SIGTERM while `zlab up` is still bringing the fabric up: torn down, exit 143, no traceback."""

import signal

from testbed.emulation import up as up_mod


def test_sigterm_during_bring_up_exits_143_without_traceback(monkeypatch, capsys):
    def start_then_term(self):
        up_mod.raise_terminated(15, None)

    closed = []
    old = signal.getsignal(signal.SIGTERM)  # close() restores it; here close is a stand-in
    monkeypatch.setattr(up_mod.LiveFabric, "_start", start_then_term)
    monkeypatch.setattr(up_mod.LiveFabric, "close", lambda self, status="ok": closed.append(status))
    try:
        assert up_mod.up(up_mod.UpOptions(spec="zcube:n=4", interactive=False, duration_s=1)) == 143
    finally:
        signal.signal(signal.SIGTERM, old)
    assert closed == ["interrupted"]
    assert "stopped by SIGTERM during bring-up" in capsys.readouterr().out


def test_a_command_stopped_by_sigterm_says_so_in_one_line(monkeypatch, capsys):
    """Any command (zlab capacity --network emulation, zlab run) a SIGTERM stops after its fabric
    was torn down: one line, exit 143, no traceback."""
    from testbed.cli import main
    from testbed.cli.commands import route
    from testbed.errors import Terminated

    def stopped(args):
        raise Terminated("signal 15")

    monkeypatch.setattr(route, "run", stopped)
    assert main(["route", "zcube:n=4", "g0-p0", "g5"]) == 143
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["zlab: terminated (signal 15)"]
