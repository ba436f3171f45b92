"""The experiment spec's `congestion:` section: RoCE congestion machinery in real units.

Why one specification: the ns-3 packet engine and the emulation must run the same ECN, PFC and
DCQCN settings, so both read them from here — the schema (with defaults), the cross-field
validation, the ns-3 program's parameters (`ns3_params`, contract B's names exactly) and the
one-line mode name reports print (`describe`). Every default names its source below; HPCC is
alibaba-edu/High-Precision-Congestion-Control at 9f4be2a, SimAI is aliyun/SimAI's
astra-sim-alibabacloud/inputs/config/SimAI.conf. HPCC's C++ defaults in rdma-hw.cc differ
(g = 1/16, rate-increase timer 1,500 us, F = 5, min rate 100 Mb/s): run.py overrides them, and
run.py is what HPCC's published runs used, so its values are taken.
"""

from __future__ import annotations

from ..errors import UserInputError
from .mmu import headroom_bytes

CC_NAMES = ("none", "dcqcn")


def _int(default: int, minimum: int = 0) -> dict:
    return {"type": "integer", "minimum": minimum, "default": default}


# One level of fields (the reference generator renders sections of plain fields), grouped by prefix:
# ecn_*, pfc_*, dcqcn_*. The names are contract B's ns-3 names but for pmax (a fraction here, ppm there)
# and buffer_bytes (pfc_buffer_bytes here).
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "default": {},
    "properties": {
        "cc": {"enum": list(CC_NAMES), "default": "none"},  # none: today's transport (contract B)
        "window_pkts": _int(64),  # the referee transport's existing window (contract B); 0 = none
        "window_bytes": _int(0),  # assumption: off; > 0 replaces window_pkts
        "ecn_enabled": {"type": "boolean", "default": False},
        # HPCC run.py lines 96-98: KMIN_MAP 100 x bw/25 KB, KMAX_MAP 400 x bw/25 KB, PMAX_MAP 0.2; a KB is
        # 1,000 B (switch-mmu.cc line 112: kmin x 1000)
        "ecn_kmin_bytes_per_25g": _int(100_000),
        "ecn_kmax_bytes_per_25g": _int(400_000),
        "ecn_pmax": {"type": "number", "default": 0.2},
        "pfc_enabled": {"type": "boolean", "default": False},
        # SimAI.conf line 56: BUFFER_SIZE 32, in MiB (HPCC third.cc line 847: x 1024 x 1024); HPCC's run.py
        # line 83 scales 16 MiB per 50 Gb/s of NIC rate instead
        "pfc_buffer_bytes": _int(33_554_432, 1),
        "pfc_reserve_bytes": _int(4_096),  # HPCC switch-mmu.cc line 26
        "pfc_resume_offset_bytes": _int(3_072),  # HPCC switch-mmu.cc line 27
        "pfc_alpha_inv": _int(8, 1),  # HPCC third.cc line 825: shift 3, XOFF = free / 8
        "pfc_headroom_factor": _int(3),  # HPCC third.cc line 836: rate x delay x 3
        "link_delay_ns": _int(1_000),  # HPCC mix/fat.txt: every link 1000ns
        "switch_latency_ns": _int(0),  # assumption: HPCC's switches add none beyond serialisation
        "dcqcn_g_inv": _int(256, 1),  # HPCC run.py line 104: g = 0.00390625
        "dcqcn_alpha_update_ns": _int(1_000, 1),  # HPCC run.py line 104: t_alpha = 1 (us)
        "dcqcn_rate_decrease_ns": _int(4_000, 1),  # HPCC run.py line 104: t_dec = 4 (us)
        "dcqcn_rate_increase_ns": _int(300_000, 1),  # HPCC run.py line 104: t_inc = 300 (us)
        "dcqcn_byte_counter_bytes": _int(0),  # HPCC has no byte counter (rdma-hw.cc lines 683-697: timer only)
        "dcqcn_f": _int(1, 1),  # HPCC run.py line 25: FAST_RECOVERY_TIMES 1
        "dcqcn_ai_bps_per_25g": _int(5_000_000),  # HPCC run.py line 100: 5 x bw/25 Mb/s
        "dcqcn_hai_bps_per_25g": _int(50_000_000),  # HPCC run.py line 101: 50 x bw/25 Mb/s
        "dcqcn_min_rate_bps": _int(1_000_000_000, 1),  # HPCC run.py line 28: MIN_RATE 1000Mb/s (not scaled)
        # assumption from the DCQCN paper (Zhu et al. SIGCOMM'15: at most one CNP per 50 us per flow); HPCC
        # puts a CNP on every ACK of a CE packet (rdma-hw.cc line 322) and the 4 us decrease check rate-limits
        "cnp_interval_ns": _int(50_000),
    },
}

