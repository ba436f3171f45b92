"""The controller's failure handling as plain logic (no OpenFlow library): what it detected,
which of the run's precomputed states that is, and the entry-level difference to install.

Why plain: the fake-datapath tests drive it directly, and the app (zlab_routes.py) stays a thin
adapter. It never computes routes: every state's tables come from failures.json, written by the
routing model before the run (testbed.emulation.failplan).
"""

from __future__ import annotations

from collections import deque


def entry_key(e: dict) -> tuple:
    """What makes two entries the same OpenFlow entry (same match and priority)."""
    return (e["priority"], e["ipv4_dst"], e["ipv4_mask"], tuple(e["udp_src"]) if e["udp_src"] is not None else None)


def diff(old: list[dict], new: list[dict]) -> tuple[list[dict], list[dict]]:
    """(entries to delete, entries to add or overwrite) turning table `old` into `new`."""
    o = {entry_key(e): e for e in old}
    n = {entry_key(e): e for e in new}
    delete = [e for k, e in o.items() if k not in n]
    add = [e for k, e in n.items() if k not in o or o[k]["out_port"] != e["out_port"]]
    return delete, add


class RecoveryPlan:
    """failures.json as the controller uses it."""

    def __init__(self, doc: dict, healthy: dict[str, list[dict]]):
        if doc.get("schema") != "zlab.failures/1":
            raise RuntimeError(f"failures.json: unknown schema {doc.get('schema')!r}")
        self.mode = doc["recovery"]
        self.detect = doc["detect"]
        # flow-mods a second a recovery may send (0: unpaced); a document written before the field: unpaced
        self.install_mods_per_s = float(doc.get("install_mods_per_s", 0.0))
        # fast-failover: entry -> backup port (a group watches the primary), and transit entries that are
        # part of the healthy state from the start (healthy traffic never matches them)
        self.ff_backup: dict[tuple[str, tuple], tuple[int, int]] = {}  # -> (primary, backup)
        ffdoc = doc.get("fast_failover")
        if ffdoc is not None:
            healthy = dict(healthy)
            for sw, v in ffdoc["switches"].items():
                for e in v["entries"]:
                    if "ff_backup" in e:
                        self.ff_backup[(sw, entry_key(e))] = (int(e["out_port"]), int(e["ff_backup"]))
                healthy[sw] = list(healthy[sw]) + list(v["transit"])
        self.healthy = healthy
        self.states = {tuple(s["down_links"]): s for s in doc["states"]}
        self.port_link: dict[tuple[str, int], int] = {}  # (switch, OpenFlow port) -> cable
        self.probe_dirs: dict[tuple[str, int], int] = {}  # sending end of a switch-to-switch cable -> cable
        self.probe_receiver: dict[tuple[str, int], str] = {}  # sending end -> the switch at the far end
        # the switches whose port state the controller polls: those with a port at a cable the schedule
        # acts on (a failed switch's neighbours too). Polling every switch at poll_s was 320 port
        # descriptions a second on a 256-GPU ROFT, and held the controller at 80-90 % of a core
        iface_link = {end["iface"]: c["link"] for c in doc["cables"] for end in c["ends"]}
        touched = {iface_link[i] for st in doc["steps"] for i in st["ifaces"] if i in iface_link}
        self.poll_switches: frozenset[str] = frozenset(
            end["node"] for c in doc["cables"] if c["link"] in touched for end in c["ends"] if end["switch"]
        )
        for c in doc["cables"]:
            for end in c["ends"]:
                if end["switch"]:
                    self.port_link[(end["node"], end["port"])] = c["link"]
            if all(end["switch"] for end in c["ends"]):
                for end, far in (c["ends"], c["ends"][::-1]):
                    self.probe_dirs[(end["node"], end["port"])] = c["link"]
                    self.probe_receiver[(end["node"], end["port"])] = far["node"]

    def target(self, down_links: frozenset) -> dict[str, list[dict]] | None:
        """Every switch's table for a detected set of down cables (None: no planned state)."""
        if not down_links:
            return dict(self.healthy)
        st = self.states.get(tuple(sorted(down_links)))
        if st is None:
            return None
        return {sw: st["switches"].get(sw, entries) for sw, entries in self.healthy.items()}

    def state_name(self, down_links: frozenset) -> str:
        if not down_links:
            return "healthy"
        st = self.states.get(tuple(sorted(down_links)))
        return st["failures"] if st else f"unplanned: cables {sorted(down_links)}"


