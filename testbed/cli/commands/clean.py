"""`zlab clean`: remove what killed zlab runs left behind (only what zlab recorded)."""

from __future__ import annotations


def run(args) -> int:
    from ...lab.clean import main as clean_main

    return clean_main(dry_run=args.dry_run)


def register(sub) -> None:
    c = sub.add_parser("clean", help="remove what killed zlab runs left behind (only what zlab recorded)")
    c.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    c.set_defaults(func=run)
