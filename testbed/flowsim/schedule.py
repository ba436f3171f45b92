"""KV-transfer schedules for the flow-level engine: a traffic pattern's (prefill GPU, decode GPU)
pairs, each KV transfer split over the GPU's NIC ports by the fabric's split policy.

Why here and not in the replay: at 1,024-16,384 GPUs there is no trace-driven deployment to
replay, so the schedule is the model's own patterns (testbed.fabric.load), with starts spread at
random over a window: the concurrency of a busy P/D cluster, one draw per seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..fabric.load import pattern
from ..fabric.model import Fabric
from ..fabric.paths import dst_address, split_fractions, src_port_id

ROCE_SPORT_FIRST, ROCE_SPORT_COUNT = 49152, 16384


@dataclass
class KvSchedule:
    transfers: list[tuple[int, int, str, str, int, int]]  # (t_ns, flow_id, src port, dst port, bytes, sport)
    parts: dict[int, list[int]]  # KV transfer -> its flow ids (one per NIC port used)
    start_ns: dict[int, int]  # KV transfer -> its start


def kv_schedule(
    fab: Fabric, pattern_name: str, rounds: int, size_bytes: int, window_ns: int, seed: int, fan_in: int = 4
) -> KvSchedule:
    tr = pattern(fab, pattern_name, seed=seed, fan_in=fan_in)
    rng = np.random.default_rng(seed)
    split = split_fractions(fab)
    out, parts, start = [], {}, {}
    for r in range(rounds):
        t = rng.integers(0, window_ns, size=tr.src.size)
        for i in range(tr.src.size):
            kv = r * tr.src.size + i
            start[kv] = int(t[i])
            for role, frac in split:
                sp = int(src_port_id(fab, tr.src[i], role))
                dp = int(dst_address(fab, tr.src[i], role, tr.dst[i]))
                sport = ROCE_SPORT_FIRST + int(rng.integers(ROCE_SPORT_COUNT))
                parts.setdefault(kv, []).append(len(out))
                out.append((int(t[i]), len(out), fab.ports[sp].name, fab.ports[dp].name, int(size_bytes * frac), sport))
    return KvSchedule(out, parts, start)


def kv_completion_ms(sched: KvSchedule, done: dict[int, int]) -> np.ndarray:
    """Completion time of each KV transfer (its last part), in ms from its start."""
    return np.array([(max(done[f] for f in fs) - sched.start_ns[kv]) / 1e6 for kv, fs in sched.parts.items()])
