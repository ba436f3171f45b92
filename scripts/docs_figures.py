"""Generated figures in README.md and docs/: no measured figure is typed by hand.

    .venv/bin/python scripts/docs_figures.py check          # exit 1 naming every stale or unknown block
    .venv/bin/python scripts/docs_figures.py write          # rewrite every block from records and run folders
    .venv/bin/python scripts/docs_figures.py list           # figures, their producers and record status
    .venv/bin/python scripts/docs_figures.py measure NAME   # run NAME's producer and store its record

A block is `<!-- figure:NAME -->` ... `<!-- /figure -->`; figures are declared in scripts/docsgen/figures.py.
Root and heavy producers run under `flock /tmp/zlab-heavy.lock` (root ones with sudo when not root).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from docsgen import blocks, records  # noqa: E402
from docsgen.figures import FIGURES, render  # noqa: E402

HEAVY_LOCK = "/tmp/zlab-heavy.lock"  # root producers share the machine with other heavy jobs


def problems(root: Path = ROOT, files: list[Path] | None = None) -> list[str]:
    """One line per block that is unknown, has no record, or differs from what write would put there."""
    out = []
    for path in files if files is not None else blocks.markdown_files(root):
        for b in blocks.blocks(path):
            where = f"{path.relative_to(root) if path.is_relative_to(root) else path}:{b.line}"
            try:
                want = render(root, b.name)
            except KeyError:
                out.append(f"{where}: unknown figure {b.name!r}")
                continue
            except FileNotFoundError as e:
                out.append(f"{where}: {e}")
                continue
            if b.body.rstrip() != want.rstrip():
                out.append(f"{where}: figure {b.name!r} is stale: run scripts/docs_figures.py write")
    return out


def write(root: Path = ROOT) -> int:
    """Rewrite every block; a block with no record yet is left as it is and named."""

    def one(name: str) -> str | None:
        if name not in FIGURES:
            print(f"unknown figure {name!r} left as it is", file=sys.stderr)
            return None
        try:
            return render(root, name)
        except FileNotFoundError as e:
            print(f"{e}; block left as it is", file=sys.stderr)
            return None

    new = {path: blocks.replace(path.read_text(), one) for path in blocks.markdown_files(root)}
    changed = [p for p, text in new.items() if text != p.read_text()]
    for path in changed:
        path.write_text(new[path])
        print(f"wrote {path.relative_to(root)}")
    return len(changed)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("check", "write", "list", "measure") or (argv[0] == "measure") != (len(argv) == 2):
        print("usage: docs_figures.py check|write|list|measure NAME", file=sys.stderr)
        return 2
    if argv[0] == "check":
        bad = problems()
        print("\n".join(bad) if bad else "every figure block is fresh")
        return 1 if bad else 0
    if argv[0] == "write":
        write()
        return 0
    if argv[0] == "list":
        for f in FIGURES.values():
            rec = records.load(ROOT, f.name) if f.run is None else None
            state = (
                f"run folder {f.run}"
                if f.run
                else "no record"
                if rec is None
                else f"transcribed from {rec['transcribed_from']}"
                if rec.get("transcribed_from")
                else f"measured {rec['date'][:10]}"
            )
            print(
                f"{f.name:<22} {state:<40} {('root: ' if f.root else 'heavy: ' if f.heavy else '') + (f.command or '-')}"
            )
        return 0
    fig = FIGURES.get(argv[1])
    if fig is None or not fig.argv:
        print(
            f"no producing command for {argv[1]!r}; measurable: {', '.join(n for n, f in FIGURES.items() if f.argv)}",
            file=sys.stderr,
        )
        return 2
    cmd = list(fig.argv)
    if fig.root and os.geteuid() != 0:
        cmd = ["sudo", *cmd]
    try:
        rec = records.measure(
            ROOT, fig.name, cmd, fig.timeout_s, lock=HEAVY_LOCK if fig.root or fig.heavy else None, exit_ok=fig.exit_ok
        )
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"{fig.name} not measured, its record is unchanged: {e}", file=sys.stderr)
        return 1
    print(f"measured {fig.name} in {rec['elapsed_s']:.0f} s; now run scripts/docs_figures.py write")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
