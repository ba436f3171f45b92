"""The fabric-side CLI as a user runs it: exit codes, messages, files written."""

import json

import pytest

from testbed.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_fabric_show_text_and_json(capsys):
    code, out, _ = run(capsys, "fabric", "show", "zcube:n=4,gpus_per_server=4")
    assert code == 0
    assert "8 (A 4, B 4): 8 x 8x200G" in out and "diameter        2 switches" in out and "validation      OK" in out
    code, out, _ = run(capsys, "fabric", "show", "roft:gpus=16,gpus_per_server=4,segments=2", "--json")
    data = json.loads(out)
    assert code == 0 and data["validation"]["ok"] and data["validation"]["diameter_switches"] == 3
    assert data["counts"]["switches_spine"] == 2


def test_bad_spec_exits_2_with_the_valid_names(capsys):
    code, _, err = run(capsys, "fabric", "show", "zcube:n=4,m=2")
    assert code == 2 and "unknown parameter 'm'; valid parameters: n, gpus, links_per_pair" in err
    code, _, err = run(capsys, "fabric", "show", "fattree:k=4")
    assert code == 2 and "valid kinds: roft, zcube" in err


def test_export_json_dot_png(capsys, tmp_path):
    for ext in ("json", "dot", "png"):
        path = tmp_path / f"f.{ext}"
        code, out, _ = run(capsys, "fabric", "export", "zcube:n=4", "-o", str(path))
        assert code == 0 and path.stat().st_size > 100
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "za0" in (tmp_path / "f.dot").read_text()
    code, _, err = run(capsys, "fabric", "export", "zcube:n=4", "-o", str(tmp_path / "f.txt"))
    assert code == 2 and ".json, .dot, .png or .clab.yml" in err
    code, _, err = run(capsys, "fabric", "export", "zcube:n=32", "-o", str(tmp_path / "big.png"))
    assert code == 2 and "stop at 256 GPUs" in err


def test_cost_prints_the_comparison(capsys):
    code, out, _ = run(capsys, "cost", "--gpus", "1024")
    assert code == 0
    assert "ZCube switch capacity vs ROFT 2-tier: published -33 %, model -33.3 %" in out
    assert "ROFT 3-tier published 160 x 32x400G, model 160 x 32x400G" in out
    code, _, err = run(capsys, "cost", "--gpus", "1000")
    assert code == 2 and "not a square" in err
    code, _, err = run(capsys, "cost", "--gpus", "1024", "--price", "gold=1")
    assert code == 2 and "unknown price 'gold'" in err


def test_load_and_route(capsys):
    code, out, _ = run(
        capsys, "load", "roft:gpus=16,gpus_per_server=4,segments=2", "--pattern", "incast", "--json", "--seeds", "5"
    )
    util = json.loads(out)["max_link_util"]
    assert code == 0 and util["n"] == 5 and min(util["values"]) >= 4.0  # every draw: 4 senders, one receiver
    assert util["mean"] == pytest.approx(sum(util["values"]) / 5)
    code, _, err = run(capsys, "load", "zcube:n=4", "--pattern", "zigzag")
    assert code == 2 and "valid patterns" in err
    code, out, _ = run(capsys, "route", "zcube:n=4", "g0-p0", "g5")
    assert code == 0 and out.startswith("g0-p0 -> za0[1>6] -> zb1[5>2] -> g5-p1")
    code, _, err = run(capsys, "route", "zcube:n=4", "g0-p7", "g5")
    assert code == 2 and "not a GPU port" in err


def test_help_explains(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fabric", "show", "--help"])
    assert exc.value.code == 0
    assert "zcube:n=8,gpus=32,links_per_pair=2" in capsys.readouterr().out