DESCRIPTIONS = {
    "congestion": "RoCE congestion machinery in real units, shared by the ns-3 packet engine and the emulation "
    "(docs/congestion.md)",
    "congestion.cc": "sender congestion control: none (the transport's window only) or dcqcn",
    "congestion.window_pkts": "the transport's window in packets (0: no window)",
    "congestion.window_bytes": "a window in real bytes instead (0: not used; > 0 replaces window_pkts)",
    "congestion.ecn_enabled": "RED-style ECN marking at switch egress, on dequeue, on the egress queue's bytes",
    "congestion.ecn_kmin_bytes_per_25g": "marking starts above this queue, bytes per 25 Gb/s of port rate",
    "congestion.ecn_kmax_bytes_per_25g": "every packet is marked above this queue, bytes per 25 Gb/s of port rate",
    "congestion.ecn_pmax": "marking probability at Kmax, in (0, 1]",
    "congestion.pfc_enabled": "lossless: a shared-buffer MMU per switch pauses upstream ports instead of dropping",
    "congestion.pfc_buffer_bytes": "shared buffer per switch, bytes",
    "congestion.pfc_reserve_bytes": "reserved buffer per ingress port, bytes",
    "congestion.pfc_resume_offset_bytes": "resume this far below XOFF, bytes",
    "congestion.pfc_alpha_inv": "XOFF = (buffer - headroom - reserve - shared in use) / alpha_inv",
    "congestion.pfc_headroom_factor": "headroom per port = factor x port rate x link delay",
    "congestion.link_delay_ns": "propagation delay per link, real ns",
    "congestion.switch_latency_ns": "forwarding latency per switch, real ns (an assumption)",
    "congestion.dcqcn_g_inv": "DCQCN alpha gain g = 1 / g_inv",
    "congestion.dcqcn_alpha_update_ns": "DCQCN alpha update timer, real ns",
    "congestion.dcqcn_rate_decrease_ns": "DCQCN: at most one rate cut per this interval, real ns",
    "congestion.dcqcn_rate_increase_ns": "DCQCN rate-increase timer, real ns",
    "congestion.dcqcn_byte_counter_bytes": "DCQCN rate-increase byte counter, bytes (0: off, as in HPCC)",
    "congestion.dcqcn_f": "DCQCN fast-recovery stages before additive increase",
    "congestion.dcqcn_ai_bps_per_25g": "DCQCN additive increase, bit/s per 25 Gb/s of line rate",
    "congestion.dcqcn_hai_bps_per_25g": "DCQCN hyper increase, bit/s per 25 Gb/s of line rate",
    "congestion.dcqcn_min_rate_bps": "DCQCN rate floor, bit/s",
    "congestion.cnp_interval_ns": "a receiver sends at most one CNP per QP per this interval, real ns",
}


def defaults() -> dict:
    """The section with every default filled in."""
    return {key: prop["default"] for key, prop in SCHEMA["properties"].items()}


def _filled(cfg: dict | None) -> dict:
    unknown = sorted(set(cfg or {}) - set(SCHEMA["properties"]))
    if unknown:
        raise UserInputError(
            f"spec error at congestion: unknown field {unknown[0]!r}; valid fields: {', '.join(SCHEMA['properties'])}"
        )
    return {**defaults(), **(cfg or {})}


def _group(c: dict, prefix: str) -> dict:
    """The fields with `prefix`_ (ecn, pfc, dcqcn), without it: c["pfc_buffer_bytes"] is pfc["buffer_bytes"]."""
    return {k[len(prefix) + 1 :]: v for k, v in c.items() if k.startswith(prefix + "_")}


