"""`zlab destroy`: stop live runs the way their owner stops them (as on Ctrl-C)."""

from __future__ import annotations

from ...errors import UserInputError


def run(args) -> int:
    import os

    from ...lab.live import destroy, select

    if bool(args.run) == bool(args.all_mine):
        raise UserInputError("give a run id (zlab inspect lists them) or --all-mine, not both")
    user = os.environ.get("SUDO_USER") or os.environ.get("USER") or str(os.getuid())
    runs = select(args.run, args.all_mine, user)
    if not runs:
        if args.all_mine:
            print(f"zlab destroy: no live runs of {user}")
            return 0
        raise UserInputError(
            f"no live run {args.run!r} (zlab inspect lists them; a run whose owner died is zlab clean's)"
        )
    for r in runs:
        for line in destroy(r, args.timeout):
            print(f"[zlab] {line}")
    return 0


def register(sub) -> None:
    de = sub.add_parser(
        "destroy",
        help="tear down live runs cleanly (their owner stops them, as on Ctrl-C); "
        "'zlab clean' stays for runs whose owner died",
    )
    de.add_argument("run", nargs="?", help="run id or run folder (as zlab inspect shows)")
    de.add_argument("--all-mine", action="store_true", help="every live run you started")
    de.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a run to stop (default 60)")
    de.set_defaults(func=run)
