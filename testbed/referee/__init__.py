"""An independent referee for emulated runs: the same fabric, flow entries, QPs and message
schedule replayed in ns-3 (a packet-level simulator sharing none of OVS, htb or the Python
agent), at the emulation's scaling or at real rates and sizes, and compared figure by figure."""
