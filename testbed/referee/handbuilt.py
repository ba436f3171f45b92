"""Small scenarios for the ns-3 program, built by hand: a few GPUs and switches, shortest-path
routes, QPs and messages, written in the program's text format and run.

Why: the packet engine's congestion machinery (PFC, ECN, DCQCN) is validated on cases small
enough to work out by hand or against a closed form (an incast, one bottleneck, a chain of
switches), which a fabric spec cannot express. The format is the one testbed/referee/scenario.py
writes for whole fabrics; this module only knows the wire format, not zlab's fabrics.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..errors import RuntimeFailure
from . import binary

ROUTE_PRIORITY = 100


@dataclass
class Run:
    """What the program wrote, as tables (empty tables for files a mode does not write)."""

    messages: pd.DataFrame
    ports: pd.DataFrame
    pfc: pd.DataFrame
    rates: pd.DataFrame
    cnps: pd.DataFrame
    ecn: pd.DataFrame
    summary: dict
    returncode: int

    def port(self, name: str) -> pd.Series:
        return self.ports.set_index("port").loc[name]


@dataclass
class Net:
    """A hand-built network. Ports are numbered per node in the order links are added."""

    params: dict[str, int] = field(default_factory=dict)
    nodes: list[tuple[str, str]] = field(default_factory=list)  # (name, gpu|switch)
    ports: list[tuple[int, int, str, int, int, int]] = field(default_factory=list)  # node, number, name, ip, bps, q
    links: list[tuple[int, int]] = field(default_factory=list)
    qps: list[tuple[int, int, int]] = field(default_factory=list)  # src port, dst port, udp sport
    msgs: list[tuple[int, int, int]] = field(default_factory=list)  # qp, t_due_ns, size_bytes

    def node(self, name: str, role: str) -> int:
        self.nodes.append((name, role))
        return len(self.nodes) - 1

    def gpu(self, name: str) -> int:
        return self.node(name, "gpu")

    def switch(self, name: str) -> int:
        return self.node(name, "switch")

    def link(self, a: int, b: int, rate_bps: int, queue_pkts: int = 100_000) -> tuple[int, int]:
        """Cable node a to node b; returns (a's port id, b's port id). A GPU has one port."""
        ids = []
        for n in (a, b):
            number = sum(1 for p in self.ports if p[0] == n)
            name = f"{self.nodes[n][0]}-p{number}"
            ip = (10 << 24) + len(self.ports) + 1 if self.nodes[n][1] == "gpu" else 0
            self.ports.append((n, number, name, ip, int(rate_bps), int(queue_pkts)))
            ids.append(len(self.ports) - 1)
        self.links.append((ids[0], ids[1]))
        return ids[0], ids[1]

    def gpu_port(self, gpu: int) -> int:
        (pid,) = [i for i, p in enumerate(self.ports) if p[0] == gpu]
        return pid

    def qp(self, src_gpu: int, dst_gpu: int, sport: int = 49152) -> int:
        self.qps.append((self.gpu_port(src_gpu), self.gpu_port(dst_gpu), sport))
        return len(self.qps) - 1

    def msg(self, qp: int, t_ns: int, size_bytes: int) -> int:
        self.msgs.append((qp, int(t_ns), int(size_bytes)))
        return len(self.msgs) - 1

    def _routes(self) -> list[str]:
        """Per switch and destination GPU: the out port on a shortest path (BFS from the GPU)."""
        peer = {}
        for a, b in self.links:
            peer[a], peer[b] = b, a
        ports_of = {}
        for i, p in enumerate(self.ports):
            ports_of.setdefault(p[0], []).append(i)
        lines = []
        for g, (_, role) in enumerate(self.nodes):
            if role != "gpu":
                continue
            ip = self.ports[self.gpu_port(g)][3]
            seen, todo = {g}, deque([g])
            while todo:  # from the destination outwards: each switch learns the port back towards it
                n = todo.popleft()
                for pid in ports_of.get(n, []):
                    far = peer.get(pid)
                    if far is None:
                        continue
                    m = self.ports[far][0]
                    if m in seen:
                        continue
                    seen.add(m)
                    if self.nodes[m][1] == "switch":
                        lines.append(f"entry {m} {ROUTE_PRIORITY} {ip} {0xFFFFFFFF} 0 0 {self.ports[far][1]}")
                        todo.append(m)
        return lines

    def text(self) -> str:
        lines = ["# zlab hand-built scenario (testbed/referee/handbuilt.py)"]
        lines += [f"param {k} {int(v)}" for k, v in self.params.items()]
        lines += [f"node {i} {name} {role}" for i, (name, role) in enumerate(self.nodes)]
        lines += [
            f"port {i} {n} {num} {name} {ip} {bps} {q}" for i, (n, num, name, ip, bps, q) in enumerate(self.ports)
        ]
        lines += [f"link {a} {b}" for a, b in self.links]
        lines += self._routes()
        lines += [f"qp {i} {s} {d} {sp}" for i, (s, d, sp) in enumerate(self.qps)]
        order = sorted(range(len(self.msgs)), key=lambda i: self.msgs[i][1])
        lines += [f"msg {k} {self.msgs[i][0]} {self.msgs[i][1]} {self.msgs[i][2]}" for k, i in enumerate(order)]
        return "\n".join(lines) + "\n"

    def run(self, timeout_s: float = 600) -> Run:
        exe = binary.build(log=lambda *a: None)
        with tempfile.TemporaryDirectory(prefix="zlab-handbuilt-") as d:
            (Path(d) / "s.txt").write_text(self.text())
            res = subprocess.run(
                [str(exe), str(Path(d) / "s.txt"), d], capture_output=True, text=True, timeout=timeout_s
            )
            if res.returncode not in (0, 3):
                raise RuntimeFailure(f"zlab-referee failed on a hand-built scenario: {res.stderr.strip()[-300:]}")

            def table(name: str) -> pd.DataFrame:
                path = Path(d) / name
                return pd.read_csv(path) if path.exists() else pd.DataFrame()

            summary = dict(line.split(" ", 1) for line in (Path(d) / "summary.txt").read_text().splitlines())
            return Run(
                table("messages.csv"),
                table("ports.csv"),
                table("pfc.csv"),
                table("rates.csv"),
                table("cnp.csv"),
                table("ecn.csv"),
                summary,
                res.returncode,
            )
