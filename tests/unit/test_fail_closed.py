"""Every fidelity rule fails closed (issue 22 item 4): each test drives one rule with the bad input it
could not read before — an unreadable pid, a failed or unknown counter read, a missing drops.json, a
failure run's loss outside the failed element, a retransmission on a path without drops, a missing
calibration, a failed cleanup command — on the recorded mini-run (tests/data/mini-run)."""

import json
import subprocess

import pytest

from testbed.emulation import failplan, losses
from testbed.fabric.failures import crossing
from testbed.fabric.model import Fabric
from testbed.lab.sh import CommandError
from testbed.measure import report
from testbed.measure.metrics import repeat_metrics
from testbed.measure.tables import FabricData
from testbed.records import read_jsonl
from tests.unit.minirun import MINI
from tests.unit.minirun import edit_json as _edit_json
from tests.unit.minirun import raw as _raw


def _repeat(run, label="roft", k=0) -> dict:
    """One repeat's metrics, as report.build computes them (without plots and the report)."""
    exp = json.loads((run / "experiment.json").read_text())
    fd = FabricData(run / label, exp["fabrics"][label], k)
    m = exp["spec"]["measurement"]
    t = fd.write_tables(run / "tables", max(1, int(m["xoff_real_bytes"] * fd.size_scale)), m["util_window_ms"] / 1e3)
    return repeat_metrics(fd, t, m)


def test_the_recorded_repeat_is_valid(run):
    """The baseline every test below breaks: both fabrics' repeat 0 pass every rule."""
    for label in ("zcube", "roft"):
        assert _repeat(run, label)["fidelity"] == {"valid": True, "reasons": []}


# ---- CPU: an unreadable pid ----------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["one", "all"])
def test_an_unreadable_pid_voids(run, which):
    path = _raw(run, "roft") / "cpu.jsonl"
    recs = read_jsonl(path)
    for i, r in enumerate(recs):
        if which == "all" or i == len(recs) // 2:
            r["ovs_cpu_s"] = None  # what collector.cpu_seconds records when /proc/<pid>/stat cannot be read
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    reasons = _repeat(run)["fidelity"]["reasons"]
    assert any(r.startswith("CPU rule cannot read its input") and "ovs" in r for r in reasons), reasons


def test_no_cpu_samples_voids(run):
    path = _raw(run, "roft") / "cpu.jsonl"
    path.write_text(path.read_text().splitlines()[0] + "\n")
    reasons = _repeat(run)["fidelity"]["reasons"]
    assert any(r.startswith("CPU rule cannot read its input: no CPU samples") for r in reasons), reasons


def test_cpu_samples_only_outside_the_replay_void(run):
    """Samples that all end before t0 say nothing about the replay: the rule cannot read its input."""
    raw = _raw(run, "roft")
    t0 = json.loads((raw / "run_clock.json").read_text())["t0_ns"]
    path = raw / "cpu.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in read_jsonl(path) if r["t_ns"] < t0))
    reasons = _repeat(run)["fidelity"]["reasons"]
    assert any(r.startswith("CPU rule cannot read its input: no CPU samples") for r in reasons), reasons


# ---- drop counters: failed reads, unknown formats, a missing drops.json -------------------------------


class _Done:
    def __init__(self, stdout="", returncode=0, stderr=""):
        self.stdout, self.returncode, self.stderr = stdout, returncode, stderr


class _Live:
    """A LiveRun stand-in: the host commands answer like iproute2 does, unless told to fail."""

    def __init__(self, fab, fail=None, garble=None):
        self.fabric, self.fail, self.garble = fab, fail, garble

    def in_host(self, gpu, argv):
        mine = [p.name for p in self.fabric.ports if self.fabric.nodes[p.node].name == gpu]
        if self.fail == argv[0]:
            return _Done("", 1, "Cannot open network namespace")
        if argv[0] == "ip":
            rows = [{"ifname": n, "stats64": {"rx": {"dropped": 0}, "tx": {"dropped": 0}}} for n in mine]
            if self.garble == "ip":
                rows = [{"ifname": n, "statistics": {}} for n in mine]  # a changed format: no stats
        else:
            rows = [{"dev": n, "kind": "htb", "drops": 0} for n in mine]
            if self.garble == "tc":
                rows = []  # no qdisc listed for the ports
        return _Done(json.dumps(rows))


