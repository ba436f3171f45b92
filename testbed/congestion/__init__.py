"""Congestion machinery shared by the packet engine and the emulation: parameters in real units, RED/ECN marking, the PFC buffer model, deadlock checks."""
