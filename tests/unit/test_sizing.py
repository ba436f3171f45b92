"""Will a fabric fit this machine: the prediction from measured bring-ups, worked by hand."""

from __future__ import annotations

import math

import pytest

from testbed.cli import main
from testbed.cli.commands.doctor import sizes
from testbed.emulation import sizing
from testbed.fabric import build_fabric

GiB = 2**30


def point(spec: str, links: int, ready: float, mem_gib: float, idle: float, down: float = 1.0) -> dict:
    return {
        "spec": spec,
        "links": links,
        "zlab": {"ready_s": ready, "teardown_s": down, "peak_memory_bytes": mem_gib * GiB, "ovs_idle_cores": idle},
    }


# ZCube(4,2) has 48 links, ZCube(8,2) 192, ZCube(16,2) 768, ZCube(32,2) 3,072: each 4x the one before.
COSTS = {
    "points": [
        point("zcube:n=4", 48, 2.0, 0.1, 0.01),
        point("zcube:n=8", 192, 8.0, 0.4, 0.04),
        point("zcube:n=16", 768, 64.0, 1.6, 0.16),
    ]
}


def test_interpolation_is_a_power_law_between_neighbours():
    # between (100, 10) and (400, 40): slope 1 in log-log, so 20 at 200
    assert sizing.interpolate([(100, 10), (400, 40)], 200) == pytest.approx(20)
    # between (100, 10) and (400, 160): slope 2, so 40 at 200; beyond the last point the same law: 2,560 at 1,600
    assert sizing.interpolate([(400, 160), (100, 10)], 200) == pytest.approx(40)
    assert sizing.interpolate([(100, 10), (400, 160)], 1600) == pytest.approx(2560)
    # three points: each segment its own law; x on a measured point gives its value
    pts = [(1, 1), (2, 2), (4, 8)]
    assert sizing.interpolate(pts, 2) == pytest.approx(2)
    assert sizing.interpolate(pts, math.sqrt(8)) == pytest.approx(4)  # slope 2 from (2, 2): 2 x (8**0.5 / 2) ** 2
    # one point: proportional
    assert sizing.interpolate([(10, 3)], 40) == pytest.approx(12)
    # a zero value: linear instead of a power law
    assert sizing.interpolate([(1, 0), (3, 2)], 2) == pytest.approx(1)


def test_a_measured_size_is_predicted_as_measured():
    pr = sizing.predict(build_fabric("zcube:n=16"), COSTS, 20 * GiB, 0.7)
    assert pr.links == 768
    assert pr.values["ready_s"] == pytest.approx(64.0)
    assert pr.values["peak_memory_bytes"] == pytest.approx(1.6 * GiB)
    assert pr.verdict == "fits" and pr.fits and not pr.reasons
    assert "interpolated" in pr.basis


def test_a_size_brought_up_before_shows_its_spread_and_uses_the_latest():
    again = point("zcube:n=16", 768, 64.0, 1.6, 0.16)
    again["earlier"] = [
        point("zcube:n=16", 768, 90.0, 1.6, 0.16),
        {"spec": "zcube:n=16", "links": 768, "zlab": {"error": "x"}},
    ]
    costs = {"points": [*COSTS["points"][:2], again]}
    pr = sizing.predict(build_fabric("zcube:n=16"), costs, 20 * GiB, 0.7)
    assert pr.values["ready_s"] == pytest.approx(64.0)
    assert pr.history == (
        "this size was brought up 3 times here (older code included): ready in 64-90 s over 2; 1 failed; "
        "the prediction uses the latest"
    )
    assert pr.history in "\n".join(sizing.describe(pr))
    assert sizing.predict(build_fabric("zcube:n=8"), costs, 20 * GiB, 0.7).history == ""  # measured once


def test_a_larger_size_is_extrapolated_from_the_last_two():
    # 192 -> 768 links: ready 8 -> 64 s is slope log(8)/log(4) = 1.5, so at 3,072 links 64 x 4^1.5 = 512 s;
    # memory 0.4 -> 1.6 GiB is slope 1: 6.4 GiB; ovs idle 0.16 -> 0.64 cores
    pr = sizing.predict(build_fabric("zcube:n=32"), COSTS, 20 * GiB, 0.7)
    assert pr.links == 3072
    assert pr.values["ready_s"] == pytest.approx(512.0)
    assert pr.values["peak_memory_bytes"] == pytest.approx(6.4 * GiB)
    assert pr.values["ovs_idle_cores"] == pytest.approx(0.64)
    assert pr.verdict == "fits" and "extrapolated" in pr.basis


