"""ZCube(n, 2): two switch groups joined as a complete bipartite graph, two NIC ports per GPU.

GPU g's `cons` port goes to A[g // n] (consecutive servers, ToR-like); its `rail` port goes to
B[g % m] (same index, rail-like), with m = gpus / n switches per group (m = n when square).
Every A has `links_per_pair` links to every B. See docs in README "Fabric models".
"""

from __future__ import annotations

import math

from .builder import FabricBuilder, gbps_to_bps
from .spec import FabricKind, Param, canonical_spec, register, require

PARAMS = (
    Param("n", int, None, "GPUs per switch (GPU-facing ports per switch); N = n*n when square"),
    Param("gpus", int, 0, "total GPUs; 0 = n*n (square). Else a multiple of n: Zhipu's rectangular form"),
    Param("links_per_pair", int, 1, "parallel links between every A and every B switch"),
    Param("gpus_per_server", int, 0, "GPUs per server, must divide n; 0 = gcd(n, 8)"),
    Param("gpu_gbps", float, 400.0, "bandwidth per GPU; each of its two ports runs at half"),
    Param("radix", int, 0, "switch port budget; 0 = exactly the ports used"),
    Param("shortcut", bool, False, "use the 1-switch path for pairs sharing a switch (halves their throughput)"),
    Param("split", str, "half", "port-split policy per transfer: half (one QP per port), cons or rail only",
          ("half", "cons", "rail")),
    Param("copper", str, "none", "cable medium rule: none = all fibre, nic-a = NIC->A links copper (rack-local)",
          ("none", "nic-a")),
)


def build(given: dict):
    p = {prm.name: given.get(prm.name, prm.default) for prm in PARAMS}
    require(p["n"] is not None, "zcube", "parameter n (GPUs per switch) is required, e.g. zcube:n=4")
    n = p["n"]
    require(n >= 2, "zcube", f"n must be >= 2 (got n={n}): ZCube(1,2) has no fabric")
    gpus = p["gpus"] or n * n
    require(gpus > 0 and gpus % n == 0, "zcube", f"gpus={gpus} must be a positive multiple of n={n}")
    m = gpus // n
    require(m >= 2, "zcube", f"gpus={gpus} gives {m} switch per group; need at least 2")
    lpp = p["links_per_pair"]
    require(lpp >= 1, "zcube", f"links_per_pair must be >= 1 (got {lpp})")
    s = p["gpus_per_server"] or math.gcd(n, 8)
    require(s >= 1 and n % s == 0, "zcube", f"gpus_per_server={s} must divide n={n} so A switches hold whole servers")
    require(p["gpu_gbps"] > 0, "zcube", "gpu_gbps must be positive")
    used = n + m * lpp
    radix = p["radix"] or used
    require(used <= radix, "zcube",
            f"port budget exceeded: each switch needs {n} GPU + {m * lpp} fabric ports = {used} > radix {radix}")
    p.update(n=n, gpus=gpus, gpus_per_server=s, radix=radix)
    port_bps = gbps_to_bps(p["gpu_gbps"] / 2)

    b = FabricBuilder("zcube")
    for g in range(gpus):
        b.gpu(g, server=g // s, local_rank=g % s, roles=("cons", "rail"), rate_bps=port_bps, rail=g % m)
    a_nodes = [b.switch("A", 1, j, radix) for j in range(m)]
    b_nodes = [b.switch("B", 1, i, radix) for i in range(m)]
    a_ports, b_ports = {}, {}
    for group_nodes, store in ((a_nodes, a_ports), (b_nodes, b_ports)):
        for sw in group_nodes:
            for num in range(1, used + 1):
                store[(sw, num)] = b.switch_port(sw, num, "down" if num <= n else "fabric", port_bps)
    nic_medium = "copper" if p["copper"] == "nic-a" else "fibre"
    for g in range(gpus):
        b.link(2 * g, a_ports[(a_nodes[g // n], g % n + 1)], port_bps, "nic", nic_medium)
        b.link(2 * g + 1, b_ports[(b_nodes[g % m], g // m + 1)], port_bps, "nic", "fibre")
    for j in range(m):
        for i in range(m):
            for l in range(lpp):
                b.link(a_ports[(a_nodes[j], n + 1 + i * lpp + l)], b_ports[(b_nodes[i], n + 1 + j * lpp + l)],
                       port_bps, "fabric", "fibre")
    params = dict(p, switches_per_group=m, port_gbps=p["gpu_gbps"] / 2)
    return b.finish(canonical_spec(KIND, p), params)


KIND = FabricKind("zcube", "ZCube(n,2): A/B switch groups in K(m,m), 2 NIC ports per GPU, no spine", PARAMS, build)
register(KIND)
