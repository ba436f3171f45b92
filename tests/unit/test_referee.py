"""The ns-3 referee offline: hand-worked cases on tiny scenarios (exact serialisation arithmetic,
udp_src bucket routing, loss recovery), and the whole pipeline on a real recording (tests/data/
mini-run): scenario built from the run folder's files, replayed, and compared within the bands.
Needs the optional referee (provision.sh --referee, as CI runs it)."""

import subprocess
from pathlib import Path

import pandas as pd
import pytest

from testbed.cli import main as zlab
from testbed.errors import UserInputError
from testbed.measure.tables import FabricData
from testbed.records import read_json
from testbed.referee import binary, compare, scenario, simulate

MINI = Path(__file__).resolve().parents[1] / "data" / "mini-run"
RATE = 8_000_000  # 1 byte per microsecond: hand arithmetic in µs


def run_text(tmp_path, text: str) -> tuple[pd.DataFrame, pd.DataFrame, subprocess.CompletedProcess]:
    exe = binary.build(log=lambda *_: None)
    (tmp_path / "s.txt").write_text(text)
    res = subprocess.run([str(exe), str(tmp_path / "s.txt"), str(tmp_path)], capture_output=True, text=True)
    if res.returncode in (0, 3):
        return pd.read_csv(tmp_path / "messages.csv"), pd.read_csv(tmp_path / "ports.csv"), res
    return pd.DataFrame(), pd.DataFrame(), res


def star(n_gpus: int, switch_queue: int = 1000) -> list[str]:
    """n GPUs (ip = id + 1) on one switch s0, whose port k+1 faces GPU k."""
    sw = n_gpus
    lines = [f"node {g} g{g} gpu" for g in range(n_gpus)] + [f"node {sw} s0 switch"]
    lines += [f"port {g} {g} 0 g{g}-p0 {g + 1} {RATE} 1000" for g in range(n_gpus)]
    lines += [f"port {n_gpus + g} {sw} {g + 1} s0-p{g + 1} 0 {RATE} {switch_queue}" for g in range(n_gpus)]
    lines += [f"link {g} {n_gpus + g}" for g in range(n_gpus)]
    lines += [f"entry {sw} 1000 {g + 1} {0xFFFFFFFF} 0 0 {g + 1}" for g in range(n_gpus)]
    return lines


def test_one_message_through_one_switch_is_exact(tmp_path):
    """4 packets (4,096 x 3 + 100 bytes): frames 4,170 (RETH), 4,154, 4,154, 158 bytes at 1 B/µs.
    Store and forward delays the switch's copy by the first frame: the last byte arrives at
    12,636 + 4,170 µs; its ACK (62 B) crosses two links: completion 16,930 µs after release."""
    lines = star(2) + ["qp 0 0 1 50000", f"msg 0 0 1000000 {3 * 4096 + 100}"]
    msgs, ports, res = run_text(tmp_path, "\n".join(lines) + "\n")
    assert res.returncode == 0, res.stderr
    m = msgs.iloc[0]
    assert m.packets == 4 and m.received_bytes == 3 * 4096 + 100
    assert m.t_first_tx_ns == 1_000_000
    assert m.t_last_rx_ns - m.t_due_ns == 16_806_000
    assert m.t_complete_ns - m.t_due_ns == 16_930_000
    by = ports.set_index("port")
    assert by.loc["g0-p0", "tx_bytes"] == 4170 + 2 * 4154 + 158
    assert by.loc["s0-p2", "tx_bytes"] == 4170 + 2 * 4154 + 158
    assert by.loc["s0-p1", "tx_bytes"] == 62 and by.loc["g1-p0", "tx_frames"] == 1


