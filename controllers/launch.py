"""Launcher for the zlab app on os-ken 4.x (which dropped osken-manager).

    zlab controller RUN_DIR [--port 6653]     (or: python -m controllers.launch RUN_DIR)
Under Ryu the same app loads with: ZLAB_RUN_DIR=RUN_DIR ryu-manager controllers/zlab_routes.py
"""

from __future__ import annotations

import argparse
import os
import sys


def prepare(prog: str, doc: str, argv=None):
    """Parse the launcher's arguments and set the environment the app reads (shared by both
    frameworks' launchers); exits 2 when the run folder has no flows.json."""
    ap = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", help="run folder with fabric.json and flows.json")
    ap.add_argument("--port", type=int, default=6653, help="OpenFlow TCP port on 127.0.0.1 (default 6653)")
    ap.add_argument("--stats-interval", type=float, default=1.0, help="counter polling period, s (default 1.0)")
    ap.add_argument("--lldp-interval", type=float, default=1.0, help="LLDP discovery period, s (default 1.0; 0: none)")
    args = ap.parse_args(argv)
    flows = os.path.join(args.run_dir, "flows.json")
    if not os.path.exists(flows):
        print(
            f"{prog}: error: {flows} not found (write it with zlab up, or testbed.emulation.runfolder)", file=sys.stderr
        )
        sys.exit(2)
    os.environ["ZLAB_RUN_DIR"] = os.path.abspath(args.run_dir)
    os.environ["ZLAB_STATS_INTERVAL_S"] = str(args.stats_interval)
    os.environ["ZLAB_LLDP_INTERVAL_S"] = str(args.lldp_interval)
    return args


def main(argv=None) -> int:
    args = prepare("zlab controller", __doc__, argv)
    # The order is load-bearing (keep isort off): eventlet patches before os-ken's modules load, and
    # os-ken's cfg and app manager are imported before its controller module (sorted, the controller
    # module came first and the launch failed on a circular import).
    # isort: off
    from os_ken.lib import hub

    hub.patch(thread=False)
    from os_ken import cfg, log
    from os_ken.base.app_manager import AppManager
    import os_ken.controller.controller  # noqa: F401  registers the ofp-* options

    # isort: on

    cfg.CONF(args=[f"--ofp-tcp-listen-port={args.port}", "--ofp-listen-host=127.0.0.1"], project="os_ken")
    log.init_log()
    AppManager.run_apps(["os_ken.controller.ofp_handler", "controllers.zlab_routes"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
