"""A fabric's failure schedule resolved against its model, before anything is brought up.

Why one document (failures.json in the fabric's run folder): the injector reads what to break
and when, the controller reads which degraded tables to install for each failure state it
detects, and the analysis reads which cables each event touched — none of them re-derives
routes. The degraded tables are the routing model's (failures.degrade), one set per failure
state the schedule can reach.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserInputError
from ..fabric import failures as fl
from ..fabric import fastfailover as ff
from ..fabric.kinds import kind_of
from ..fabric.model import Fabric
from ..fabric.openflow import flow_entries
from ..fabric.paths import forwarding_tables

SCHEMA = "zlab.failures/1"
RECOVERY_MODES = ("controller", "fast-failover", "host", "both", "none")
ACTIONS = ("down", "up", "gray", "flap")


class FailurePlanError(UserInputError):
    """A failure schedule that cannot be carried out on this fabric."""


@dataclass(frozen=True)
class Step:
    """One primitive action at one time: `down`/`up` a target, or `gray`/`clear` silent loss."""

    t_emulated_s: float
    action: str  # down | up | gray | clear
    target: str
    event: int  # index of the spec event it comes from
    loss_percent: float | None = None


def expand(events: list[dict]) -> list[Step]:
    """Spec events -> primitive steps in time order (a flap is `count` down/up pairs, a gray
    failure with `duration_s` is gray then clear)."""
    steps = []
    for i, e in enumerate(events):
        t, a = float(e["at_emulated_s"]), e["action"]
        if a == "flap":
            period = float(e["period_emulated_s"])
            for k in range(int(e.get("count", 1))):
                steps += [
                    Step(t + k * period, "down", e["target"], i),
                    Step(t + (k + 0.5) * period, "up", e["target"], i),
                ]
        elif a == "gray":
            steps.append(Step(t, "gray", e["target"], i, float(e["loss_percent"])))
            if e.get("duration_emulated_s"):
                steps.append(Step(t + float(e["duration_emulated_s"]), "clear", e["target"], i))
        else:
            steps.append(Step(t, a, e["target"], i))
    return sorted(steps, key=lambda s: (s.t_emulated_s, s.event))


def _check_event(fab: Fabric, e: dict, where: str) -> fl.Failures:
    a = e["action"]
    if a not in ACTIONS:
        raise FailurePlanError(f"{where}: action {a!r}; valid: {', '.join(ACTIONS)}")
    try:
        f = fl.parse(fab, [e["target"]])
    except UserInputError as exc:
        raise FailurePlanError(f"{where}: {exc}") from None
    if a == "flap" and not e.get("period_emulated_s"):
        raise FailurePlanError(f"{where}: a flap needs period_emulated_s (one down+up cycle)")
    if a == "gray":
        if "loss_percent" not in e:
            raise FailurePlanError(f"{where}: a gray failure needs loss_percent (0 < loss < 100)")
        if f.switches or any(_kind_of_cable(fab, c) != "switch" for c in f.cables):
            raise FailurePlanError(
                f"{where}: gray failures are injected on switch-to-switch cables (both ends in "
                f"OVS); {e['target']} is not one (e.g. cable:{fl.cable_nodes_example(fab)})"
            )
    elif "loss_percent" in e:
        raise FailurePlanError(f"{where}: loss_percent is only for action gray")
    return f


def _kind_of_cable(fab: Fabric, link_id: int) -> str:
    link = fab.links[link_id]
    roles = {fab.nodes[fab.ports[p].node].role for p in (link.a, link.b)}
    return "switch" if roles == {"switch"} else "nic"


def recovery_policy(fab: Fabric, mode: str) -> str:
    """The model's repair policy a recovery mode converges to: host failover -> the kind's
    failover policy; both -> table repair plus host failover (ZCube: both); controller /
    fast-failover -> its table repair (ZCube: detour)."""
    kind = kind_of(fab)
    if mode in ("host", "both"):
        if not kind.failover_policies:
            raise FailurePlanError(
                f"recovery {mode!r} moves queue pairs to a GPU's other port; {kind.name} GPUs "
                f"have one port (valid here: controller, fast-failover, none)"
            )
        return kind.failover_policies[0] if mode == "host" else kind.failover_policies[-1]
    return kind.controller_policy or kind.repair_policies[0]


def document(
    fab: Fabric, events: list[dict], recovery: str, detect: dict, label: str = "", install_mods_per_s: float = 0.0
) -> dict:
    """failures.json: steps, the failure state after each, and per state the tables to install
    (at most install_mods_per_s flow-mods a second; 0: unpaced)."""
    if not install_mods_per_s >= 0:
        raise FailurePlanError(f"failures.install_mods_per_s: {install_mods_per_s!r}; must be >= 0")
    if recovery not in RECOVERY_MODES:
        raise FailurePlanError(f"failures.recovery.{label}: {recovery!r}; valid: {', '.join(RECOVERY_MODES)}")
    parsed = [_check_event(fab, e, f"failures.events.{label}[{i}]") for i, e in enumerate(events)]
    policy = recovery_policy(fab, recovery)
    steps = expand(events)
    active: dict[str, fl.Failures] = {}
    states: dict[tuple, dict] = {}
    out_steps = []
    for s in steps:
        f = parsed[s.event]
        if s.action in ("down", "gray"):
            active[s.target] = f
        else:
            active.pop(s.target, None)
        union = fl.Failures(
            frozenset().union(*[x.cables for x in active.values()]) if active else frozenset(),
            frozenset().union(*[x.switches for x in active.values()]) if active else frozenset(),
        )
        key = tuple(int(i) for i in sorted(union.link_down(fab).nonzero()[0]))
        if key and key not in states:
            states[key] = _state(fab, union, policy)
        out_steps.append(
            {
                "t_emulated_s": s.t_emulated_s,
                "action": s.action,
                "target": s.target,
                "event": s.event,
                "loss_percent": s.loss_percent,
                "links": sorted(int(c) for c in f.cables),
                "switches": sorted(fab.nodes[n].name for n in f.switches),
                "ifaces": _ifaces(fab, f),
                "state": list(key),
            }
        )
    doc = {
        "schema": SCHEMA,
        "fabric": fab.spec,
        "recovery": recovery,
        "policy": policy,
        "detect": dict(detect),
        "install_mods_per_s": float(install_mods_per_s),
        "steps": out_steps,
        "states": list(states.values()),
        "cables": cable_map(fab),
    }
    if recovery == "fast-failover":
        doc["fast_failover"] = fast_failover(fab, policy)
    return doc


def fast_failover(fab: Fabric, policy: str) -> dict:
    """What the controller pre-installs in fast-failover mode: per switch, its healthy entries
    (those with `ff_backup` get a fast-failover group) and the transit entries; per cable,
    the share of pairs its backups carry before the controller reacts (fastfailover.py)."""
    prot = ff.protection(fab, policy)
    switches = {
        sw: {"entries": v["entries"], "transit": [{k: x for k, x in e.items() if k != "transit"} for e in v["transit"]]}
        for sw, v in ff.annotate(fab, prot).items()
    }
    return {
        "switches": switches,
        "coverage": {str(c): v for c, v in prot["coverage"].items()},
        "rejected": prot["rejected"],
    }


def _ifaces(fab: Fabric, f: fl.Failures) -> list[str]:
    """Root-namespace interfaces the injector acts on: for a cable, its switch-side end(s) (both
    lose light, or both drop for a gray failure); for a switch, every cabled port of it (its
    neighbours then lose carrier, as when a switch dies)."""
    names = []
    for c in sorted(f.cables):
        link = fab.links[c]
        names += [fab.ports[p].name for p in (link.a, link.b) if fab.nodes[fab.ports[p].node].role == "switch"]
    for n in sorted(f.switches):
        names += [p.name for p in fab.ports if p.node == n and fab.port_link[p.id] >= 0]
    return names


def _state(fab: Fabric, failures: fl.Failures, policy: str) -> dict:
    deg = fl.degrade(fab, failures, policy)
    healthy = forwarding_tables(fab)
    switches = {}
    for sw in fab.switches:
        if sw.id in failures.switches:
            continue  # a dead switch keeps whatever it had: nothing reaches it
        r = healthy.switch_rows[sw.id]
        if (deg.tables.next_group[r] == healthy.next_group[r]).all():
            continue
        switches[sw.name] = flow_entries(deg.tables, sw.name)
    return {
        "down_links": [int(i) for i in sorted(deg.link_down.nonzero()[0])],
        "failures": failures.describe(fab),
        "cables": sorted(int(c) for c in failures.cables),
        "failed_switches": sorted(fab.nodes[n].name for n in failures.switches),
        "repaired_entries": deg.repaired_entries,
        "withdrawn_entries": deg.withdrawn_entries,
        "switches": switches,
    }


def cable_map(fab: Fabric) -> list[dict]:
    """Every cable with its ends as the controller sees them (switch name + OpenFlow port)."""
    out = []
    for link in fab.links:
        ends = []
        for p in (link.a, link.b):
            node = fab.nodes[fab.ports[p].node]
            ends.append(
                {
                    "node": node.name,
                    "switch": node.role == "switch",
                    "port": fab.ports[p].number,
                    "iface": fab.ports[p].name,
                }
            )
        out.append({"link": link.id, "kind": link.kind, "ends": ends})
    return out


def state_failures(fab: Fabric, state: dict) -> fl.Failures:
    return fl.Failures(frozenset(state["cables"]), frozenset(fab.node_by_name[n].id for n in state["failed_switches"]))


def degraded_tables(fab: Fabric, doc: dict, state: dict):
    """The model's tables for one state of this document (for verify-paths and the analysis)."""
    return fl.degrade(fab, state_failures(fab, state), doc["policy"]).tables


def state_for(doc: dict, down_links) -> dict | None:
    key = sorted(int(x) for x in down_links)
    return next((s for s in doc["states"] if s["down_links"] == key), None)