def test_udp_source_port_picks_the_bucket(tmp_path):
    """Two parallel cables s0 -> s1; s0's entries split by the lowest udp_src bit (as the
    controller's ECMP buckets do): even source ports take port 2, odd ones port 3."""
    lines = [
        "node 0 g0 gpu",
        "node 1 g1 gpu",
        "node 2 s0 switch",
        "node 3 s1 switch",
        f"port 0 0 0 g0-p0 1 {RATE} 1000",
        f"port 1 1 0 g1-p0 2 {RATE} 1000",
        f"port 2 2 1 s0-p1 0 {RATE} 1000",
        f"port 3 2 2 s0-p2 0 {RATE} 1000",
        f"port 4 2 3 s0-p3 0 {RATE} 1000",
        f"port 5 3 1 s1-p1 0 {RATE} 1000",
        f"port 6 3 2 s1-p2 0 {RATE} 1000",
        f"port 7 3 3 s1-p3 0 {RATE} 1000",
        "link 0 2",
        "link 3 5",
        "link 4 6",
        "link 1 7",
        f"entry 2 1000 1 {0xFFFFFFFF} 0 0 1",
        f"entry 2 500 2 {0xFFFFFFFF} 0 0 2",
        f"entry 2 600 2 {0xFFFFFFFF} 0 1 2",
        f"entry 2 600 2 {0xFFFFFFFF} 1 1 3",
        f"entry 3 1000 2 {0xFFFFFFFF} 0 0 3",
        f"entry 3 1000 1 {0xFFFFFFFF} 0 0 1",
        "qp 0 0 1 50000",
        "qp 1 0 1 50001",
        "msg 0 0 0 8192",
        "msg 1 1 0 4096",
    ]
    msgs, ports, res = run_text(tmp_path, "\n".join(lines) + "\n")
    assert res.returncode == 0, res.stderr
    by = ports.set_index("port")["tx_bytes"]
    assert by["s0-p2"] == 4096 + 58 + 16 + 4096 + 58  # QP 0's two frames
    assert by["s0-p3"] == 4096 + 58 + 16  # QP 1's one frame
    assert by["s1-p1"] == 2 * 62  # both ACKs come back one way


def test_overflow_drops_and_go_back_n_recovers(tmp_path):
    """A 100-packet stream into a receiver port whose switch queue holds 2 frames, and an 8-packet
    burst from a second sender joining it ten and a half frames in: frames are dropped, the
    stream's later packets reveal the gap, the responder NAKs, the requester goes back to the
    missing PSN, and every byte arrives."""
    lines = star(3, switch_queue=2) + [
        "qp 0 0 2 50000",
        "qp 1 1 2 50001",
        f"msg 0 0 0 {100 * 4096}",
        f"msg 1 1 {10 * 4154000 + 2077000} {8 * 4096}",
    ]
    msgs, ports, res = run_text(tmp_path, "\n".join(lines) + "\n")
    assert res.returncode == 0, res.stderr
    drops = ports.set_index("port").loc["s0-p3", "drops"]
    assert drops > 0
    stream = msgs.iloc[0]
    assert stream.qp_naks >= 1 and stream.qp_retransmits > 0 and stream.qp_timeouts == 0
    assert list(msgs["received_bytes"]) == [100 * 4096, 8 * 4096]
    # the receiver's link carried every frame sent but not dropped, back to back at best
    assert stream.t_complete_ns >= (100 + 8 + stream.qp_retransmits - drops) * 4154 * 1000


def test_bad_scenario_fails_naming_the_line(tmp_path):
    _, _, res = run_text(tmp_path, "\n".join(star(2) + ["bogus 1 2"]) + "\n")
    assert res.returncode == 2 and "unknown line kind 'bogus'" in res.stderr
    _, _, res = run_text(tmp_path, "\n".join(star(2)) + "\n")
    assert res.returncode == 2 and "no messages" in res.stderr


def test_scenario_reads_the_run_folder_files():
    exp = read_json(MINI / "experiment.json")
    sc = scenario.build(MINI / "roft", exp, 0, "same")
    flows = read_json(MINI / "roft" / "flows.json")
    text = sc.text.splitlines()
    assert sum(ln.startswith("entry ") for ln in text) == sum(len(s["entries"]) for s in flows["switches"].values())
    posted = read_json(MINI / "roft" / "raw" / "rep0" / "run_clock.json")["messages"]
    assert sum(ln.startswith("msg ") for ln in text) == posted == len(sc.messages)
    assert sum(ln.startswith("qp ") for ln in text) == sc.messages.groupby(["src_port", "dst_port"]).ngroups
    rate_scale = read_json(MINI / "roft" / "run.json")["config"]["emulation"]["rate_scale"]
    assert f" {int(round(400e9 * rate_scale))} 1000" in next(ln for ln in text if ln.startswith("port 0 "))
    real = scenario.build(MINI / "roft", exp, 0, "real", requests=2)
    assert real.messages["req"].nunique() == 2
    assert real.messages["size_bytes"].sum() == real.messages["real_bytes"].sum()
    with pytest.raises(UserInputError, match="scale must be"):
        scenario.build(MINI / "roft", exp, 0, "half")


