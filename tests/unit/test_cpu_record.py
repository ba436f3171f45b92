"""The collector's CPU record is stamped when its counters are read (testbed/measure/collector.py):
a stamp taken earlier (before the queue dump) made a 1,024-GPU replay report the machine at 154 %
of its cores."""

import time

from testbed.measure import collector


def test_the_stamp_is_read_with_the_counters_not_before_a_slow_step(monkeypatch):
    read_at = []

    def slow_machine_cpu():
        read_at.append(time.monotonic_ns())
        return 10.0, 1.0, 2

    monkeypatch.setattr(collector, "machine_cpu", slow_machine_cpu)
    t0 = time.monotonic_ns()
    rec = collector.cpu_record({})
    assert t0 <= rec["t_ns"] <= read_at[0]
    assert (rec["machine_busy_s"], rec["machine_steal_s"], rec["cores"]) == (10.0, 1.0, 2)
