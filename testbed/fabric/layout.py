"""Machine-room layout: racks and rows for servers and switches, every cable routed through a
tray model, its medium chosen by length; a patch list, a bill of materials and a cost.

Why a planner and not a formula: ZCube's bipartite core is all long, cluster-wide runs while its
NIC cables can stay short, ROFT's spines sit far from every leaf; which cables are copper and how
much fibre is pulled follows from where things stand. The placement rule is generic (no fabric
kind is named): a switch wired to GPUs whose servers fit in one row stands in that row's network
racks (middle of row), every other switch in the central network rows in the middle of the hall.
Pure data and pure functions, like the fabric models; drawing lives in `floorplan`.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, fields

from .cost import Prices, inventory, price
from .model import Fabric
from .params import SpecError

MEDIA = ("DAC", "AEC", "AOC", "optics")  # by reach; optics = a fibre run with a transceiver at each end
LENGTH_BINS_M = (1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 100, 200, 500)


@dataclass(frozen=True)
class Constraints:
    """Room and rack limits (every value a parameter; defaults are a typical 40 kW-rack hall)."""

    rack_units: int = 42
    rack_power_kw: float = 40.0
    servers_per_rack: int = 4
    server_units: int = 4
    server_power_kw: float = 10.0
    switch_units: int = 2
    switch_power_kw: float = 2.5
    racks_per_row: int = 16
    rack_width_m: float = 0.6
    row_pitch_m: float = 2.4  # rack depth plus aisle, row to row
    tray_above_rack_m: float = 0.3  # from a rack's top to the overhead tray
    unit_m: float = 0.04445  # one rack unit
    slack_m: float = 1.0  # service loops, both ends together
    dac_max_m: float = 3.0
    aec_max_m: float = 7.0
    aoc_max_m: float = 30.0
    aec_cable_usd: float = 400.0  # illustrative, like every price in cost.Prices
    aoc_cable_usd: float = 700.0

    @classmethod
    def parse(cls, items: list[str] | None) -> Constraints:
        """key=value strings (the CLI's --set); unknown keys and non-positive values are refused."""
        known = {f.name: f.type for f in fields(cls)}
        kw = {}
        for item in items or []:
            key, sep, value = item.partition("=")
            if not sep:
                raise SpecError(f"layout: {item!r} is not key=value (e.g. racks_per_row=20)")
            if key not in known:
                raise SpecError(f"layout: unknown constraint {key!r}; known: {', '.join(known)}")
            try:
                num = int(value) if known[key] == "int" else float(value)
            except ValueError:
                raise SpecError(f"layout: {key}={value!r} is not a {known[key]}") from None
            if num <= 0:
                raise SpecError(f"layout: {key} must be > 0, got {value}")
            kw[key] = num
        c = cls(**kw)
        if not (c.dac_max_m <= c.aec_max_m <= c.aoc_max_m):
            raise SpecError(
                f"layout: reach thresholds must grow: dac_max_m {c.dac_max_m} <= aec_max_m "
                f"{c.aec_max_m} <= aoc_max_m {c.aoc_max_m}"
            )
        if c.servers_in_rack < 1:
            raise SpecError(
                f"layout: not one server fits a rack ({c.server_units} U and {c.server_power_kw} kW "
                f"per server; {c.rack_units} U and {c.rack_power_kw} kW per rack)"
            )
        if c.switches_in_rack < 1:
            raise SpecError(f"layout: not one switch fits a rack ({c.switch_units} U, {c.switch_power_kw} kW)")
        return c

    @property
    def servers_in_rack(self) -> int:
        return min(
            self.servers_per_rack, int(self.rack_power_kw // self.server_power_kw), self.rack_units // self.server_units
        )

    @property
    def switches_in_rack(self) -> int:
        return min(int(self.rack_power_kw // self.switch_power_kw), self.rack_units // self.switch_units)

    @property
    def rack_height_m(self) -> float:
        return self.rack_units * self.unit_m


@dataclass(frozen=True)
class Rack:
    name: str  # R<row>.<col>, rows counted across the hall
    row: int
    col: int
    role: str  # server | row-network | central-network
    x_m: float
    y_m: float


@dataclass(frozen=True)
class Place:
    rack: int  # index into Layout.racks
    unit: int  # lowest rack unit occupied (1-based)
    units: int


@dataclass(frozen=True)
class Cable:
    id: str  # computed from the link id: C<link id, 6 digits>
    link: int
    kind: str  # nic | fabric
    rate_gbps: float
    a_port: str
    b_port: str
    length_m: float
    medium: str


@dataclass
class Layout:
    spec: str
    constraints: Constraints
    racks: list[Rack]
    node_place: dict[int, Place]  # node id (servers: their GPUs; switches) -> place
    cables: list[Cable]
    cols: int  # racks in a full row

    @property
    def row_length_m(self) -> float:
        return self.cols * self.constraints.rack_width_m

    def position(self, node: int) -> str:
        p = self.node_place[node]
        return f"{self.racks[p.rack].name}/U{p.unit}"


def cable_id(link_id: int) -> str:
    return f"C{link_id:06d}"


def medium_for(length_m: float, c: Constraints) -> str:
    if length_m <= c.dac_max_m:
        return "DAC"
    if length_m <= c.aec_max_m:
        return "AEC"
    return "AOC" if length_m <= c.aoc_max_m else "optics"


def _gpu_switches(fab: Fabric) -> dict[int, set[int]]:
    """Switch node id -> servers of the GPUs cabled to it (only switches with GPU ports)."""
    out: dict[int, set[int]] = defaultdict(set)
    for link in fab.links:
        if link.kind == "nic":
            gpu = fab.nodes[fab.ports[link.a].node]
            out[fab.ports[link.b].node].add(gpu.server)
    return out


def _server_rows(n_servers: int, c: Constraints, net_racks: int) -> tuple[int, int]:
    """(server racks per row, server rows) with net_racks network racks in the middle of every row."""
    per_row = c.racks_per_row - net_racks
    if per_row < 1:
        raise SpecError(
            f"layout: rows of {c.racks_per_row} racks leave no room for servers next to {net_racks} "
            "network rack(s); raise racks_per_row"
        )
    racks = math.ceil(n_servers / c.servers_in_rack)
    return per_row, math.ceil(racks / per_row)


def plan(fab: Fabric, c: Constraints = Constraints()) -> Layout:
    """Place every server and switch, then route and classify every cable."""
    servers = sorted({g.server for g in fab.gpus})
    server_ix = {s: i for i, s in enumerate(servers)}
    spr = c.servers_in_rack
    gpu_sw = _gpu_switches(fab)

    # network racks per row: grow until the row-local switches of the busiest row fit
    net = 1
    while True:
        per_row, rows = _server_rows(len(servers), c, net)
        row_of_server = {s: (server_ix[s] // spr) // per_row for s in servers}
        local: dict[int, int] = {}  # switch -> its row
        for sw, srvs in gpu_sw.items():
            rws = {row_of_server[s] for s in srvs}
            if len(rws) == 1:
                local[sw] = rws.pop()
        busiest = max(Counter(local.values()).values(), default=0)
        need = max(1, math.ceil(busiest / c.switches_in_rack))
        if need <= net:
            break
        net = need
    central = [n.id for n in fab.switches if n.id not in local]
    cols = min(c.racks_per_row, math.ceil(len(servers) / spr) + net)  # a single short row is not padded
    central_rows = math.ceil(math.ceil(len(central) / c.switches_in_rack) / cols) if central else 0

    # hall rows: half the server rows, the central network rows, the other half
    first_half = (rows + 1) // 2
    hall_row = {r: (r if r < first_half else r + central_rows) for r in range(rows)}
    racks: list[Rack] = []
    rack_index: dict[tuple[int, int], int] = {}

    def rack(row: int, col: int, role: str) -> int:
        key = (row, col)
        if key not in rack_index:
            rack_index[key] = len(racks)
            racks.append(Rack(f"R{row:02d}.{col:02d}", row, col, role, col * c.rack_width_m, row * c.row_pitch_m))
        return rack_index[key]

    net_cols = list(range((cols - net) // 2, (cols - net) // 2 + net))
    server_cols = [col for col in range(cols) if col not in net_cols]
    node_place: dict[int, Place] = {}
    server_place: dict[int, Place] = {}
    for s in servers:
        r = server_ix[s] // spr
        row, k = divmod(r, per_row)
        server_place[s] = Place(
            rack(hall_row[row], server_cols[k], "server"), 1 + (server_ix[s] % spr) * c.server_units, c.server_units
        )
    for g in fab.gpus:
        node_place[g.id] = server_place[g.server]
    fill: Counter = Counter()
    for sw in sorted(local, key=lambda i: (local[i], fab.nodes[i].group, fab.nodes[i].segment, fab.nodes[i].index)):
        row = local[sw]
        k, slot = divmod(fill[row], c.switches_in_rack)
        fill[row] += 1
        node_place[sw] = Place(
            rack(hall_row[row], net_cols[k], "row-network"), 1 + slot * c.switch_units, c.switch_units
        )
    order = sorted(
        central,
        key=lambda i: (
            fab.nodes[i].tier,
            fab.nodes[i].group,
            fab.nodes[i].segment,
            fab.nodes[i].pod,
            fab.nodes[i].index,
        ),
    )
    for i, sw in enumerate(order):
        r, slot = divmod(i, c.switches_in_rack)
        row, col = divmod(r, cols)
        node_place[sw] = Place(
            rack(first_half + row, col, "central-network"), 1 + slot * c.switch_units, c.switch_units
        )
    lay = Layout(fab.spec, c, racks, node_place, [], cols)
    lay.cables = [_cable(fab, lay, link) for link in fab.links]
    return lay


def _height(p: Place, c: Constraints) -> float:
    """Height of a device's ports: the middle of its units."""
    return (p.unit - 1 + p.units / 2) * c.unit_m


def route_length_m(lay: Layout, a_node: int, b_node: int) -> float:
    """Inside one rack: straight up or down. Otherwise up to the overhead tray, along it (rows are
    joined by cross trays at both row ends and in the middle), and down; plus the service slack."""
    c = lay.constraints
    pa, pb = lay.node_place[a_node], lay.node_place[b_node]
    ra, rb = lay.racks[pa.rack], lay.racks[pb.rack]
    ha, hb = _height(pa, c), _height(pb, c)
    if pa.rack == pb.rack:
        return abs(ha - hb) + c.slack_m
    up = (c.rack_height_m - ha) + (c.rack_height_m - hb) + 2 * c.tray_above_rack_m
    if ra.row == rb.row:
        along = abs(ra.x_m - rb.x_m)
    else:
        row_len = lay.row_length_m
        along = min(abs(ra.x_m - t) + abs(rb.x_m - t) for t in (0.0, row_len / 2, row_len)) + abs(ra.y_m - rb.y_m)
    return up + along + c.slack_m


def _cable(fab: Fabric, lay: Layout, link) -> Cable:
    pa, pb = fab.ports[link.a], fab.ports[link.b]
    length = round(route_length_m(lay, pa.node, pb.node), 2)
    return Cable(
        cable_id(link.id),
        link.id,
        link.kind,
        link.rate_bps / 1e9,
        pa.name,
        pb.name,
        length,
        medium_for(length, lay.constraints),
    )


def length_bin(length_m: float) -> str:
    for edge in LENGTH_BINS_M:
        if length_m <= edge:
            return f"<={edge} m"
    return f">{LENGTH_BINS_M[-1]} m"


def bom(fab: Fabric, lay: Layout, prices: Prices = Prices()) -> dict:
    """Bill of materials: racks, switches, cables by medium and length bin, transceivers, fibre
    length; and cost: the cost model's switches plus the layout's cables and optics."""
    c = lay.constraints
    by_medium = Counter(cb.medium for cb in lay.cables)
    by_medium_speed = Counter(f"{cb.medium} {cb.rate_gbps:g}G" for cb in lay.cables)
    by_bin: dict[str, Counter] = defaultdict(Counter)
    for cb in lay.cables:
        by_bin[cb.medium][length_bin(cb.length_m)] += 1
    optics = [cb for cb in lay.cables if cb.medium == "optics"]
    fibre = [cb for cb in lay.cables if cb.medium in ("AOC", "optics")]
    inv = inventory(fab)
    switch_usd = price(inv, prices)["switch_usd"]
    transceiver_usd = sum(2 * cb.rate_gbps * prices.optic_usd_per_gbps for cb in optics)
    cable_usd = (
        by_medium["DAC"] * prices.copper_cable_usd
        + by_medium["AEC"] * c.aec_cable_usd
        + by_medium["AOC"] * c.aoc_cable_usd
        + by_medium["optics"] * prices.fibre_cable_usd
    )
    total = switch_usd + transceiver_usd + cable_usd
    roles = Counter(r.role for r in lay.racks)
    return {
        "spec": fab.spec,
        "gpus": fab.n_gpus,
        "racks": {"total": len(lay.racks), **dict(sorted(roles.items()))},
        "rows": len({r.row for r in lay.racks}),
        "switches": len(fab.switches),
        "cables": len(lay.cables),
        "cables_by_medium": {m: by_medium[m] for m in MEDIA},
        "cables_by_medium_speed": dict(sorted(by_medium_speed.items())),
        "cables_by_medium_length": {
            m: dict(sorted(by_bin[m].items(), key=lambda kv: _bin_key(kv[0]))) for m in MEDIA if by_bin[m]
        },
        "transceivers": 2 * len(optics),
        "cable_length_m": round(sum(cb.length_m for cb in lay.cables), 1),
        "fibre_length_m": round(sum(cb.length_m for cb in fibre), 1),
        "longest_cable_m": max((cb.length_m for cb in lay.cables), default=0.0),
        "optical_share": len(fibre) / len(lay.cables) if lay.cables else 0.0,
        "cost": {
            "switch_usd": switch_usd,
            "transceiver_usd": transceiver_usd,
            "cable_usd": cable_usd,
            "total_usd": total,
            "total_usd_per_gpu": total / fab.n_gpus,
            "prices": {**asdict(prices), "aec_cable_usd": c.aec_cable_usd, "aoc_cable_usd": c.aoc_cable_usd},
            "note": "illustrative prices, not published figures",
        },
    }


def _bin_key(label: str) -> float:
    num = float(label.strip("<=> m"))
    return num + (0.5 if label.startswith(">") else 0.0)


PATCH_FIELDS = (
    "cable_id",
    "kind",
    "rate_gbps",
    "medium",
    "length_m",
    "a_port",
    "a_rack",
    "a_unit",
    "b_port",
    "b_rack",
    "b_unit",
)


def patch_rows(fab: Fabric, lay: Layout):
    for cb in lay.cables:
        link = fab.links[cb.link]
        pa, pb = (lay.node_place[fab.ports[p].node] for p in (link.a, link.b))
        yield (
            cb.id,
            cb.kind,
            f"{cb.rate_gbps:g}",
            cb.medium,
            f"{cb.length_m:.2f}",
            cb.a_port,
            lay.racks[pa.rack].name,
            pa.unit,
            cb.b_port,
            lay.racks[pb.rack].name,
            pb.unit,
        )


def patch_list_csv(fab: Fabric, lay: Layout) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(PATCH_FIELDS)
    w.writerows(patch_rows(fab, lay))
    return buf.getvalue()


def read_patch_list(text: str) -> dict[frozenset, dict]:
    """Patch list CSV -> {frozenset of the two port names: row}; used to name cables in checks."""
    rows = csv.DictReader(io.StringIO(text))
    if rows.fieldnames is None or tuple(rows.fieldnames) != PATCH_FIELDS:
        raise SpecError(f"not a zlab patch list: columns {rows.fieldnames}, expected {list(PATCH_FIELDS)}")
    return {frozenset((r["a_port"], r["b_port"])): r for r in rows}


def layout_json(lay: Layout) -> dict:
    return {
        "spec": lay.spec,
        "constraints": asdict(lay.constraints),
        "servers_per_rack": lay.constraints.servers_in_rack,
        "switches_per_rack": lay.constraints.switches_in_rack,
        "cols": lay.cols,
        "racks": [asdict(r) for r in lay.racks],
    }