def _mini_pairs(tmp_path, link_model):
    exp = read_json(MINI / "experiment.json")
    pairs = []
    for label in ("zcube", "roft"):
        for rep in range(len(exp["fabrics"][label]["repeats"])):
            sc = scenario.build(MINI / label, exp, rep, "same", link_model=link_model)
            res = simulate.run(sc, tmp_path / link_model / label / str(rep), log=lambda *_: None)
            assert res.messages["t_complete_ns"].notna().all()
            pairs.append(compare.pair(FabricData(MINI / label, exp["fabrics"][label], rep), res, 800_000))
    return pairs


def test_mini_run_against_ns3_with_the_emulations_link_model(tmp_path):
    """The recorded emulation against its ns-3 replay with the emulation's link model (a one-frame
    token bucket, no serialisation), same scale, judged raw: link bytes, both fabrics' KV p99 and
    their ratio within the bands; no drops on either side; the routing oracle passes."""
    s = compare.summarise(_mini_pairs(tmp_path, "bucket"), routing={})
    assert s["kv_p99_ratio"]["a"] == "zcube" and s["kv_p99_ratio"]["b"] == "roft"
    checks = s["verdict"]["checks"]
    for label in ("zcube", "roft"):
        assert checks[f"{label} link bytes"] and checks[f"{label} KV p99"] and checks[f"{label} ns-3 complete"]
    assert checks["zcube/roft KV p99 ratio"]
    assert s["verdict_link_model"] == s["verdict"]  # nothing to correct
    for f in s["fabrics"].values():
        assert f["incomplete"] == []
        assert f["links"]["total_ns3_bytes"] == pytest.approx(f["links"]["total_emu_bytes"], rel=0.01)
        assert f["drops"] == {"emu": 0, "ns3": 0}


def test_the_link_model_against_emulation_records(tmp_path):
    """Which link model describes the emulation, judged on its own records message by message:
    with the token bucket, the emulated completion is centred on ns-3's (median within one frame,
    most messages within one frame); with serialising links ns-3 is more than a frame slower for
    the median message, and its KV p50 more than the 15 % band off on both fabrics."""
    for p in _mini_pairs(tmp_path, "bucket"):
        off = p.msg_offset_frames
        assert abs(off.median()) <= 1.0, (p.label, p.repeat, off.median())
        assert (off.abs() <= 1.0).mean() >= 0.7, (p.label, p.repeat)  # measured 0.79-0.94
    serial = _mini_pairs(tmp_path, "serialiser")
    for p in serial:
        assert p.msg_offset_frames.median() < -1.0, (p.label, p.repeat)
    s = compare.summarise(serial)
    assert all(s["fabrics"][label]["kv_p50"]["gap"] > 0.15 for label in ("zcube", "roft"))
    assert s["verdict_link_model"]["agree"], s["verdict_link_model"]  # the interval (the old treatment) holds