def _fake_ovs(monkeypatch, fab, fail=None, garble=None):
    ports = [p.name for p in fab.ports if fab.nodes[p.node].role == "switch" and fab.port_link[p.id] >= 0]

    def run(argv, **kw):
        if fail == argv[0] or fail == " ".join(argv[:2]):
            raise CommandError(f"{' '.join(argv)} failed (1): no such thing")
        if argv[0] == "ovs-vsctl":
            return json.dumps({"data": [[n, ["map", [["rx_dropped", 0], ["tx_dropped", 0]]]] for n in ports]})
        if argv[0] == "ss":
            if garble == "ss":
                return "Netid Recv-Q Send-Q\n"
            return "".join(
                f'p_raw 0 0 *:{n} * users:(("ovs-vswitchd",pid=77,fd=3)) skmem:(r0,rb1,t0,tb2,f0,w0,o0,bl0,d4)\n'
                for n in ports
            )
        if argv[1] == "coverage/show":
            return "Event coverage, avg rate over last: 5 seconds, last minute, last hour,  hash=1:\n"
        if argv[1] == "dpctl/show":
            return "netdev@ovs-netdev:\n  lookups: hit:1 missed:2" + ("" if garble == "dpctl" else " lost:0") + "\n"
        raise AssertionError(argv)

    monkeypatch.setattr(losses, "run", run)
    monkeypatch.setattr(losses, "_sysfs_dropped", lambda name: 0)


def test_the_fake_counters_read_clean(monkeypatch):
    fab = Fabric.load(MINI / "roft" / "fabric.json")
    _fake_ovs(monkeypatch, fab)
    snap = losses.snapshot(_Live(fab), 77)
    assert snap["unreadable"] == [] and snap["ovs_sockets"] and sum(snap["ovs_sockets"].values()) > 0


@pytest.mark.parametrize(
    "fail, garble, want",
    [
        ("ip", None, "host ports of g0: ip -s -j link show in g0 failed"),
        ("tc", None, "host qdiscs of g0: tc -s -j qdisc show in g0 failed"),
        ("ss", None, "OVS packet sockets: ss -0 -m -n -p failed"),
        ("ovs-appctl", None, "OVS datapath: ovs-appctl coverage/show failed"),
        (None, "dpctl", "no 'lost:' field"),
        (None, "ss", "interfaces missing from the output"),
        (None, "ip", "ip -s -j link: no stats"),
        (None, "tc", "tc -s -j qdisc in g0: 1 interfaces missing"),
    ],
)
def test_a_failed_or_unknown_counter_read_is_recorded_not_zero(monkeypatch, fail, garble, want):
    fab = Fabric.load(MINI / "roft" / "fabric.json")
    _fake_ovs(monkeypatch, fab, fail=fail, garble=garble)
    snap = losses.snapshot(_Live(fab, fail=fail, garble=garble), 77)
    assert any(want in u for u in snap["unreadable"]), snap["unreadable"]
    assert losses.unreadable(snap, snap)[0].startswith("before: ")
    assert "unreadable" not in losses.delta(snap, snap)


def test_an_unreadable_counter_voids_the_repeat(run):
    _edit_json(
        _raw(run, "roft") / "drops.json",
        lambda d: dict(d, unreadable=["after: host ports of g3: ip -s -j link show in g3 failed (1)"]),
    )
    reasons = _repeat(run)["fidelity"]["reasons"]
    assert any(
        r.startswith("drop rule cannot read its input: drop counters unreadable: after: host ports of g3")
        for r in reasons
    ), reasons


def test_a_missing_drops_json_voids(run):
    (_raw(run, "roft") / "drops.json").unlink()
    reasons = _repeat(run)["fidelity"]["reasons"]
    assert "drop rule cannot read its input: no drop counters recorded (raw drops.json missing)" in reasons


# ---- retransmissions are explained on the QP's own path ------------------------------------------------


def _retransmit(run, label, qp, n=7):
    def f(d):
        d["qps"][qp]["requester"]["retransmits"] = n
        return d

    _edit_json(_raw(run, label) / "counters.json", f)


def _ports_on(fab, q):
    """Switch egress ports on the QP's data path (the model's walk)."""
    from testbed.fabric.paths import walk

    ids = {p.name: p.id for p in fab.ports}
    w = walk(fab, [ids[q["src"]]], [ids[q["dst"]]], [q["sport"]])
    return [fab.ports[int(p)].name for p in w.out_ports[0] if p >= 0]


