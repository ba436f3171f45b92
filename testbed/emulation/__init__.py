"""Live emulation of a fabric model: Mininet + OVS + the zlab OpenFlow app (needs root)."""
