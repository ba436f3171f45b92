"""The failure injector: a process that carries out a fabric's failure steps (failures.json) at
their times during one replay, confirms each on the kernel's side, and undoes them all at the end.

    python -m testbed.emulation.inject RUN_DIR T0_NS OUT.jsonl

Why a process of its own: the agent's event loop holds the GIL most of the time; a thread in
it would fire late. Cables go down as real ones do, by carrier: `ip link set down` on their
switch-side veth ends (the peer loses carrier, OVS reports the port down). A gray failure is
silent random loss without netem: an nftables netdev *egress* rule on both switch ends, so
OVS hands the frame to the port and it vanishes (measured: OVS counters do not see it).
Every nftables table is recorded in the run's registry before it exists; SIGTERM, the end of
the steps or any error restores every link and removes every table this process made.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..lab.registry import Registry
from ..records import JsonLines


def gray_table(iface: str) -> str:
    return "zlabgray_" + iface.replace("-", "_")


def _sh(argv: list[str]) -> None:
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")


def operstate(iface: str) -> str:
    r = subprocess.run(["ip", "-j", "link", "show", "dev", iface], capture_output=True, text=True)
    if r.returncode != 0:
        return "absent"
    return json.loads(r.stdout)[0].get("operstate", "?")


def nft_dropped(table: str) -> int | None:
    r = subprocess.run(["nft", "-j", "list", "table", "netdev", table], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    for item in json.loads(r.stdout).get("nftables", []):
        for expr in item.get("rule", {}).get("expr", []):
            if "counter" in expr:
                return int(expr["counter"]["packets"])
    return None


class Injector:
    def __init__(self, run_dir: Path, out: JsonLines, registry: Registry | None):
        self.doc = json.loads((run_dir / "failures.json").read_text())
        self.out = out
        self.registry = registry
        self.down: set[str] = set()  # interfaces we set down
        self.gray: set[str] = set()  # nftables tables we made

    def apply(self, step: dict, t0_ns: int) -> None:
        t_plan = t0_ns + int(step["t_emulated_s"] * 1e9)
        t_start = time.monotonic_ns()
        rec = {
            "t_ns": t_start,
            "t_planned_ns": t_plan,
            "action": step["action"],
            "target": step["target"],
            "event": step["event"],
            "links": step["links"],
            "ifaces": step["ifaces"],
        }
        if step["action"] == "down":
            for i in step["ifaces"]:
                _sh(["ip", "link", "set", "dev", i, "down"])
                self.down.add(i)
        elif step["action"] == "up":
            for i in step["ifaces"]:
                _sh(["ip", "link", "set", "dev", i, "up"])
                self.down.discard(i)
        elif step["action"] == "gray":
            for i in step["ifaces"]:
                self._gray_on(i, step["loss_percent"])
            rec["loss_percent"] = step["loss_percent"]
        elif step["action"] == "clear":
            rec["dropped"] = {i: self._gray_off(i) for i in step["ifaces"]}
        rec["t_done_ns"] = time.monotonic_ns()
        rec["operstate"] = {i: operstate(i) for i in step["ifaces"]}  # the kernel's own view, read back
        self.out.write(rec)

    def _gray_on(self, iface: str, loss_percent: float) -> None:
        table = gray_table(iface)
        if self.registry is not None:
            self.registry.nft_table(table)
        self.gray.add(iface)
        _sh(["nft", "add", "table", "netdev", table])
        _sh(
            [
                "nft",
                "add",
                "chain",
                "netdev",
                table,
                "out",
                f'{{ type filter hook egress device "{iface}" priority 0; }}',
            ]
        )
        _sh(
            [
                "nft",
                "add",
                "rule",
                "netdev",
                table,
                "out",
                "numgen",
                "random",
                "mod",
                "10000",
                "<",
                str(int(round(loss_percent * 100))),
                "counter",
                "drop",
            ]
        )

    def _gray_off(self, iface: str) -> int | None:
        """Remove one loss rule; a failed delete raises (a rule left behind keeps dropping frames)."""
        table = gray_table(iface)
        n = nft_dropped(table)
        _sh(["nft", "delete", "table", "netdev", table])
        self.gray.discard(iface)
        return n

    def restore(self) -> None:
        """Undo everything still in effect (links up, loss rules gone), and record it."""
        errors = []
        gray = {}
        for i in sorted(self.gray):
            try:
                gray[i] = self._gray_off(i)
            except RuntimeError as exc:  # recorded; the runner fails the replay on any restore error
                errors.append(f"{i}: {exc}")
        rec = {"t_ns": time.monotonic_ns(), "action": "restore", "ifaces_up": sorted(self.down), "gray_dropped": gray}
        for i in sorted(self.down):
            r = subprocess.run(["ip", "link", "set", "dev", i, "up"], capture_output=True, text=True)
            if r.returncode != 0:
                errors.append(f"{i}: {r.stderr.strip()}")
        self.down.clear()
        rec["t_done_ns"] = time.monotonic_ns()
        rec["errors"] = errors
        self.out.write(rec)


class _Stop(Exception):
    pass


def _stop(signum, frame):
    raise _Stop()


def main(argv=None) -> int:
    argv = argv if argv is not None else sys.argv[1:]
    if len(argv) != 4:
        print("usage: python -m testbed.emulation.inject RUN_DIR T0_NS OUT.jsonl REGISTRY_RUN_ID", file=sys.stderr)
        return 2
    run_dir, t0_ns, out_path, reg_id = Path(argv[0]), int(argv[1]), argv[2], argv[3]
    signal.signal(signal.SIGTERM, _stop)
    out = JsonLines(out_path)
    inj = Injector(run_dir, out, Registry.attach(reg_id))
    try:
        for step in inj.doc["steps"]:
            wait = (t0_ns + int(step["t_emulated_s"] * 1e9) - time.monotonic_ns()) / 1e9
            if wait > 0:
                time.sleep(wait)
            inj.apply(step, t0_ns)
        out.write({"t_ns": time.monotonic_ns(), "action": "steps_done"})
        while True:  # hold the final state until the runner says the replay is over
            time.sleep(3600)
    except _Stop:
        pass
    except Exception as exc:  # noqa: BLE001 - recorded for the runner, which fails the replay
        out.write({"t_ns": time.monotonic_ns(), "action": "error", "error": f"{type(exc).__name__}: {exc}"})
        return 1
    finally:
        inj.restore()
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