def test_a_queue_drop_elsewhere_does_not_explain_a_retransmission(run):
    fab = Fabric.load(run / "roft" / "fabric.json")
    qps = json.loads((_raw(run, "roft") / "counters.json").read_text())["qps"]
    on0 = set(_ports_on(fab, qps[0]))
    other = next(
        i
        for i, q in enumerate(qps)
        if not set(_ports_on(fab, q)) & on0 and not {q["src"], q["dst"]} & {qps[0]["src"], qps[0]["dst"]}
    )
    _retransmit(run, "roft", 0)
    _retransmit(run, "roft", other)
    # a drop on QP 0's own path (its first switch's egress toward the fabric), counted by OVS
    port = _ports_on(fab, qps[0])[0]
    _edit_json(_raw(run, "roft") / "drops.json", lambda d: dict(d, delta=dict(d["delta"], ovs_port_counters={port: 2})))
    m = _repeat(run)
    (bad,) = [r for r in m["fidelity"]["reasons"] if "no drop counter explains" in r]
    assert f"QP {qps[other]['src']}->{qps[other]['dst']}" in bad and f"QP {qps[0]['src']}->" not in bad
    assert m["loss_unexplained"] and len(m["loss_unexplained"]) == 1


def test_a_drop_on_the_qps_own_path_explains_it(run, monkeypatch):
    """The same retransmission, with its drop on its own path (ACK direction), is explained; the drop itself
    still voids as emulator loss (outside a switch egress queue), so only the explanation is tested."""
    fab = Fabric.load(run / "roft" / "fabric.json")
    q = json.loads((_raw(run, "roft") / "counters.json").read_text())["qps"][3]
    back = {"src": q["dst"], "dst": q["src"], "sport": q["sport"]}
    port = _ports_on(fab, back)[-1]
    _retransmit(run, "roft", 3)
    _edit_json(_raw(run, "roft") / "drops.json", lambda d: dict(d, delta=dict(d["delta"], switch_ports={port: 1})))
    m = _repeat(run)
    assert m["loss_unexplained"] == [] and m["drops_outside"] == {"switch_ports": 1}


# ---- failure runs keep every loss rule -----------------------------------------------------------------


