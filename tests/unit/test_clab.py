"""containerlab export and import: the documented topology structure, the same interface names and
host addressing as the Mininet build, and a byte-identical round trip of the fabric JSON.

containerlab's own JSON schema is not vendored here (see README "containerlab"): the structural
checks below are written from containerlab's documented topology format."""

import re
import subprocess
import sys

import pytest
import yaml

from testbed.emulation.config import EmulationConfig
from testbed.emulation.network import host_script
from testbed.fabric import build_fabric, clab
from testbed.fabric.model import FabricFileError

SPECS = ["zcube:n=4,gpus_per_server=4", "zcube:n=8,gpus_per_server=4", "roft:gpus=16,gpus_per_server=4,segments=2"]


def check_structure(doc: dict, fab) -> None:
    assert set(doc) <= {"name", "prefix", "mgmt", "topology"} and re.fullmatch(r"[A-Za-z0-9_-]+", doc["name"])
    topo = doc["topology"]
    assert set(topo) <= {"defaults", "kinds", "groups", "nodes", "links"}
    for labels in [topo["defaults"]["labels"]] + [n["labels"] for n in topo["nodes"].values()]:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())
    for node in topo["nodes"].values():
        assert node["kind"] in ("ovs-bridge", "linux")
        assert set(node) <= {"kind", "image", "labels", "exec"}
        if node["kind"] == "linux":
            assert node["image"] and all(isinstance(c, str) for c in node["exec"])
    seen = set()
    for link in topo["links"]:
        assert set(link) <= {"endpoints", "mtu", "labels"} and len(link["endpoints"]) == 2
        for ep in link["endpoints"]:
            node, iface = ep.split(":")
            assert node in topo["nodes"] and len(iface) <= 15
            assert ep not in seen  # an interface is cabled once
            seen.add(ep)
    cabled = {f"{fab.nodes[p.node].name}:{p.name}" for p in fab.ports if fab.port_link[p.id] >= 0}
    assert seen == cabled


@pytest.mark.parametrize("spec", SPECS)
def test_export_structure_and_byte_identical_round_trip(spec):
    fab = build_fabric(spec)
    text = clab.dumps(fab)
    doc = yaml.safe_load(text)
    check_structure(doc, fab)
    assert clab.loads(text).to_json() == fab.to_json()
    switches = {n for n, v in doc["topology"]["nodes"].items() if v["kind"] == "ovs-bridge"}
    assert switches == {sw.name for sw in fab.switches}


def test_hosts_get_the_mininet_builds_addressing():
    fab = build_fabric(SPECS[0])
    doc = clab.to_dict(fab, mtu_bytes=9000)
    g0 = doc["topology"]["nodes"]["g0"]["exec"]
    script = host_script(fab, 0, EmulationConfig(mtu_bytes=9000))
    batch = script.split("ip -batch - <<'ZLAB_EOF'\n")[1].split("\nZLAB_EOF")[0].splitlines()
    assert g0 == [f"ip {line}" for line in batch]


def test_setup_script_pins_port_numbers_and_points_at_the_controller():
    fab = build_fabric(SPECS[0])
    sh = clab.setup_script(fab)
    assert "ovs-vsctl set Interface za0-p5 ofport_request=5" in sh
    assert sh.count("set-controller") == len(fab.switches) and "fail-mode=secure" in sh
    assert subprocess.run(["sh", "-n"], input=sh, text=True).returncode == 0  # valid shell


@pytest.mark.parametrize(
    "mangle, words",
    [
        (lambda d: d["topology"]["defaults"]["labels"].pop("zlab.schema"), "zlab imports only its own exports"),
        (lambda d: d["topology"]["links"].pop(3), "link ids are not 0..N-1"),
        (lambda d: d["topology"]["nodes"]["za0"].update(kind="linux"), "node za0: kind 'linux', expected 'ovs-bridge'"),
        (lambda d: d["topology"]["links"][0].update(endpoints=["nope:x", "za0:za0-p1"]), "links[0]"),
        (lambda d: d["topology"]["nodes"]["g1"]["labels"].pop("zlab.node"), "node g1: missing or bad zlab labels"),
    ],
)
def test_import_names_what_is_wrong(mangle, words):
    doc = clab.to_dict(build_fabric(SPECS[0]))
    mangle(doc)
    with pytest.raises(FabricFileError, match=re.escape(words)):
        clab.loads(yaml.safe_dump(doc))


def test_cli_export_import(tmp_path):
    zlab = [sys.executable, "-m", "testbed.cli", "fabric"]
    out = tmp_path / "lab.clab.yml"
    subprocess.run(zlab + ["export", SPECS[2], "-o", str(out)], check=True, capture_output=True)
    assert (tmp_path / "lab.setup.sh").exists() and (tmp_path / "lab.controller" / "flows.json").exists()
    subprocess.run(zlab + ["import", str(out), "-o", str(tmp_path / "back.json")], check=True, capture_output=True)
    subprocess.run(zlab + ["export", SPECS[2], "-o", str(tmp_path / "orig.json")], check=True, capture_output=True)
    assert (tmp_path / "back.json").read_bytes() == (tmp_path / "orig.json").read_bytes()
    bad = subprocess.run(
        zlab + ["import", str(tmp_path / "absent.clab.yml"), "-o", "x.json"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "cannot read" in bad.stderr
