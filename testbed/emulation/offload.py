"""Turn off TX checksum offload on many root-namespace interfaces with one ioctl each, not one
`ethtool -K DEV tx off` process each.

Why: userspace OVS forwards veth frames whose checksum the kernel left to an offload nobody
performs (TCP through it hangs), so every switch port needs it off. At 1,024 GPUs that was 4,096
ethtool processes in sequence (2 ms each, measured); ETHTOOL_STXCSUM through SIOCETHTOOL is the
same request without the process (4 us). The kernel maps it onto the feature flags exactly as
ethtool's `tx` does, dropping the segmentation offloads that depend on it."""

from __future__ import annotations

import array
import fcntl
import socket
import struct

SIOCETHTOOL = 0x8946
ETHTOOL_GTXCSUM = 0x16
ETHTOOL_STXCSUM = 0x17


def _ethtool_value(sock: socket.socket, dev: str, cmd: int, data: int = 0) -> int:
    ev = array.array("B", struct.pack("II", cmd, data))  # struct ethtool_value {u32 cmd; u32 data;}
    ifr = struct.pack("16sP", dev.encode(), ev.buffer_info()[0])  # struct ifreq {name; ifr_data}
    fcntl.ioctl(sock, SIOCETHTOOL, ifr)
    return struct.unpack("II", ev.tobytes())[1]


def tx_checksum(dev: str) -> bool:
    """Whether `dev` offloads TX checksums (ETHTOOL_GTXCSUM)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return bool(_ethtool_value(s, dev, ETHTOOL_GTXCSUM))


def tx_checksum_off(devs) -> None:
    """ETHTOOL_STXCSUM 0 on each device; raises OSError naming the first device that refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for dev in devs:
            try:
                _ethtool_value(s, dev, ETHTOOL_STXCSUM, 0)
            except OSError as exc:
                raise OSError(exc.errno, f"turning TX checksum offload off on {dev}: {exc.strerror}") from None
