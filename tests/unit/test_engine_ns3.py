"""Engine ns3 (`zlab run --engine ns3`): the experiment spec run in ns-3 at real scale, no root,
into a run folder of the emulation's shape. Needs the compiled ns-3 program, as
test_referee_oracles.py does (provision.sh --referee)."""

import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from testbed.cli import main as zlab
from testbed.experiment import schedule
from testbed.experiment import spec as especs
from testbed.experiment.resolve import resolve
from testbed.fabric.model import Fabric
from testbed.fabric.paths import walk
from testbed.measure import report
from testbed.referee import binary, scenario

MINI = Path(__file__).resolve().parents[1] / "data" / "mini-run"
# a model with a small KV cache (512 B per token) keeps every real-scale message to a few hundred packets
TINY_MODEL = {"name": "tiny", "layers": 2, "kv_heads": 1, "head_dim": 64}
# written only by the emulating machine's processes (the CPU sampler's and the collector's own logs)
EMULATION_ONLY = {"cpu.jsonl", "collector.log"}
# ns-3 counts bytes per port only once per run and none per QP: no utilisation windows, no model comparison
NOT_RECORDED_BY_NS3 = {"link_util", "link_bytes"}


def _spec(tmp_path, **workload) -> str:
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump({"repeats": 2, "workload": {"model": TINY_MODEL, "requests": 3, **workload}}))
    return str(p)


@pytest.fixture(scope="module")
def ns3_run(tmp_path_factory):
    binary.build(log=lambda *_: None)
    tmp = tmp_path_factory.mktemp("ns3")
    code = zlab(["run", _spec(tmp), "--engine", "ns3", "--results", str(tmp / "res"), "--no-progress"])
    assert code == 0
    (root,) = (tmp / "res").iterdir()
    return root


def _tables(root: Path) -> dict[str, list[str]]:
    """table name -> columns, over every fabric and repeat (the parquet files report.build wrote)."""
    out = {}
    for f in sorted((root / "tables").glob("*.parquet")):
        name = f.stem.split("_", 2)[2]
        out.setdefault(name, list(pd.read_parquet(f).columns))
    return out


def test_the_schedule_is_the_one_the_emulation_posted():
    """schedule.messages (what engine ns3 runs) is exactly what the emulation recorded as posted."""
    exp = json.loads((MINI / "experiment.json").read_text())
    resolved = resolve(especs.validate(exp["spec"]))
    for label, fr in resolved.fabrics.items():
        for rep in fr.repeats:
            recorded = json.loads((MINI / label / "raw" / f"rep{rep.index}" / "schedule.json").read_text())
            assert schedule.messages(rep) == recorded["messages"]


@pytest.mark.slow
def test_a_small_spec_runs_in_ns3_into_an_emulation_shaped_folder(ns3_run, tmp_path):
    root = ns3_run
    run = json.loads((root / "run.json").read_text())
    exp = json.loads((root / "experiment.json").read_text())
    assert run["status"] == "complete" and run["engine"] == "ns3"
    assert exp["spec"]["engine"] == "ns3"
    for label, fr in exp["fabrics"].items():
        assert fr["scaling"]["dilation"] == 1 and fr["scaling"]["size_scale"] == 1  # real scale
        for f in ("fabric.json", "flows.json", "run.json"):
            assert (root / label / f).exists()
        for rep in fr["repeats"]:
            raw = root / label / "raw" / f"rep{rep['index']}"
            emu = {p.name for p in (MINI / label / "raw" / f"rep{rep['index']}").iterdir()}
            assert emu - EMULATION_ONLY <= {p.name for p in raw.iterdir()}
    for f in ("metrics.json", "report.md"):
        assert (root / f).exists()
    # the same tables with the same columns as the emulation's (the mini-run's, rebuilt here)
    mini = tmp_path / "mini"
    shutil.copytree(MINI, mini)
    report.build(mini, plots_too=False)
    emu_tables, ns3_tables = _tables(mini), _tables(root)
    assert set(ns3_tables) == set(emu_tables) - NOT_RECORDED_BY_NS3
    for name, cols in ns3_tables.items():
        assert cols == emu_tables[name], name
    text = (root / "report.md").read_text()
    assert "- engine: ns3 (" in text and "transport: window 64 packets, no congestion control" in text
    assert "not applicable to ns3" in text
    metrics = json.loads((root / "metrics.json").read_text())
    for fab in metrics["fabrics"].values():
        assert fab["summary"]["fidelity"]["valid"]
        for r in fab["repeats"]:
            assert "CPU and hypervisor steal: not applicable to ns3" in r["fidelity"]["not_applicable"]
    assert zlab(["report", str(root)]) == 0


