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


def test_the_emulation_refuses_a_congestion_section(tmp_path, capsys):
    argv = ["run", "--set", "congestion.pfc_enabled=true", "--results", str(tmp_path / "res"), "--dry-run"]
    assert zlab(argv) == 2
    assert "--engine ns3" in capsys.readouterr().err
    assert not (tmp_path / "res").exists()


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
    assert (lossless_run / "plots" / "pause_timeline.png").stat().st_size > 1000


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
    (d / "pfc.csv").write_text("t_ns,port,peer_port,event\n" + "".join(f"{t},{a},{b},{e}\n" for t, a, b, e in pfc_rows))
    (d / "summary.txt").write_text(f"end_ns {end_ns}\n")
    names = ["g", "s3", "s2", "s1", "r", "h"]
    ports = [NS(name=f"{n}-p{k}", node=i) for i, n in enumerate(names) for k in range(3)]
    return NS(raw=tmp_path / "raw", repeat=0, fabric=NS(nodes=[NS(name=n) for n in names], ports=ports))


def test_pause_depth_counts_the_chain_of_switches_held_while_pausing(tmp_path):
    from testbed.measure.congestion import paused_intervals, propagation_depth

    chain = [
        (0, "s1-p1", "s2-p0", 1),  # s1 congests: holds s2 from 0 to 100
        (10, "s2-p1", "s3-p0", 1),  # s2, held, holds s3 from 10 to 90
        (20, "s3-p1", "g-p0", 1),  # s3, held, holds the GPU from 20 to 80
        (80, "s3-p1", "g-p0", 0),
        (90, "s2-p1", "s3-p0", 0),
        (100, "s1-p1", "s2-p0", 0),
        (200, "s1-p2", "h-p0", 1),  # elsewhere, one hop, never resumed: ends with the run
    ]
    fd = _fake_repeat(tmp_path / "a", chain)
    iv = paused_intervals(fd)
    assert sorted(iv.itertuples(index=False, name=None)) == [
        ("g-p0", 20, 80, "s3-p1"),
        ("h-p0", 200, 1000, "s1-p2"),
        ("s2-p0", 0, 100, "s1-p1"),
        ("s3-p0", 10, 90, "s2-p1"),
    ]
    assert propagation_depth(fd) == 3
    # s3 pauses the GPU only after s2 let it go: the chain breaks there
    late = [(0, "s1-p1", "s2-p0", 1), (10, "s2-p1", "s3-p0", 1), (90, "s2-p1", "s3-p0", 0), (100, "s1-p1", "s2-p0", 0)]
    late += [(150, "s3-p1", "g-p0", 1), (160, "s3-p1", "g-p0", 0)]
    assert propagation_depth(_fake_repeat(tmp_path / "b", late)) == 2
    assert propagation_depth(_fake_repeat(tmp_path / "c", [])) == 0
