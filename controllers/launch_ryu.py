"""Launcher for the same zlab app under real Ryu (4.34), in its own environment (.venv-ryu).

    .venv-ryu/bin/python -m controllers.launch_ryu RUN_DIR [--port 6653] [--stats-interval S] [--lldp-interval S]
    (zlab up --controller ryu, or the experiment field `controller: ryu`, start it for you)

Why a shim: Ryu 4.34 is the last release and imports `eventlet.wsgi.ALREADY_HANDLED`, which eventlet
removed after 0.30; eventlet 0.30 itself fails on Python 3.11. With eventlet 0.33.3 (the newest that
still runs Ryu's hub) the one missing name is defined before Ryu is imported; dnspython >= 2.2 avoids
Ryu's old pin on a dnspython that uses `collections.MutableMapping`. Nothing else is patched.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv=None) -> int:
    from controllers.launch import prepare

    args = prepare("launch_ryu", __doc__, argv)
    import eventlet.wsgi

    eventlet.wsgi.ALREADY_HANDLED = object()  # the shim (see the module docstring)
    from ryu.cmd.manager import main as ryu_manager

    # by module name, so the app's package-relative imports resolve (the repo root is on sys.path)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.argv = [
        "ryu-manager",
        f"--ofp-tcp-listen-port={args.port}",
        "--ofp-listen-host=127.0.0.1",
        "controllers.zlab_routes",
    ]
    ryu_manager()
    return 0


if __name__ == "__main__":
    sys.exit(main())