def validate(cfg: dict | None) -> dict:
    """The section with defaults filled in; raises UserInputError (one line) on values that cannot
    work together. Runs before anything is written."""
    c = _filled(cfg)
    where = "spec error at congestion"
    if c["cc"] not in CC_NAMES:
        raise UserInputError(f"{where}.cc: unknown congestion control {c['cc']!r}; valid: {', '.join(CC_NAMES)}")
    for key in ("window_pkts", "window_bytes", "link_delay_ns", "switch_latency_ns", "cnp_interval_ns"):
        if not isinstance(c[key], int) or c[key] < 0:
            raise UserInputError(f"{where}.{key}: {c[key]!r} must be a whole number >= 0")
    e, p, d = _group(c, "ecn"), _group(c, "pfc"), _group(c, "dcqcn")
    if not 0 <= e["kmin_bytes_per_25g"] <= e["kmax_bytes_per_25g"]:
        raise UserInputError(
            f"{where}.ecn: kmin_bytes_per_25g {e['kmin_bytes_per_25g']} is above kmax_bytes_per_25g "
            f"{e['kmax_bytes_per_25g']} (or negative)"
        )
    if not 0 < e["pmax"] <= 1:
        raise UserInputError(f"{where}.ecn_pmax: {e['pmax']} is outside (0, 1]")
    if p["buffer_bytes"] <= 0 or p["alpha_inv"] < 1 or min(p["reserve_bytes"], p["resume_offset_bytes"]) < 0:
        raise UserInputError(
            f"{where}: pfc_buffer_bytes must be > 0, pfc_alpha_inv >= 1, pfc reserve and resume offset >= 0"
        )
    if p["headroom_factor"] < 0:
        raise UserInputError(f"{where}.pfc_headroom_factor: {p['headroom_factor']} must be >= 0")
    if p["reserve_bytes"] >= p["buffer_bytes"]:
        raise UserInputError(
            f"{where}.pfc_reserve_bytes: {p['reserve_bytes']} leaves no shared buffer of pfc_buffer_bytes "
            f"{p['buffer_bytes']}"
        )
    if d["g_inv"] < 1 or min(d["alpha_update_ns"], d["rate_decrease_ns"], d["rate_increase_ns"]) <= 0:
        raise UserInputError(f"{where}: dcqcn_g_inv must be >= 1 and every dcqcn timer > 0 ns")
    if min(d["byte_counter_bytes"], d["ai_bps_per_25g"], d["hai_bps_per_25g"]) < 0 or d["min_rate_bps"] <= 0:
        raise UserInputError(f"{where}: dcqcn byte counter, AI and HAI must be >= 0 and dcqcn_min_rate_bps > 0")
    if d["f"] < 1:
        raise UserInputError(f"{where}.dcqcn_f: {d['f']} must be >= 1 (fast-recovery stages before additive increase)")
    if c["cc"] == "dcqcn" and not e["enabled"]:
        raise UserInputError(f"{where}: cc is dcqcn but ecn_enabled is false; DCQCN reacts only to ECN marks")
    return c


def check_switch(cfg: dict, port_rates_bps: list[float], switch: str = "switch") -> int:
    """XOFF of an empty buffer on a switch with these port rates; raises UserInputError when the
    headroom and reserve of its ports leave nothing to share (PFC could never admit a byte)."""
    c = validate(cfg)
    p = _group(c, "pfc")
    need = sum(headroom_bytes(r, c["link_delay_ns"], p["headroom_factor"]) + p["reserve_bytes"] for r in port_rates_bps)
    xoff = (p["buffer_bytes"] - need) // p["alpha_inv"]
    if p["enabled"] and xoff <= 0:
        raise UserInputError(
            f"spec error at congestion.pfc_buffer_bytes: {switch}'s {len(port_rates_bps)} ports need {need} B of headroom and "
            f"reserve, not less than {p['buffer_bytes']} (XOFF would be {xoff} B)"
        )
    return xoff