def test_bucket_link_model_by_hand(tmp_path):
    """The hand case (3 x 4,096 + 100 bytes, one switch, 1 B/µs) with the emulation's link model:
    an idle one-frame bucket passes each frame as the pacer releases it and the wire does not
    serialise (1,000x the line rate), so the message completes when the pacer releases its last
    frame (12,478 µs: ns-3's serialising 16,930 less the link-model term) plus the 1/1,000
    serialisation of the last frame and the ACK over two hops (0.44 µs)."""
    lines = (
        ["param link_model 1", "param bucket_bytes 4170"]
        + star(2)
        + ["qp 0 0 1 50000", f"msg 0 0 1000000 {3 * 4096 + 100}"]
    )
    msgs, ports, res = run_text(tmp_path, "\n".join(lines) + "\n")
    assert res.returncode == 0, res.stderr
    m = msgs.iloc[0]
    assert m.t_complete_ns - m.t_due_ns == pytest.approx(12_478_000 + 2 * 158 + 2 * 62, abs=2)
    assert ports.set_index("port").loc["s0-p2", "tx_bytes"] == 4170 + 2 * 4154 + 158
    # a burst into a full bucket leaves two frames at once (the banked one and the one taking the
    # bucket negative), then one per frame time: three frames to a busy switch port
    lines = (
        ["param link_model 1", "param bucket_bytes 4170"]
        + star(3)
        + ["qp 0 0 2 50000", "qp 1 1 2 50001", f"msg 0 0 0 {4096}", f"msg 1 1 0 {4096}", f"msg 2 0 0 {4096}"]
    )
    msgs, _, res = run_text(tmp_path, "\n".join(lines) + "\n")
    assert res.returncode == 0, res.stderr
    rx = sorted(msgs["t_last_rx_ns"])
    assert rx[1] - rx[0] < 10_000 and rx[2] - rx[1] == pytest.approx(4170 * 1000, abs=10_000)


def test_cli_refuses_a_folder_that_is_not_a_run(tmp_path, capsys):
    assert zlab(["referee", str(tmp_path), "--scale", "same"]) == 2
    assert "not a zlab run folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        zlab(["referee", str(tmp_path)])  # the scale is always said
    assert exc.value.code == 2


def test_link_model_term_by_hand():
    """The hand case above (3 x 4,096 + 100 bytes, one switch, 1 B/µs): an idle one-frame shaper
    passes the last frame (158 B) at once, the switch's copy of the first frame (4,170 B) too, and
    the ACK (62 B) on both links: 4,452 µs less than ns-3's 16,930 — 12,478 µs, exactly when the
    pacer releases the last frame (4,170 + 2 x 4,154)."""
    ns = pd.DataFrame({"size_bytes": [3 * 4096 + 100], "hops": [1]})
    term = compare.shaper_term(ns, [RATE], 4096)
    assert term[0] == pytest.approx(4452e-6)
    assert 16_930e-6 - term[0] == pytest.approx((4170 + 2 * 4154) * 1e-6)


