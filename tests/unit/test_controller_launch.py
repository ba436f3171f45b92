"""The os-ken launcher starts and listens: its imports run in an order a sorter would break
(os-ken's controller module imported before its app manager is a circular import), so this
catches an import reordering that no other offline test would."""

import json
import socket
import subprocess
import sys
import time

from testbed.emulation.runfolder import flows_document
from testbed.fabric import build_fabric


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_os_ken_launcher_starts_and_listens(tmp_path):
    (tmp_path / "flows.json").write_text(json.dumps(flows_document(build_fabric("zcube:n=4"))))
    port = _free_port()
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controllers.launch",
            str(tmp_path),
            "--port",
            str(port),
            "--stats-interval",
            "60",
            "--lldp-interval",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert p.poll() is None, p.communicate()[0][-2000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the controller did not listen within 30 s"
                time.sleep(0.2)
    finally:
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    assert (tmp_path / "controller").is_dir()  # the app itself was loaded, not only the listener
