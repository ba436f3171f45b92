"""TX checksum offload off by one ioctl per device (testbed/emulation/offload.py) does what
`ethtool -K DEV tx off` did, read back by ethtool itself; a device that is not there is named."""

import uuid

import pytest

from testbed.emulation import offload

from .conftest import sh


def test_the_ioctl_leaves_a_device_exactly_as_ethtool_tx_off_does():
    a, b = f"zo{uuid.uuid4().hex[:6]}", f"zo{uuid.uuid4().hex[:6]}"
    sh(f"ip link add {a} type veth peer name {a}p")
    sh(f"ip link add {b} type veth peer name {b}p")
    try:
        assert offload.tx_checksum(a)  # a veth offloads by default
        assert "tx-checksumming: on" in sh(f"ethtool -k {a}").stdout
        offload.tx_checksum_off([a, f"{a}p"])
        sh(f"ethtool -K {b} tx off")
        assert not offload.tx_checksum(a) and not offload.tx_checksum(f"{a}p")
        # every feature flag, as ethtool reads them, is what ethtool's own `tx off` leaves
        features = [sh(f"ethtool -k {d}").stdout.split("\n", 1)[1] for d in (a, b)]
        assert "tx-checksumming: off" in features[0] and features[0] == features[1]
    finally:
        sh(f"ip link del {a}", check=False)
        sh(f"ip link del {b}", check=False)


def test_a_missing_device_is_named():
    with pytest.raises(OSError, match="on zo-missing0: No such device"):
        offload.tx_checksum_off(["zo-missing0"])