def ns3_params(cfg: dict | None, switch_port_rates_bps: dict[str, list[float]] | None = None) -> dict[str, int]:
    """The ns-3 program's congestion parameters, exactly contract B's names, all integers.
    With `switch_port_rates_bps` (switch name -> its port rates) each switch's buffer is checked."""
    c = validate(cfg)
    for name, rates in (switch_port_rates_bps or {}).items():
        check_switch(c, rates, name)
    e, p, d = _group(c, "ecn"), _group(c, "pfc"), _group(c, "dcqcn")
    return {
        "cc": CC_NAMES.index(c["cc"]),
        "window_pkts": c["window_pkts"],
        "window_bytes": c["window_bytes"],
        "ecn_enabled": int(e["enabled"]),
        "ecn_kmin_bytes_per_25g": e["kmin_bytes_per_25g"],
        "ecn_kmax_bytes_per_25g": e["kmax_bytes_per_25g"],
        "ecn_pmax_ppm": round(e["pmax"] * 1_000_000),
        "pfc_enabled": int(p["enabled"]),
        "buffer_bytes": p["buffer_bytes"],
        "pfc_reserve_bytes": p["reserve_bytes"],
        "pfc_resume_offset_bytes": p["resume_offset_bytes"],
        "pfc_alpha_inv": p["alpha_inv"],
        "pfc_headroom_factor": p["headroom_factor"],
        "link_delay_ns": c["link_delay_ns"],
        "switch_latency_ns": c["switch_latency_ns"],
        "dcqcn_g_inv": d["g_inv"],
        "dcqcn_alpha_update_ns": d["alpha_update_ns"],
        "dcqcn_rate_decrease_ns": d["rate_decrease_ns"],
        "dcqcn_rate_increase_ns": d["rate_increase_ns"],
        "dcqcn_byte_counter_bytes": d["byte_counter_bytes"],
        "dcqcn_f": d["f"],
        "dcqcn_ai_bps_per_25g": d["ai_bps_per_25g"],
        "dcqcn_hai_bps_per_25g": d["hai_bps_per_25g"],
        "dcqcn_min_rate_bps": d["min_rate_bps"],
        "cnp_interval_ns": c["cnp_interval_ns"],
    }


def dcqcn_params(cfg: dict | None, line_rate_bps: float):
    """The reference DCQCN machine's parameters for a QP at `line_rate_bps` (AI/HAI scaled per 25G)."""
    from traffic.dcqcn import DcqcnParams

    c = validate(cfg)
    d = _group(c, "dcqcn")
    return DcqcnParams(
        line_rate_bps=line_rate_bps,
        g=1 / d["g_inv"],
        alpha_update_ns=d["alpha_update_ns"],
        rate_decrease_ns=d["rate_decrease_ns"],
        rate_increase_ns=d["rate_increase_ns"],
        byte_counter_bytes=d["byte_counter_bytes"],
        fast_recovery_stages=d["f"],
        ai_bps_per_25g=d["ai_bps_per_25g"],
        hai_bps_per_25g=d["hai_bps_per_25g"],
        min_rate_bps=d["min_rate_bps"],
    )


def _kb(n_bytes: int) -> str:
    return f"{n_bytes / 1000:g}"


def describe(cfg: dict | None) -> str:
    """The one-line mode name report setup lines print, e.g.
    'lossless (PFC) + DCQCN, ECN 100/400 KB per 25G Pmax 0.2, window none'."""
    c = validate(cfg)
    e = _group(c, "ecn")
    parts = ["lossless (PFC)" if c["pfc_enabled"] else "lossy"]
    parts[0] += " + DCQCN" if c["cc"] == "dcqcn" else ", no congestion control"
    if e["enabled"]:
        parts.append(f"ECN {_kb(e['kmin_bytes_per_25g'])}/{_kb(e['kmax_bytes_per_25g'])} KB per 25G Pmax {e['pmax']:g}")
    else:
        parts.append("no ECN")
    if c["window_bytes"] > 0:
        parts.append(f"window {_kb(c['window_bytes'])} KB")
    elif c["window_pkts"] > 0:
        parts.append(f"window {c['window_pkts']} packets")
    else:
        parts.append("window none")
    return ", ".join(parts)