@pytest.mark.slow  # over 3 s: kept out of the fast loop, which must stay under a minute
def test_what_if_replays_are_named_and_kept_apart(tmp_path, capsys):
    """A replay with another window is a question, not the comparison: it goes to its own file,
    says WHAT-IF, leaves the real summary and report alone, and refuses unknown parameters."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(MINI, run)
    assert (
        zlab(
            [
                "referee",
                str(run),
                "--scale",
                "real",
                "--requests",
                "1",
                "--repeats",
                "1",
                "--what-if-window-pkts",
                "100000",
            ]
        )
        == 0
    )
    assert "WHAT-IF replay" in capsys.readouterr().out
    s = read_json(run / "referee" / "real-whatif.json")
    assert s["what_if"] == {"window_pkts": 100000} and any(n.startswith("WHAT-IF") for n in s["notes"])
    assert not (run / "referee" / "real.json").exists() and not (run / "referee" / "report.md").exists()
    text = (run / "referee" / "real-whatif" / "zcube" / "rep0" / "scenario.txt").read_text()
    assert "param window_pkts 100000\n" in text
    with pytest.raises(UserInputError, match="only window_pkts and payload_per_packet"):
        scenario.build(MINI / "roft", read_json(MINI / "experiment.json"), 0, "same", what_if={"rto_max_ns": 1})


def _mini_copy(tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(MINI, run)
    return run


def test_invalid_repeats_are_left_out_and_named(tmp_path, capsys):
    """A repeat the emulation voided itself is not evidence: it is not replayed, not in the
    verdicts, and the summary and the printout name it with its reason."""
    import json

    run = _mini_copy(tmp_path)

    def reps(label, bad):
        return [
            {"repeat": r, "fidelity": {"valid": r != bad, "reasons": ["steal 64 %"] if r == bad else []}}
            for r in range(2)
        ]

    (run / "metrics.json").write_text(
        json.dumps({"fabrics": {"zcube": {"repeats": reps("zcube", 1)}, "roft": {"repeats": reps("roft", None)}}})
    )
    code = zlab(["referee", str(run), "--scale", "same"])
    out = capsys.readouterr().out
    s = read_json(run / "referee" / "same.json")
    assert s["excluded"] == [{"label": "zcube", "repeat": 1, "reasons": ["steal 64 %"]}]
    assert s["fabrics"]["zcube"]["repeats"] == 1 and s["fabrics"]["roft"]["repeats"] == 2
    assert not (run / "referee" / "same" / "zcube" / "rep1").exists()
    assert "Left out of the verdicts (emulation INVALID): zcube rep 1 (steal 64 %)" in out
    assert "zcube rep 1" in (run / "referee" / "report.md").read_text()
    assert code == (0 if s["verdict_link_model"]["agree"] else 3)
    # every repeat of a fabric invalid: that fabric cannot agree
    (run / "metrics.json").write_text(
        json.dumps({"fabrics": {"zcube": {"repeats": reps("zcube", 0)[:1] + reps("zcube", 1)[1:]}}})
    )
    assert zlab(["referee", str(run), "--scale", "same", "--repeats", "1"]) == 3
    s = read_json(run / "referee" / "same.json")
    assert s["verdict_link_model"]["checks"]["zcube has a valid repeat"] is False


def test_incomplete_ns3_run_names_the_messages_and_cannot_pass(tmp_path):
    """A deadline that stops ns-3 mid-run (its exit 3): the missing messages are named, their
    requests carry no completion time, and neither verdict can agree."""
    exp = read_json(MINI / "experiment.json")
    sc = scenario.build(MINI / "zcube", exp, 0, "same", deadline_s=0.5)
    res = simulate.run(sc, tmp_path, log=lambda *_: None)
    missing = res.messages[res.messages["t_complete_ns"].isna()]
    assert len(missing) > 0
    p = compare.pair(FabricData(MINI / "zcube", exp["fabrics"]["zcube"], 0), res, 800_000)
    assert [m["msg"] for m in p.missing] == missing["msg"].tolist()
    assert not set(p.ns3_kv_s.index) & set(missing["req"])
    s = compare.summarise([p])
    assert s["fabrics"]["zcube"]["incomplete"][0]["msg"] == int(missing["msg"].iloc[0])
    for v in (s["verdict"], s["verdict_link_model"]):
        assert v["checks"]["zcube ns-3 complete"] is False and not v["agree"]
    from testbed.referee import referee as ref

    assert f"msg {int(missing['msg'].iloc[0])} (req " in ref.incomplete_text(s)


def test_requests_subset_is_the_first_ids_on_both_sides(tmp_path):
    """--requests N keeps the first N request ids, whatever their due times, and the emulation's
    side of the comparison holds exactly those requests."""
    exp = read_json(MINI / "experiment.json")
    msgs, _ = scenario.schedule(MINI / "roft", 0)
    assert scenario.first_requests(msgs.sample(frac=1, random_state=3), 3) == sorted(msgs["req"].unique())[:3]
    sc = scenario.build(MINI / "roft", exp, 0, "same", requests=3)
    assert sorted(sc.messages["req"].unique()) == sorted(msgs["req"].unique())[:3]
    res = simulate.run(sc, tmp_path, log=lambda *_: None)
    p = compare.pair(FabricData(MINI / "roft", exp["fabrics"]["roft"], 0), res, 800_000)
    assert sorted(p.emu_kv_s.index) == sorted(msgs["req"].unique())[:3] and p.subset


def test_emulation_drops_are_the_switch_queues_not_ovs_port_counters(monkeypatch):
    """The emulation's drops are what its switch egress queues counted in the replay (drops_total
    grows in the collector's samples), not OVS's port counters, and not ports outside the list."""
    exp = read_json(MINI / "experiment.json")
    fd = FabricData(MINI / "zcube", exp["fabrics"]["zcube"], 0)
    fd.drops = {"ovs_port_counters": {"za0-p1": 99}}
    samples = pd.DataFrame(
        {"t_s": [0, 1, 0, 1, 0, 1], "port": ["a", "a", "b", "b", "c", "c"], "drops_total": [5, 9, 0, 2, 0, 7]}
    )
    monkeypatch.setattr(fd, "queue_samples", lambda: samples)
    assert compare.switch_queue_drops(fd, ["a", "b"]) == 6
    monkeypatch.setattr(fd, "queue_samples", lambda: pd.DataFrame())
    assert compare.switch_queue_drops(fd, ["a"]) is None


def test_ratio_uses_the_experiments_own_pair(tmp_path):
    """The p99 ratio is taken between the experiment's fabrics in its order, whatever they are called."""
    exp = read_json(MINI / "experiment.json")
    pairs = []
    for label in ("zcube", "roft"):
        sc = scenario.build(MINI / label, exp, 0, "same", requests=2)
        res = simulate.run(sc, tmp_path / label, log=lambda *_: None)
        p = compare.pair(FabricData(MINI / label, exp["fabrics"][label], 0), res, 800_000)
        p.label = {"zcube": "plane-a", "roft": "plane-b"}[label]
        pairs.append(p)
    s = compare.summarise(pairs, labels=["plane-b", "plane-a"])
    r = s["kv_p99_ratio"]
    assert (r["a"], r["b"]) == ("plane-b", "plane-a")
    f = s["fabrics"]
    assert r["emu"] == pytest.approx(f["plane-b"]["kv_p99"]["emu_s"]["mean"] / f["plane-a"]["kv_p99"]["emu_s"]["mean"])
    assert "plane-b/plane-a KV p99 ratio" in s["verdict"]["checks"]