def _by_hand_ns(size_bytes: int, rate_bps: int, switches: int) -> int:
    """An idle path of equal-rate store-and-forward links: the NIC sends every frame back to back
    (4,096-byte payloads, 58 B of headers each and a 16 B RETH on the first); a switch sends a
    frame once it has all of it and has sent the one before (the tandem-queue recursion); the
    62 B ACK then crosses every link back. ns-3 times each frame to the nearest ns."""
    pay = 4096
    n = max(1, math.ceil(size_bytes / pay))
    frames = [pay + 58] * n
    frames[0] += 16
    frames[-1] = size_bytes - (n - 1) * pay + 58 + (16 if n == 1 else 0)
    tx = [round(b * 8 / rate_bps * 1e9) for b in frames]
    done, t = [], 0
    for d in tx:  # the NIC
        t += d
        done.append(t)
    for _ in range(switches):
        prev, out = 0, []
        for k, d in enumerate(tx):
            prev = max(done[k], prev) + d
            out.append(prev)
        done = out
    return done[-1] + (switches + 1) * round(62 * 8 / rate_bps * 1e9)


@pytest.mark.slow
def test_an_uncongested_transfer_completes_in_its_serialisation_time_by_hand(ns3_run):
    """Every message of the first request (posted alone onto idle links) against the arithmetic
    above, to the ns; the request's KV completion is its slowest message."""
    root = ns3_run
    label = "zcube"
    fab = Fabric.load(root / label / "fabric.json")
    port = {p.name: p for p in fab.ports}
    recs = [json.loads(x) for x in (root / label / "raw" / "rep0" / "transfers.jsonl").read_text().splitlines()]
    first = [r for r in recs if r["req"] == 0]
    assert first
    by_hand = []
    for r in first:
        src, dst = port[r["src"]], port[r["dst"]]
        switches = int(walk(fab, [src.id], [dst.id], r["sport"]).n_hops[0])
        expected = _by_hand_ns(r["real_bytes"], int(src.rate_bps), switches)
        assert r["t_complete_ns"] - r["t_due_ns"] == pytest.approx(expected, abs=2), r
        by_hand.append(expected)
    req = pd.read_parquet(root / "tables" / f"{label}_rep0_requests.parquet").set_index("req")
    assert req.loc[0, "kv_transfer_real_s"] == pytest.approx(max(by_hand) / 1e9, abs=5e-9)


@pytest.mark.parametrize(
    "argv,says",
    [
        (["--engine", "foo"], "spec error at engine: 'foo' is not one of ['emulation', 'ns3']"),
        (["--engine", "ns3", "--preset", "queue-faithful"], "engine ns3 runs at real scale"),
        (["--engine", "ns3", "--set", "referee.scales=[real]"], "an engine ns3 run is ns-3 already"),
        (
            ["docs/examples/failures.yaml", "--engine", "ns3"],
            "engine ns3 does not simulate failures",
        ),
    ],
)
def test_bad_engine_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, argv, says):
    res = tmp_path / "res"
    assert zlab(["run", *argv, "--results", str(res)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1
    assert not res.exists()


def test_extra_params_go_after_the_scenarios_own():
    """The hook where congestion params join the scenario: after today's params, before the topology."""
    from testbed.experiment.ns3engine import with_params

    text = "# x\nparam window_pkts 64\nparam hop_delay_ns 0\nnode 0 a switch\n"
    assert (
        with_params(text, {"cc": 1}) == "# x\nparam window_pkts 64\nparam hop_delay_ns 0\nparam cc 1\nnode 0 a switch\n"
    )
    assert with_params(text, {}) == text
    assert scenario.TRANSPORT["window_pkts"] == 64