def test_memory_decides_the_verdict():
    fab = build_fabric("zcube:n=32")  # 6.4 GiB predicted, above
    assert sizing.predict(fab, COSTS, 6 * GiB, 0.7).verdict == "does not fit"
    assert "6.4 GiB > 6.0 GiB" in sizing.predict(fab, COSTS, 6 * GiB, 0.7).reasons[0]
    assert sizing.predict(fab, COSTS, 7 * GiB, 0.7).verdict == "tight"  # 6.4 > 0.8 x 7 = 5.6
    assert sizing.predict(fab, COSTS, 8 * GiB, 0.7).verdict == "fits"  # 6.4 <= 0.8 x 8


def test_idle_polling_over_the_headroom_is_tight_not_valid():
    pr = sizing.predict(build_fabric("zcube:n=32"), COSTS, 20 * GiB, 0.5)  # 0.64 cores idle >= 0.5
    assert pr.verdict == "tight"
    assert "would not be valid" in pr.reasons[0]


def test_a_size_that_failed_here_and_every_larger_one_do_not_fit():
    costs = {"points": [*COSTS["points"], {"spec": "zcube:n=32", "links": 3072, "zlab": {"error": "MemoryError"}}]}
    big = sizing.predict(build_fabric("zcube:n=32"), costs, 20 * GiB, 0.7)
    assert big.verdict == "does not fit" and "did not come up here: MemoryError" in big.reasons[-1]
    assert sizing.predict(build_fabric("zcube:n=16"), costs, 20 * GiB, 0.7).verdict == "fits"
    # another kind is not condemned by it
    assert sizing.predict(build_fabric("roft:gpus=1024,gpus_per_server=8,radix=64,tiers=2"), costs, 20 * GiB, 0.7).fits


def test_what_a_failed_size_measured_before_it_failed_counts():
    failed = {"spec": "zcube:n=32", "links": 3072, "zlab": {"error": "stopped", "peak_memory_bytes": 12.8 * GiB}}
    pr = sizing.predict(build_fabric("zcube:n=32"), {"points": [*COSTS["points"], failed]}, 20 * GiB, 0.7)
    assert pr.values["peak_memory_bytes"] == pytest.approx(12.8 * GiB)  # measured, not the 6.4 GiB extrapolation
    assert pr.values["ready_s"] == pytest.approx(512.0)  # never measured there: still extrapolated
    assert pr.verdict == "does not fit"


def test_a_kind_with_two_points_is_predicted_from_its_own():
    costs = {
        "points": [
            *COSTS["points"],
            point("roft:gpus=16", 32, 1.0, 0.05, 0.0),
            point("roft:gpus=64", 128, 100.0, 5.0, 0.0),
        ]
    }
    roft = build_fabric("roft:gpus=64,gpus_per_server=8,segments=2")  # 128 links: the roft point exactly
    assert sizing.predict(roft, costs, 20 * GiB, 0.7).values["ready_s"] == pytest.approx(100.0)
    z = sizing.predict(build_fabric("zcube:n=8"), costs, 20 * GiB, 0.7)  # zcube's own, not roft's
    assert z.values["ready_s"] == pytest.approx(8.0)


def test_no_record_is_unknown_not_fits():
    pr = sizing.predict(build_fabric("zcube:n=4"), None, 20 * GiB, 0.7)
    assert pr.verdict == "unknown" and not pr.values
    assert "no measured sizes" in sizing.describe(pr)[0]


def test_the_shipped_record_holds_measurements_with_their_source():
    costs = sizing.load()
    assert costs is not None and costs["points"], "testbed/emulation/size_costs.json is missing"
    for p in costs["points"]:
        assert p["command"].startswith("flock ") and p["git_sha"] and p["machine"] and p["date"]
        assert p["links"] == len(build_fabric(p["spec"]).links)
        z = p["zlab"]
        assert "error" in z or (z["ready_s"] > 0 and z["peak_memory_bytes"] > 0 and z["reachable"] == z["pairs"])


def test_doctor_sizes_table_lists_measured_and_larger_sizes():
    lines = sizes(COSTS, 7 * GiB)
    assert "7.0 GiB available" in lines[0]
    row = next(ln for ln in lines if ln.strip().startswith("zcube:n=64"))  # 12,288 links: 1.6 GiB x 16
    assert "does not fit" in row and "25.6 GiB > 7.0 GiB" in row
    assert next(ln for ln in lines if ln.strip().startswith("zcube:n=8")).rstrip().endswith("fits")


def test_up_dry_run_says_whether_it_fits(capsys):
    assert main(["up", "zcube:n=4", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "[zlab] size check:" in out and "predicted ready in" in out


def test_up_dry_run_bad_spec_is_one_line_exit_2(capsys):
    assert main(["up", "zcube:n=5x", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zlab: error:") and "\n" not in err