def _as_failure_run(run, label="roft", events=None):
    """Turn the recorded repeat into a failure run: failures.json from the model, an injector record of the
    cut (mid-replay), the links restored at the end. Returns (fabric, failures doc, the cut's cable)."""
    fab = Fabric.load(run / label / "fabric.json")
    qps = json.loads((_raw(run, label) / "counters.json").read_text())["qps"]
    if events is None:  # the first leaf-spine cable QP 0's path crosses
        ids = {p.name: p.id for p in fab.ports}
        from testbed.fabric.paths import walk

        w = walk(fab, [ids[qps[0]["src"]]], [ids[qps[0]["dst"]]], [qps[0]["sport"]])
        cable = next(
            int(d) // 2
            for d in w.dlinks[0][1:]
            if d >= 0 and all(fab.nodes[fab.ports[int(p)].node].role == "switch" for p in fab.link_ends[int(d) // 2])
        )
        a, b = (fab.nodes[fab.ports[int(p)].node].name for p in fab.link_ends[cable])
        events = [{"at_emulated_s": 1.0, "action": "down", "target": f"cable:{a},{b}"}]
    doc = failplan.document(
        fab,
        events,
        "controller",
        {"probe_hz": 10, "probe_window": 10, "probe_min_lost": 3, "probe_timeout_s": 1.5, "poll_s": 0},
    )
    (run / label / "failures.json").write_text(json.dumps(doc))
    t0 = json.loads((_raw(run, label) / "run_clock.json").read_text())["t0_ns"]
    step = doc["steps"][0]
    recs = [
        {
            "t_ns": t0 + 10**9,
            "t_planned_ns": t0 + 10**9,
            "action": step["action"],
            "target": step["target"],
            "event": 0,
            "links": step["links"],
            "ifaces": step["ifaces"],
            "t_done_ns": t0 + 10**9 + 1000,
            "operstate": {i: "DOWN" for i in step["ifaces"]},
        },
        {
            "t_ns": t0 + 2 * 10**9,
            "action": "restore",
            "ifaces_up": step["ifaces"],
            "gray_dropped": {},
            "t_done_ns": t0 + 2 * 10**9,
            "errors": [],
        },
    ]
    (_raw(run, label) / "injections.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return fab, doc, doc["states"][0]["down_links"]


def test_a_failure_run_excuses_and_counts_only_the_failed_cables_loss(run):
    fab, doc, down = _as_failure_run(run)
    qps = json.loads((_raw(run, "roft") / "counters.json").read_text())["qps"]
    hit = crossing(fab, [(q["src"], q["dst"], q["sport"]) for q in qps], down)
    assert hit[0]
    _retransmit(run, "roft", 0)  # explained by the cut it crosses
    iface = doc["steps"][0]["ifaces"][0]
    _edit_json(
        _raw(run, "roft") / "drops.json",
        lambda d: dict(
            d, delta=dict(d["delta"], ovs_port_counters={iface: 9}, ovs_datapath={"datapath_drop_upcall_error": 2})
        ),
    )
    m = _repeat(run)
    assert m["failures_injected"] and m["fidelity"] == {"valid": True, "reasons": []}, m["fidelity"]
    assert m["drops_excused"] == {"failed cables' interfaces": 9, "ovs datapath": 2}
    assert m["link_bytes_skipped_ports"] > 0 and m["link_bytes_max_error"] is not None  # the rest still compared


def test_a_failure_run_still_voids_loss_elsewhere(run):
    fab, doc, down = _as_failure_run(run)
    qps = json.loads((_raw(run, "roft") / "counters.json").read_text())["qps"]
    hit = crossing(fab, [(q["src"], q["dst"], q["sport"]) for q in qps], down)
    unhit = hit.index(False)
    _retransmit(run, "roft", unhit)  # a QP the failure did not touch lost frames: nothing on its path explains it
    _edit_json(
        _raw(run, "roft") / "drops.json",
        lambda d: dict(d, delta=dict(d["delta"], host_qdiscs={qps[hit.index(True)]["src"]: 4})),
    )
    reasons = _repeat(run)["fidelity"]["reasons"]
    assert any(r.startswith("frames dropped outside a switch egress queue: 4 at host qdiscs") for r in reasons)
    assert any("no drop counter explains" in r and qps[unhit]["src"] in r for r in reasons), reasons


def test_probe_bytes_are_allowed_on_switch_to_switch_ports_only(run):
    exp = json.loads((run / "experiment.json").read_text())
    fd = FabricData(run / "roft", exp["fabrics"]["roft"], 0)
    assert fd.probe_bytes_bound("l0r0-p3", 10.0) == 0  # no failure plan: no probes
    _as_failure_run(run)
    fd = FabricData(run / "roft", exp["fabrics"]["roft"], 0)
    fabric_port = next(
        p.name
        for p in fd.fabric.ports
        if fd.fabric.port_link[p.id] >= 0
        and all(
            fd.fabric.nodes[fd.fabric.ports[int(e)].node].role == "switch"
            for e in fd.fabric.link_ends[fd.fabric.port_link[p.id]]
        )
    )
    gpu_facing = next(
        p.name
        for p in fd.fabric.ports
        if fd.fabric.nodes[p.node].role == "switch"
        and fd.fabric.port_link[p.id] >= 0
        and p.name != fabric_port
        and fd.fabric.nodes[fd.fabric.ports[int(fd.fabric.link_ends[fd.fabric.port_link[p.id]][0])].node].role
        != "switch"
    )
    assert fd.probe_bytes_bound(fabric_port, 10.0) == (10 * 10.0 + 2) * 72
    assert fd.probe_bytes_bound(gpu_facing, 10.0) == 0


def test_frames_to_the_controller_are_counted_not_data_loss(run):
    """OVS's datapath_drop_userspace_action_error counts frames on their way to the controller (link probes;
    thousands per failure e2e run, one per probe): counted, never data loss. Another datapath drop voids."""
    _edit_json(
        _raw(run, "roft") / "drops.json",
        lambda d: dict(d, delta=dict(d["delta"], ovs_datapath={"datapath_drop_userspace_action_error": 300})),
    )
    m = _repeat(run)
    assert m["fidelity"]["valid"] and m["drops_excused"] == {"frames to the controller (link probes)": 300}
    _edit_json(
        _raw(run, "roft") / "drops.json",
        lambda d: dict(d, delta=dict(d["delta"], ovs_datapath={"datapath_drop_upcall_error": 3})),
    )
    assert any(
        r.startswith("frames dropped outside a switch egress queue: 3 at ovs datapath")
        for r in _repeat(run)["fidelity"]["reasons"]
    )
    # a failed miss upcall is never the same frame as a packet-in (OVS 3.1's dpif-netdev frees it before
    # any action): an equal count of both does not excuse it (one CI run: +2 and +2)
    both = {"datapath_drop_upcall_error": 2, "datapath_drop_userspace_action_error": 2}
    _edit_json(_raw(run, "roft") / "drops.json", lambda d: dict(d, delta=dict(d["delta"], ovs_datapath=both)))
    m = _repeat(run)
    assert not m["fidelity"]["valid"] and m["drops_excused"] == {"frames to the controller (link probes)": 2}
    assert any(
        r.startswith("frames dropped outside a switch egress queue: 2 at ovs datapath")
        for r in m["fidelity"]["reasons"]
    )


def test_a_failure_run_compares_link_bytes_on_untouched_ports(run):
    _as_failure_run(run)
    m0 = _repeat(run)
    fab = Fabric.load(run / "roft" / "fabric.json")
    qps = json.loads((_raw(run, "roft") / "counters.json").read_text())["qps"]
    doc = json.loads((run / "roft" / "failures.json").read_text())
    hit = crossing(fab, [(q["src"], q["dst"], q["sport"]) for q in qps], doc["states"][0]["down_links"])
    untouched = next(q for q, h in zip(qps, hit) if not h)

    # misroute an untouched QP: its bytes counted twice by the model (the agent says it sent twice as much)
    def double(d):
        for q in d["qps"]:
            if q["qp"] == untouched["qp"]:
                q["requester"]["bytes"] *= 3
        return d

    _edit_json(_raw(run, "roft") / "counters.json", double)
    m = _repeat(run)
    assert m0["fidelity"]["valid"]
    assert any(r.startswith("link bytes off the model") for r in m["fidelity"]["reasons"]), m["fidelity"]


# ---- calibration ---------------------------------------------------------------------------------------


def test_a_missing_calibration_is_printed_uncalibrated(run):
    _edit_json(run / "roft" / "run.json", lambda d: {k: v for k, v in d.items() if k != "calibration"})
    report.build(run, plots_too=False)
    text = (run / "report.md").read_text()
    assert "Calibration: **uncalibrated** (roft)" in text
    row = next(line for line in text.splitlines() if line.startswith("| calibration (iperf3"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[-1] == "uncalibrated" and cells[-2].endswith("%"), row  # zcube's ratio still shown


# ---- cleanup commands raise ----------------------------------------------------------------------------


def test_a_failed_nft_delete_raises_and_is_recorded(tmp_path, monkeypatch):
    from testbed.emulation import inject
    from testbed.records import JsonLines

    def fake(argv, **kw):
        if argv[:2] == ["nft", "delete"]:
            return subprocess.CompletedProcess(argv, 1, "", "Error: Could not process rule: No such file or directory")
        return subprocess.CompletedProcess(argv, 1, "", "")

    monkeypatch.setattr(inject.subprocess, "run", fake)
    (tmp_path / "failures.json").write_text(json.dumps({"steps": []}))
    out = JsonLines(str(tmp_path / "inj.jsonl"))
    inj = inject.Injector(tmp_path, out, None)
    inj.gray.add("l0-p3")
    with pytest.raises(RuntimeError, match="nft delete table netdev zlabgray_l0_p3 failed"):
        inj._gray_off("l0-p3")
    inj.restore()  # the restore records it; the runner fails the replay on any restore error
    out.close()
    (rec,) = read_jsonl(tmp_path / "inj.jsonl")
    assert rec["action"] == "restore" and rec["errors"] and "nft delete" in rec["errors"][0]


def test_a_failed_loss_rule_removal_raises():
    from testbed.emulation.faults import ingress_loss

    fab = Fabric.load(MINI / "roft" / "fabric.json")

    class Live:
        fabric = fab

        def in_host(self, host, argv):
            return _Done("", 1 if argv[1] == "delete" else 0, "Error: No such file or directory")

    with pytest.raises(RuntimeError, match="nft delete table netdev zlabloss_g0_p0"):
        with ingress_loss(Live(), "g0-p0", 5):
            pass


def test_an_unreadable_input_is_not_answered_with_a_lower_rate(run):
    """A rule that could not read its input is not fixed by scaling: the advice says so, no retry."""
    from testbed.experiment import advice

    (_raw(run, "roft") / "drops.json").unlink()
    metrics = report.build(run, plots_too=False)
    a = advice.advise(json.loads((run / "experiment.json").read_text()), metrics)
    assert a.fabrics == ["roft"] and not a.retry_possible
    assert any("no drop counters recorded" in u for u in a.unfixable)


def test_an_unreadable_calibration_ratio_voids(run):
    _edit_json(run / "roft" / "run.json", lambda d: dict(d, calibration=dict(d["calibration"], ratio=None)))
    reasons = _repeat(run)["fidelity"]["reasons"]
    assert "calibration rule cannot read its input: calibration ratio unreadable (None)" in reasons


def test_a_link_that_survives_its_deletion_raises(monkeypatch, tmp_path):
    """`zlab lab clean`: deleting one end of a veth removes its peer, so `ip link del` may fail on a link
    already gone; a link still there afterwards is a failed cleanup and raises."""
    from types import SimpleNamespace

    from testbed.lab import clean

    calls = []
    monkeypatch.setattr(clean, "run", lambda argv, **kw: calls.append(argv) or "")
    rec = SimpleNamespace(
        run_id="r1", resources=[{"type": "link", "name": "zl-a", "ifindex": 7}], path=tmp_path / "r1.jsonl"
    )
    monkeypatch.setattr(clean, "_ifindex", lambda name: 7)  # the delete did nothing
    with pytest.raises(CommandError, match="ip link del zl-a: the link is still there"):
        clean.clean_run(rec)
    gone = iter([7, None])
    monkeypatch.setattr(clean, "_ifindex", lambda name: next(gone))
    assert clean.clean_run(rec) == ["link zl-a"] and ["ip", "link", "del", "zl-a"] in calls


def test_machine_bound_advice_never_suggests_a_rate_the_spec_refuses(monkeypatch):
    """A 256-GPU run at rate_scale 7.5e-7 was told to retry at 3.75e-7, which gives 0.075 Mb/s
    links and which the spec then refused (exit 2). The advice halves down to the floor (the
    slowest link at MIN_LINK_MBPS), and at the floor says that no lower rate can fix it."""
    from testbed.emulation.config import EmulationConfig, EmulationError
    from testbed.experiment import advice
    from testbed.fabric import build_fabric

    monkeypatch.setattr(advice, "factor_for", lambda figs: 1.0)
    monkeypatch.setattr(advice, "capacity", lambda: (None, True))
    fab = build_fabric("zcube:n=4")
    floor = 0.1e6 / min(link.rate_bps for link in fab.links)
    metrics = {
        "fabrics": {
            "z": {"summary": {"fidelity": {"valid": False, "reasons": ["repeat 0: CPU-bound: the machine at 97 %"]}}}
        }
    }

    def advise(rho):
        exp = {
            "spec": {"emulation": {"rate_scale": rho}, "workload": {"size_scale": 0.00025}, "measurement": {}},
            "fabrics": {"z": {"fabric": "zcube:n=4", "figures": {}}},
        }
        return advice.advise(exp, metrics)

    assert advice.lowest_rate_scale({"fabrics": {"z": {"fabric": "zcube:n=4"}}}, ["z"]) == pytest.approx(floor)
    a = advise(4 * floor)
    assert a.overrides == [f"emulation.rate_scale={2 * floor:.3g}"] and "halves" in a.why[0]
    a = advise(1.5 * floor)
    (override,) = a.overrides
    suggested = float(override.split("=")[1])
    assert floor <= suggested <= 1.01 * floor and "the lowest these fabrics allow" in a.why[0]
    EmulationConfig(rate_scale=suggested).validate(fab)  # what it suggests is accepted
    a = advise(floor)
    assert a.overrides == [] and not a.retry_possible and "already the lowest" in a.why[0]
    with pytest.raises(EmulationError):
        EmulationConfig(rate_scale=floor / 2).validate(fab)


def test_a_replay_without_a_record_voids_its_repeat_and_says_why():
    """A run stopped mid-replay has no replay record for that repeat: the verdict says so, in words
    (it printed "replay None")."""
    from testbed.measure.metrics import replay_reason

    assert replay_reason("complete") is None
    assert replay_reason("incomplete") == "replay incomplete"
    assert replay_reason(None) == "replay not recorded (the run was stopped before the repeat's replay ended)"
