"""Cabling check: compare the switch-to-switch links LLDP discovered with the blueprint.

Reports missing, extra and swapped cables by switch port name. Pure: the controller only
logs what LLDP saw (controller/lldp.jsonl); this module judges it.
"""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

from ..fabric.model import Fabric
from ..records import read_jsonl


def blueprint(fab: Fabric) -> set[frozenset]:
    out = set()
    for l in fab.links:
        if l.kind != "fabric":
            continue
        a, b = fab.ports[l.a], fab.ports[l.b]
        out.add(frozenset((a.name, b.name)))
    return out


def discovered(lldp_records: list[dict]) -> set[frozenset]:
    out = set()
    for r in lldp_records:
        if r.get("src") and r.get("dst"):
            out.add(frozenset((f"{r['src']}-p{r['src_port']}", f"{r['dst']}-p{r['dst_port']}")))
    return out


def compare(expected: set[frozenset], seen: set[frozenset]) -> dict:
    missing, extra = set(expected - seen), set(seen - expected)
    swapped = []
    for m1, m2 in combinations(sorted(missing, key=sorted), 2):
        if m1 not in missing or m2 not in missing:
            continue
        a, b = sorted(m1)
        c, d = sorted(m2)
        for x1, x2 in ((frozenset((a, d)), frozenset((c, b))), (frozenset((a, c)), frozenset((b, d)))):
            if x1 in extra and x2 in extra:
                swapped.append({"expected": [" <-> ".join(sorted(m1)), " <-> ".join(sorted(m2))],
                                "found": [" <-> ".join(sorted(x1)), " <-> ".join(sorted(x2))]})
                missing -= {m1, m2}
                extra -= {x1, x2}
                break
    fmt = lambda s: sorted(" <-> ".join(sorted(x)) for x in s)  # noqa: E731
    return {"ok": not (missing or extra or swapped), "blueprint_links": len(expected), "discovered_links": len(seen),
            "missing": fmt(missing), "extra": fmt(extra), "swapped": swapped}


def read_lldp(run_dir: Path) -> list[dict]:
    return read_jsonl(Path(run_dir) / "controller" / "lldp.jsonl")


def check_run(run_dir: Path) -> dict:
    fab = Fabric.load(Path(run_dir) / "fabric.json")
    return compare(blueprint(fab), discovered(read_lldp(run_dir)))


def format_report(rep: dict) -> str:
    lines = [f"cabling check: {'CLEAN' if rep['ok'] else 'PROBLEMS FOUND'} "
             f"({rep['discovered_links']} links discovered, {rep['blueprint_links']} in the blueprint)"]
    for s in rep["swapped"]:
        lines.append(f"  swapped: expected {s['expected'][0]} and {s['expected'][1]}; "
                     f"found {s['found'][0]} and {s['found'][1]}")
    lines += [f"  missing: {m}" for m in rep["missing"]]
    lines += [f"  extra:   {e}" for e in rep["extra"]]
    return "\n".join(lines)
