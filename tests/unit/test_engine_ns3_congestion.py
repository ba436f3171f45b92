"""`zlab run --engine ns3` with the spec's `congestion:` section: bad input stops with one line and
exit 2 before anything is written; the emulation refuses a section it cannot run; a lossless run
writes the congestion records, its report has the congestion section, and a missing record voids
the report instead of reading as zero."""

import json
import shutil

import pytest
import yaml

from testbed.cli import main as zlab
from testbed.measure import report
from testbed.measure.congestion import CongestionRecordsMissing
from testbed.referee import binary

TINY_MODEL = {"name": "tiny", "layers": 2, "kv_heads": 1, "head_dim": 64}
LOSSLESS = {"pfc_enabled": True, "ecn_enabled": True, "cc": "dcqcn", "window_pkts": 0}


def _spec(tmp_path, congestion: dict, mapping: str = "rank-shifted") -> str:
    p = tmp_path / "spec.yaml"
    body = {
        "repeats": 2,
        "workload": {"model": TINY_MODEL, "requests": 3},
        "deployment": {"mapping": mapping},
        "congestion": congestion,
    }
    p.write_text(yaml.safe_dump(body))
    return str(p)


@pytest.mark.parametrize(
    "sets, text",
    [
        (["congestion.ecn_kmin_bytes_per_25g=500000"], "above kmax"),
        (["congestion.ecn_pmax=0"], "outside (0, 1]"),
        (["congestion.pfc_enabled=true", "congestion.pfc_buffer_bytes=100000"], "need"),
        (["congestion.link_delay_ns=-1"], "minimum of 0"),
        (["congestion.cc=reno"], "is not one of"),
        (["congestion.cc=dcqcn"], "ecn_enabled is false"),
    ],
)
def test_bad_congestion_input_is_one_line_and_exit_2(tmp_path, capsys, sets, text):
    argv = ["run", "--engine", "ns3", "--results", str(tmp_path / "res")]
    for s in sets:
        argv += ["--set", s]
    assert zlab(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and text in err[0], err
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize(
    "sets, text",
    [
        (["congestion.link_delay_ns=5000"], "cannot set it"),
        (["congestion.switch_latency_ns=100"], "cannot set it"),
    ],
)
def test_the_emulation_refuses_what_it_cannot_run(tmp_path, capsys, sets, text):
    """ECN, DCQCN and lossless mode the emulation runs; link delays it refuses, in one line, with nothing written."""
    argv = ["run", "--results", str(tmp_path / "res"), "--dry-run"]
    for s in sets:
        argv += ["--set", s]
    assert zlab(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and text in err[0] and "--engine ns3" in err[0]
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("extra", [(), ("congestion.pfc_enabled=true",)])
def test_the_emulation_takes_ecn_dcqcn_and_lossless_mode(tmp_path, capsys, extra):
    argv = ["run", "--results", str(tmp_path / "res"), "--dry-run"]
    for s in ("congestion.ecn_enabled=true", "congestion.cc=dcqcn", *extra):
        argv += ["--set", s]
    assert zlab(argv) == 0, capsys.readouterr().err


@pytest.fixture(scope="module")
def lossless_run(tmp_path_factory):
    binary.build(log=lambda *_: None)
    tmp = tmp_path_factory.mktemp("ns3cc")
    code = zlab(["run", _spec(tmp, LOSSLESS), "--engine", "ns3", "--results", str(tmp / "res"), "--no-progress"])
    assert code == 0
    (root,) = (tmp / "res").iterdir()
    return root


@pytest.mark.slow  # about 3 s: two fabrics, two repeats in ns-3
def test_a_lossless_run_reports_what_operators_watch(lossless_run):
    run = json.loads((lossless_run / "run.json").read_text())
    assert run["congestion"] is True and run["transport"].startswith("lossless (PFC) + DCQCN")
    for fab in ("zcube", "roft"):
        for rep in (0, 1):
            d = lossless_run / fab / "raw" / f"rep{rep}" / "ns3"
            assert {"pfc.csv", "rates.csv", "cnp.csv"} <= {p.name for p in d.iterdir()}
    m = json.loads((lossless_run / "metrics.json").read_text())
    assert set(m["congestion"]) == {"zcube", "roft"}
    for fab in m["congestion"].values():
        assert fab["drops"]["mean"] == 0  # lossless
        assert len(fab["repeats"]) == 2 and fab["groups"]
    text = (lossless_run / "report.md").read_text()
    assert "## Congestion (ns-3: PFC, ECN, DCQCN)" in text and "lossless (PFC) + DCQCN" in text
    for png in ("pause_timeline.png", "dcqcn_rates.png", "port_queue_bytes.png"):
        assert (lossless_run / "plots" / png).stat().st_size > 1000
    # every flow's pause record, and its totals agree with the summary's
    import pandas as pd

    for lab, fab in m["congestion"].items():
        for rep in fab["repeats"]:
            flows = pd.read_parquet(lossless_run / "tables" / f"{lab}_rep{rep['repeat']}_flow_pauses.parquet")
            assert len(flows) == rep["flows"] > 0
            assert (
                int((flows.paused_ns > 0).sum()) == rep["paused_flows"]
                and int(flows.victim.sum()) == rep["victim_flows"]
            )
            assert not (flows.victim & (flows.paused_ns == 0)).any()  # a victim was held


@pytest.mark.slow
def test_each_repeat_draws_its_own_ecn_marks(lossless_run):
    """The marking generator is seeded with the repeat's seed: repeats are independent draws of
    the marks too, not the same draw replayed (which gave every DCQCN row a CI of 0)."""
    for fab in ("zcube", "roft"):
        seeds = []
        for rep in (0, 1):
            raw = lossless_run / fab / "raw" / f"rep{rep}"
            seed = json.loads((raw / "plan.json").read_text())["seed"]
            params = [ln.split() for ln in (raw / "ns3" / "scenario.txt").read_text().splitlines()]
            assert [p[2] for p in params if p[:2] == ["param", "rng_seed"]] == [str(seed)]
            seeds.append(seed)
        assert seeds[0] != seeds[1]


@pytest.mark.slow
def test_a_missing_pause_record_voids_the_report(lossless_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(lossless_run, copy)
    (copy / "roft" / "raw" / "rep1" / "ns3" / "pfc.csv").unlink()
    with pytest.raises(CongestionRecordsMissing, match="pfc.csv: missing"):
        report.build(copy)


def _fake_repeat(tmp_path, pfc_rows: list[tuple], end_ns: int = 1000):
    """A repeat folder with just pfc.csv and summary.txt, over a chain g - s3 - s2 - s1 - r (+ h on s1)."""
    from types import SimpleNamespace as NS

    d = tmp_path / "raw" / "ns3"
    d.mkdir(parents=True)
    rows = [(*r, "") if len(r) == 4 else r for r in pfc_rows]  # a RESUME has no cause
    text = "".join(f"{t},{a},{b},{e},{c}\n" for t, a, b, e, c in rows)
    (d / "pfc.csv").write_text("t_ns,port,peer_port,event,cause_port\n" + text)
    (d / "summary.txt").write_text(f"end_ns {end_ns}\n")
    names = ["g", "s3", "s2", "s1", "r", "h"]
    ports = [NS(name=f"{n}-p{k}", node=i) for i, n in enumerate(names) for k in range(3)]
    return NS(raw=tmp_path / "raw", repeat=0, fabric=NS(nodes=[NS(name=n) for n in names], ports=ports))


CHAIN = [  # (t_ns, ingress port sending, upstream port held, PAUSE 1 / RESUME 0, cause: the egress it reacts to)
    (0, "s1-p1", "s2-p0", 1, "s1-p0"),  # s1 -> r congests: s1 holds s2 from 0 to 100
    (10, "s2-p1", "s3-p0", 1, "s2-p0"),  # s2's port to s1, held, fills: s2 holds s3 from 10 to 90
    (20, "s3-p1", "g-p0", 1, "s3-p0"),  # s3's port to s2, held, fills: s3 holds the GPU from 20 to 80
    (80, "s3-p1", "g-p0", 0),
    (90, "s2-p1", "s3-p0", 0),
    (100, "s1-p1", "s2-p0", 0),
    (200, "s1-p2", "h-p0", 1, "s1-p0"),  # h's traffic to r, one hop, never resumed: ends with the run
]


def test_pause_depth_counts_the_chain_of_switches_held_while_pausing(tmp_path):
    from testbed.measure.congestion import paused_intervals, propagation_depth

    fd = _fake_repeat(tmp_path / "a", CHAIN)
    iv = paused_intervals(fd)
    assert sorted(iv.itertuples(index=False, name=None)) == [
        ("g-p0", 20, 80, "s3-p1", "s3-p0"),
        ("h-p0", 200, 1000, "s1-p2", "s1-p0"),
        ("s2-p0", 0, 100, "s1-p1", "s1-p0"),
        ("s3-p0", 10, 90, "s2-p1", "s2-p0"),
    ]
    assert propagation_depth(fd) == 3
    # s3 pauses the GPU only after s2 let it go: the chain breaks there
    late = [(0, "s1-p1", "s2-p0", 1, "s1-p0"), (10, "s2-p1", "s3-p0", 1, "s2-p0"), (90, "s2-p1", "s3-p0", 0)]
    late += [(100, "s1-p1", "s2-p0", 0), (150, "s3-p1", "g-p0", 1, "s3-p0"), (160, "s3-p1", "g-p0", 0)]
    assert propagation_depth(_fake_repeat(tmp_path / "b", late)) == 2
    assert propagation_depth(_fake_repeat(tmp_path / "c", [])) == 0


def test_pause_roots_follow_held_ports_back_and_name_the_victims(tmp_path):
    """Hand-worked: in CHAIN every pause reacts, directly or through held ports, to s1 -> r
    (s1-p0). When s3 pauses the GPU after s2 let it go (LATE), s3's own port to s2 is the root."""
    import pandas as pd

    from testbed.measure.congestion import flow_pauses, paused_intervals, with_roots

    iv = with_roots(paused_intervals(_fake_repeat(tmp_path / "a", CHAIN)))
    assert dict(zip(iv.port, iv.root)) == {"s2-p0": "s1-p0", "s3-p0": "s1-p0", "g-p0": "s1-p0", "h-p0": "s1-p0"}
    flows = pd.DataFrame(
        [
            (1, 0, 1000, ["g-p0", "s3-p0", "s2-p0", "s1-p0"]),  # g -> r: held 60 + 80 + 100 ns, crosses the root
            (2, 0, 50, ["g-p0", "s3-p0", "s2-p2"]),  # g -> a host on s2: held 30 + 40 ns, never on s1-p0
            (3, 300, 400, ["h-p0", "s1-p0"]),  # h -> r: held 100 ns, crosses the root
            (4, 0, 1000, ["r-p0", "s1-p1"]),  # never held
        ],
        columns=["msg_id", "t_start_ns", "t_end_ns", "path"],
    )
    got = flow_pauses(flows, iv).set_index("msg_id")
    assert got.paused_ns.to_dict() == {1: 240, 2: 70, 3: 100, 4: 0}
    assert got.victim.to_dict() == {1: False, 2: True, 3: False, 4: False}
    late = [(0, "s1-p1", "s2-p0", 1, "s1-p0"), (10, "s2-p1", "s3-p0", 1, "s2-p0"), (90, "s2-p1", "s3-p0", 0)]
    late += [(100, "s1-p1", "s2-p0", 0), (150, "s3-p1", "g-p0", 1, "s3-p0"), (160, "s3-p1", "g-p0", 0)]
    iv = with_roots(paused_intervals(_fake_repeat(tmp_path / "b", late)))
    assert dict(zip(iv.port, iv.root)) == {"s2-p0": "s1-p0", "s3-p0": "s1-p0", "g-p0": "s3-p0"}


def test_a_pause_without_its_cause_voids_the_roots(tmp_path):
    from testbed.measure.congestion import paused_intervals, with_roots

    with pytest.raises(CongestionRecordsMissing, match="cause_port"):
        with_roots(paused_intervals(_fake_repeat(tmp_path, [(0, "s1-p1", "s2-p0", 1, "")])))


def test_port_queues_fill_the_instants_a_queue_was_empty(tmp_path):
    """The program writes only non-empty queues; the series puts 0 at every other sampling
    instant, keeps the deepest ports only, and voids without the sampling record."""
    from testbed.measure.congestion import port_queues

    fd = _fake_repeat(tmp_path / "a", [])
    d = fd.raw / "ns3"
    rows = [(10, "s1-p0", 500), (30, "s1-p0", 700), (30, "s2-p0", 100), (20, "s3-p0", 50)]
    (d / "queue_samples.csv").write_text(
        "t_ns,port,backlog_bytes,qlen_pkts\n" + "".join(f"{t},{p},{b},1\n" for t, p, b in rows)
    )
    (d / "summary.txt").write_text("end_ns 40\nqueue_samples 4\nsample_period_ns 10\n")
    q = port_queues(fd, most=2)
    assert list(q.columns) == ["s1-p0", "s2-p0"] and list(q.index) == [10, 20, 30, 40]
    assert q["s1-p0"].tolist() == [500, 0, 700, 0] and q["s2-p0"].tolist() == [0, 0, 100, 0]
    (d / "summary.txt").write_text("end_ns 40\n")
    with pytest.raises(CongestionRecordsMissing, match="sampling record"):
        port_queues(fd)