def test_interval_gap_is_zero_between_the_link_models_and_measured_outside():
    assert compare._interval_gap(1.0, 0.9, 1.1) == 0.0
    assert compare._interval_gap(1.0, 1.1, 1.2) == pytest.approx(0.1)
    assert compare._interval_gap(1.0, 0.7, 0.8) == pytest.approx(0.2)


def test_exit_code_follows_every_scale_asked(monkeypatch, tmp_path, capsys):
    """Real-scale disagreement fails the exit code when real scale is asked; the raw verdict is
    printed before the link-model one."""
    from testbed.referee import referee as ref

    def fake(root, scale, link_model=None, **_):
        f = {
            "kv_p50": {"emu_s": {"mean": 1.0}, "ns3_s": {"mean": 1.3}, "gap": 0.3},
            "kv_p99": {"emu_s": {"mean": 1.0}, "ns3_s": {"mean": 1.0}, "gap": 0.0},
            "links": {"compared": 0},
            "drops": {"emu": 0, "ns3": 0},
            "incomplete": [],
        }
        f["kv_p50_link_model"] = {"ns3_s": {"mean": 1.0}, "gap": 0.0, "interval_gap": 0.0}
        f["kv_p99_link_model"] = {"ns3_s": {"mean": 1.0}, "gap": 0.0, "interval_gap": 0.0}
        raw = {"checks": {"roft KV p50": False}, "agree": False}
        model = link_model or ("serialiser" if scale == "real" else "bucket")
        return {
            "fabrics": {"roft": f},
            "what_if": {},
            "excluded": [],
            "verdict": raw,
            "scale": scale,
            "link_model": model,
            "verdict_link_model": {"checks": {"roft KV p50": True}, "agree": True},
        }

    monkeypatch.setattr(ref, "referee", fake)
    # serialising links at the emulation's scale: judged on the interval, raw printed first
    assert zlab(["referee", str(tmp_path), "--scale", "same", "--link-model", "serialiser"]) == 0
    out = capsys.readouterr().out
    assert out.index("verdict, raw") < out.index("verdict, between")
    # the emulation's link model (the default): the raw verdict decides
    assert zlab(["referee", str(tmp_path), "--scale", "same"]) == 3
    assert zlab(["referee", str(tmp_path), "--scale", "real"]) == 3
    assert zlab(["referee", str(tmp_path), "--scale", "both"]) == 3
