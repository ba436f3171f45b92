"""The ns-3 TCP baseline (testbed/referee/zlab_tcp_baseline.cc, baseline.py) on the shipped
mini-run: ns-3's own TCP, one connection per QP with the QP's source port, follows the flow entries
onto the QP's path, so every data-carrying port carries the same bytes as zlab's transport (within
the 4 B of header per frame by which TCP/IP and RoCE differ), and completion times are of the same
order. A sanity check, not an equality."""

import shutil
from pathlib import Path

from testbed.cli import main as zlab
from testbed.records import read_json
from testbed.referee import baseline

MINI = Path(__file__).resolve().parents[1] / "data" / "mini-run"


def test_tcp_carries_the_same_bytes_on_the_same_links(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(MINI, run)
    assert zlab(["referee", str(run), "--baseline", "--repeats", "1"]) == 0
    assert "same bytes per link (within 2 %): yes" in capsys.readouterr().out
    res = read_json(run / "referee" / "baseline.json")
    assert res["tcp_incomplete"] == 0 and res["max_data_bytes_error"] <= baseline.BYTES_BAND
    for r in res["repeats"]:
        assert r["data_ports"] > 0 and r["messages"] > 0
        for q in ("kv_p50_s", "kv_p99_s"):  # plausible: the same order as zlab's transport
            assert 0.5 <= r[q]["tcp"] / r[q]["zlab"] <= 2.0, (r["label"], q, r[q])


def test_baseline_refuses_a_folder_that_is_not_a_run(tmp_path, capsys):
    assert zlab(["referee", str(tmp_path), "--baseline"]) == 2
    assert "not a zlab run folder" in capsys.readouterr().err