def group_id(primary: int, backup: int) -> int:
    """A fast-failover group's id from its two ports (computed, never looked up): the primary in
    the high 16 bits, the backup in the low 16."""
    return (primary << 16) | backup


def backup_for(ff_backup: dict, switch: str, e: dict) -> int | None:
    """The backup port of an entry, if it is protected and still outputs to its primary."""
    pb = ff_backup.get((switch, entry_key(e)))
    return pb[1] if pb is not None and pb[0] == e["out_port"] else None


class ProbeLoss:
    """Per cable direction: of its last `window` probes old enough to judge (sent more than
    `timeout_ns` ago), how many never came back. Gray when at least `min_lost` did."""

    def __init__(self, window: int, min_lost: int, timeout_ns: int):
        self.window, self.min_lost, self.timeout_ns = window, min_lost, timeout_ns
        self.sent: dict[tuple, deque] = {}
        self.got: dict[tuple, set] = {}
        self.bad: set[tuple] = set()

    def sent_probe(self, direction: tuple, seq: int, t_ns: int) -> None:
        self.sent.setdefault(direction, deque(maxlen=20 * self.window)).append((seq, t_ns))
        got = self.got.setdefault(direction, set())
        if len(got) > 40 * self.window:
            oldest = self.sent[direction][0][0]
            self.got[direction] = {s for s in got if s >= oldest}

    def forget(self, direction: tuple) -> None:
        """Drop a direction's history: its port went down or up, which explains any probe it lost
        (a flapping cable is port status's to report, not a gray failure's)."""
        self.sent.pop(direction, None)
        self.got.pop(direction, None)
        self.bad.discard(direction)

    def got_probe(self, direction: tuple, seq: int) -> None:
        self.got.setdefault(direction, set()).add(seq)

    def update(self, now_ns: int, receiver: dict | None = None) -> list[tuple[tuple, bool, int, int]]:
        """Directions that turned gray or healthy now: (direction, gray, lost, judged).

        Hysteresis: gray at `min_lost` of the last `window`; healthy again only after
        `3 * window` judged probes in a row came back (at 20 % loss, 10 in a row happen often).
        receiver: direction -> the switch whose datapath and control channel receive its probes.
        Loss there can be the switch's, not the cable's: a busy userspace datapath drops packet-in
        upcalls when a burst of traffic starts (measured: every cable into a ROFT spine lost 3 of 10
        probes at once), and a stalled controller makes OVS drop packet-ins. So loss counts
        against a cable only if it is specific to it: the receiver's own self-probes (direction
        ("self", switch)) all came back, and no other direction into the same receiver lost as much.
        Two gray cables into one switch at once are therefore not told apart from a sick switch."""
        out = []
        stats = {}
        for d, sent in self.sent.items():
            judged = []  # the last 3 x window probes old enough to judge (all the rules below read)
            for s, t in reversed(sent):
                if now_ns - t >= self.timeout_ns:
                    judged.append(s)
                    if len(judged) == 3 * self.window:
                        break
            judged.reverse()
            got = self.got.get(d, set())
            recent = judged[-self.window :]
            stats[d] = (sum(1 for s in recent if s not in got), len(recent), judged, got)
        lossy_into: dict = {}
        if receiver is not None:
            for d, (lost, n, _, _) in stats.items():
                if d[0] != "self" and n >= self.window and lost >= self.min_lost:
                    lossy_into[receiver[d]] = lossy_into.get(receiver[d], 0) + 1
        for d, (lost, n, judged, got) in stats.items():
            if d[0] == "self":
                continue
            if receiver is not None:
                r = receiver[d]
                if stats.get(("self", r), (0,))[0] or lossy_into.get(r, 0) > 1:
                    continue  # the receiving switch is losing probes, not this cable
            if d not in self.bad:
                if n >= self.window and lost >= self.min_lost:
                    self.bad.add(d)
                    out.append((d, True, lost, n))
            else:
                recent = judged[-3 * self.window :]
                if len(recent) >= 3 * self.window and all(s in got for s in recent):
                    self.bad.discard(d)
                    out.append((d, False, 0, len(recent)))
        return out
