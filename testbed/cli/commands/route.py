"""`zlab route`: the model's path of one flow, hop by hop."""

from __future__ import annotations

from ...errors import UserInputError
from .. import options
from ..output import print_json


def run(args) -> int:
    from ...fabric import build_fabric
    from ...fabric.paths import route

    fab = build_fabric(args.spec)
    try:
        r = route(fab, args.src, args.dst, sport=args.sport)
    except LookupError as e:  # the tables do not deliver this port pair (ZCube: cons to cons): the user's pick
        raise UserInputError(
            f"{e}; give the destination as a GPU (e.g. {args.dst.split('-')[0]}) to let the address rule pick its port"
        ) from None
    if args.json:
        print_json({"src": r.src_port, "dst": r.dst_port, "dst_ip": r.dst_ip, "hops": [h.__dict__ for h in r.hops]})
        return 0
    path = " -> ".join(f"{h.switch}[{h.in_port}>{h.out_port}]" for h in r.hops)
    print(f"{r.src_port} -> {path} -> {r.dst_port} ({r.dst_ip}), {len(r.hops)} switches")
    return 0


def register(sub) -> None:
    r = sub.add_parser(
        "route",
        parents=[options.JSON],
        help="the model's path of one flow, hop by hop",
        formatter_class=options.RAW,
        epilog=options.EPILOG_SPECS,
    )
    r.add_argument("spec", help="fabric spec")
    r.add_argument("src", help="source GPU port: interface name (g0-p0) or IP")
    r.add_argument("dst", help="destination GPU (g5: the address rule picks its port) or GPU port")
    r.add_argument("--sport", type=int, default=49152, help="UDP source port (ECMP entropy), default 49152")
    r.set_defaults(func=run)
