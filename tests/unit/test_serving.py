"""The serving model on hand-worked schedules, the fixed-rate engine, and the capacity search.

The schedules use a toy compute (prefill 1,000 ns per batch, decode 100 ns per request in the batch)
and a scripted engine whose transfer times the test chooses, so every timestamp is worked by hand.
"""

from __future__ import annotations

import pytest

from testbed.experiment import spec as especs
from testbed.serving import capacity, metrics, model, setup
from testbed.serving.compute import InstanceCompute
from testbed.serving.fixed_rate import FixedRateEngine
from testbed.serving.presets import gpu
from testbed.serving.presets import model as compute_model


class ToyCompute:
    def prefill_ns(self, prompt_tokens):
        return 1000

    def decode_step_ns(self, batch, context_tokens):
        return 100 * batch


class ScriptedEngine:
    """Each transfer takes the time the test gave its request (carried in sport)."""

    name = "scripted"

    def __init__(self, duration_ns: dict[int, int]):
        self.duration_ns, self.pending, self.clock = duration_ns, [], 0

    def start(self, t_ns, flow_id, src, dst, size_bytes, sport=None):
        assert t_ns >= self.clock
        self.pending.append((t_ns + self.duration_ns[sport], flow_id))

    def next_event_ns(self):
        return min(self.pending)[0] if self.pending else None

    def advance(self, t_ns):
        done = sorted(p for p in self.pending if p[0] <= t_ns)
        self.pending = [p for p in self.pending if p[0] > t_ns]
        self.clock = t_ns
        return [(f, t) for t, f in done]


def one_flow(p, d, req, kv_bytes):
    return [(f"p{p}", f"d{d}", kv_bytes, req)]


def dep(**kw):
    base = dict(
        prefill_instances=1,
        decode_instances=1,
        prefill_kv_tokens=1000,
        decode_kv_tokens=1000,
        max_decode_batch=8,
        max_prefill_tokens=1000,
        kv_bytes_per_token=1,
    )
    return model.Deployment(**{**base, **kw})


def run(reqs, durations, **kw):
    res = model.simulate(reqs, dep(**kw), ToyCompute(), ToyCompute(), ScriptedEngine(durations), one_flow)
    return {r.req.id: r for r in res.records}, res


def test_kv_wait_one_request():
    recs, res = run([model.Request(0, 0, 10, 3)], {0: 500})
    r = recs[0]
    assert (r.t_prefill_end_ns, r.t_kv_start_ns, r.t_kv_done_ns, r.t_decode_join_ns) == (1000, 1000, 1500, 1500)
    assert (r.t_first_token_ns, r.t_done_ns) == (1600, 1800)
    m = metrics.summarise(res, 2, {"ttft": 1600e-9, "tpot": 100e-9})
    assert m["ttft_s"]["p50"] == pytest.approx(1600e-9)
    assert m["kv_wait_s"]["measured_transfer_mean"] == pytest.approx(500e-9)
    assert m["kv_wait_s"]["modelled_decode_memory_mean"] == 0
    assert m["meets_slo"]
    assert not metrics.summarise(res, 2, {"ttft": 1599e-9, "tpot": 1})["meets_slo"]


def test_served_counts_completions_inside_the_arrival_window():
    # arrivals at 0 and 5,000 ns: the first is done at 1,800, the second at 6,800, after the window
    _, res = run([model.Request(0, 0, 10, 3), model.Request(1, 5000, 10, 3)], {0: 500, 1: 500})
    m = metrics.summarise(res, 2, {"ttft": 1, "tpot": 1})
    assert m["served_in_window_per_s_per_gpu"] == pytest.approx(1 / 5000e-9 / 2)
    assert m["requests_per_s_per_gpu"] == pytest.approx(2 / 6800e-9 / 2)  # over the span, drain included


def test_prefill_batches_what_is_queued():
    # the first arrival starts a batch alone; the two queued behind it share the next batch
    reqs = [model.Request(0, 0, 10, 1), model.Request(1, 10, 10, 1), model.Request(2, 20, 10, 1)]
    recs, _ = run(reqs, {0: 1, 1: 1, 2: 1})
    assert [recs[k].t_prefill_start_ns for k in range(3)] == [0, 1000, 1000]
    limited, _ = run(reqs, {0: 1, 1: 1, 2: 1}, max_prefill_tokens=10)
    assert [limited[k].t_prefill_start_ns for k in range(3)] == [0, 1000, 2000]
    together, _ = run([model.Request(0, 0, 10, 1), model.Request(1, 0, 10, 1)], {0: 1, 1: 1})
    assert together[1].t_prefill_start_ns == 0  # same-instant arrivals share one batch


def test_slow_transfer_holds_the_prefill_instance():
    # prefill memory holds one 10-token prompt: the second prefill waits for the first KV to leave
    reqs = [model.Request(0, 0, 10, 1), model.Request(1, 0, 10, 1)]
    slow, _ = run(reqs, {0: 5000, 1: 500}, prefill_kv_tokens=10)
    assert slow[1].t_prefill_start_ns == 6000  # 1,000 prefill + 5,000 transfer
    assert slow[1].t_first_token_ns == 6000 + 1000 + 500 + 100
    fast, _ = run(reqs, {0: 500, 1: 500}, prefill_kv_tokens=10)
    assert fast[1].t_prefill_start_ns == 1500


def test_decode_memory_backpressure_delays_the_transfer():
    # prefilled side by side on two P instances until 1,000; the decode instance holds 15 tokens, each
    # request needs 13 (prompt + output)
    reqs = [model.Request(0, 0, 10, 3), model.Request(1, 0, 10, 3)]
    recs, res = run(reqs, {0: 500, 1: 500}, decode_kv_tokens=15, prefill_instances=2)
    assert recs[0].t_done_ns == 1800  # joins 1,500, three steps of 100
    assert recs[1].t_kv_start_ns == 1800  # memory freed only then
    assert recs[1].t_done_ns == 1800 + 500 + 300
    assert max(used for *_, used in res.occupancy.samples) <= 15
    m = metrics.summarise(res, 2, {"ttft": 1, "tpot": 1})
    assert m["kv_wait_s"]["modelled_decode_memory_mean"] == pytest.approx(400e-9)  # (0 + 800) / 2 ns


def test_batch_slots_limit_the_decode_batch():
    reqs = [model.Request(0, 0, 10, 3), model.Request(1, 0, 10, 3)]
    one, _ = run(reqs, {0: 500, 1: 500}, max_decode_batch=1, prefill_instances=2)
    assert one[1].t_kv_done_ns == 1500 and one[1].t_decode_join_ns == 1800
    two, _ = run(reqs, {0: 500, 1: 500}, max_decode_batch=2, prefill_instances=2)
    assert two[1].t_decode_join_ns == 1500
    assert two[1].t_done_ns == 1500 + 3 * 200  # a step of two requests takes 200 ns


def test_request_that_cannot_fit_is_refused():
    with pytest.raises(ValueError, match="decode instance's KV memory"):
        run([model.Request(0, 0, 10, 3)], {0: 1}, decode_kv_tokens=12)


def test_fixed_rate_engine():
    e = FixedRateEngine({"a": 100e9, "b": 200e9})
    e.start(0, 1, "a", "b", 10**9)  # the slower port: 8e9 bits / 100e9 b/s = 80 ms
    e.start(0, 2, "b", "b", 10**9)
    assert e.next_event_ns() == 40_000_000
    assert e.advance(50_000_000) == [(2, 40_000_000)]
    assert e.advance(80_000_000) == [(1, 80_000_000)]
    assert e.next_event_ns() is None
    with pytest.raises(ValueError, match="before the engine's clock"):
        e.start(1, 3, "a", "b", 1)


def test_bisection_on_a_monotone_toy():
    s = capacity.bisect(lambda r: r <= 3.7, 1.0, 10.0, 20)
    assert s.bound == "found" and 3.7 - 1e-4 < s.capacity <= 3.7
    assert capacity.bisect(lambda r: False, 1.0, 10.0, 5).bound == "below-range"
    top = capacity.bisect(lambda r: True, 1.0, 10.0, 5)
    assert (top.bound, top.capacity, len(top.points)) == ("at-least-max", 10.0, 2)
    with pytest.raises(ValueError, match="load range"):
        capacity.bisect(lambda r: True, 2.0, 2.0, 5)


def test_model_that_does_not_fit_in_hbm():
    with pytest.raises(ValueError, match="does not fit"):
        InstanceCompute(compute_model("llama3-70b"), gpu("h100"), 1).kv_capacity_tokens()
    assert InstanceCompute(compute_model("llama3-70b"), gpu("h100"), 4).kv_capacity_tokens() > 100_000


def _capacity(sc, rate_factor: float, seed: int) -> float:
    rates = {k: v * rate_factor for k, v in sc.port_rates_bps().items()}
    slo = {"ttft": 2.0, "tpot": 0.2}

    def passes(rate: float) -> bool:
        reqs = sc.requests(rate, 40, 0, seed)
        res = model.simulate(
            reqs, sc.deployment, sc.compute, sc.compute, FixedRateEngine(rates), sc.flow_planner(seed), sc.scheduler
        )
        return metrics.summarise(res, sc.n_gpus, slo)["meets_slo"]

    return capacity.bisect(passes, 0.02, 4.0, 6).capacity


def test_faster_network_never_lowers_capacity():
    """Seeded loop over arrival draws: capacity is non-decreasing in the NIC rate (to the search's
    resolution), and at 1 % of the line rate the network does limit it."""
    sc = setup.scenario(especs.load(None, []), "roft", "h100")
    step = (4.0 - 0.02) / 2**6
    strict = 0
    for seed in range(3):
        caps = [_capacity(sc, f, seed) for f in (0.01, 0.05, 1.0)]
        assert caps[0] <= caps[1] + step and caps[1] <= caps[2] + step, caps
        strict += caps[0] < caps[2]
    assert strict == 3


def test_capacity_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    from testbed.cli import main

    res = ["--results", str(tmp_path / "results")]
    cases = [
        (["--slo", "latency=1"], "unknown metric 'latency'; metrics: ttft, tpot"),
        (["--slo", "ttft=-1"], "SECONDS > 0"),
        (["--set", "deployment.tp=1"], "does not fit in 1 x h100"),
        (["--set", "workload.model=deepseek-v3"], "no serving compute preset"),
        (["--rate-min", "2", "--rate-max", "2"], "empty load range"),
    ]
    for argv, text in cases:
        assert main(["capacity", *argv, *res]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("zlab: error: ") and text in err[0], (argv, err)
    assert not (tmp_path / "results").exists()


def test_capacity_refuses_a_bad_jobs_or_retakes_count_in_one_line(monkeypatch, tmp_path, capsys):
    """--jobs must be a whole number >= 1 (--retakes >= 0), and the live emulation (one fabric, the CPU to itself) runs
    with one job: refused before anything is brought up or written, also without root."""
    from testbed.cli import main

    monkeypatch.setattr("os.geteuid", lambda: 1000)
    res = ["--results", str(tmp_path / "results")]
    cases = [
        (["--jobs", "0"], "--jobs '0': give a whole number of worker processes >= 1"),
        (["--jobs", "x"], "--jobs 'x': give a whole number"),
        (["--jobs", "1.5"], "--jobs '1.5': give a whole number"),
        (["--jobs", "2", "--network", "emulation"], "shares one live fabric"),
        (["--retakes", "-1"], "--retakes '-1': give a whole number of retakes >= 0"),
        (["--retakes", "x"], "--retakes 'x': give a whole number"),
    ]
    for argv, text in cases:
        assert main(["capacity", *argv, *res]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("zlab: error: ") and text in err[0], (argv, err)
    assert not (tmp_path / "results").exists()


def test_a_search_in_two_worker_processes_writes_the_same_document():
    """jobs=2 runs the bisections in worker processes; the document (every run, its points in order,
    the summaries) equals the one-process search's, its runs in the same (fabric, repeat) order. The
    repeats' points differ (their seeds draw other arrivals), so runs assembled out of order would fail."""
    import dataclasses
    import json

    sp = especs.load(None, [])
    scenarios = {label: setup.scenario(sp, label, "h100") for label in sp["fabrics"]}
    w = sp["workload"]
    opts = capacity.Options(
        ("fixed-rate",), "h100", {"ttft": 2.0, "tpot": 0.2}, 0.02, 4.0, 2, 2, 30, w["start_index"], sp["seed"], 2.0
    )
    lines: dict[int, list[str]] = {1: [], 2: []}
    docs = {
        jobs: capacity.search(scenarios, dataclasses.replace(opts, jobs=jobs), lines[jobs].append) for jobs in (1, 2)
    }
    one, two = docs[1], docs[2]
    assert [(r["fabric"], r["repeat"]) for r in two["runs"]] == [("zcube", 0), ("zcube", 1), ("roft", 0), ("roft", 1)]
    assert one["runs"][0]["points"] != one["runs"][1]["points"]
    assert json.dumps(two, sort_keys=True) == json.dumps(one, sort_keys=True)
    assert not any("done:" in line for line in lines[1])  # one job: today's lines, unchanged
    assert sorted(line for line in lines[2] if "done:" not in line) == sorted(lines[1])  # every point, from workers
    assert sum("done: capacity" in line for line in lines[2]) == 4  # one per finished bisection
    with pytest.raises(ValueError, match="live engine"):
        capacity.search(scenarios, dataclasses.replace(opts, engines=("emulation",), jobs=2))


def test_network_engines_by_name():
    from testbed.flowsim.engine import FlowEngine
    from testbed.serving import engines

    sc = setup.scenario(especs.load(None, []), "zcube", "h100")
    assert isinstance(engines.make_engine("flow", sc), FlowEngine)
    assert isinstance(engines.make_engine("fixed-rate", sc), FixedRateEngine)
    with pytest.raises(ValueError, match="unknown network engine"):
        engines.make_engine("ns4", sc)


@pytest.mark.slow  # 1.5 s idle, up to 3.8 s on a loaded machine (matplotlib's import and two figures)
def test_capacity_command_writes_a_self_describing_folder(tmp_path, capsys):
    import json

    from testbed.cli import main

    argv = ["capacity", "--repeats", "2", "--requests", "30", "--iterations", "3", "--json", "--no-progress"]
    argv += ["--jobs", "2"]  # the command's parallel path; its document is the one-job one (test above)
    assert main([*argv, "--results", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    folder = tmp_path / out["folder"].split("/")[-1]
    doc = json.loads((folder / "capacity.json").read_text())
    assert doc["schema"] == "zlab.capacity/1" and doc["settings"]["slo_s"] == {"ttft": 2.0, "tpot": 0.2}
    assert doc["settings"]["jobs"] == 2
    assert {(r["fabric"], r["repeat"]) for r in doc["runs"]} == {(f, k) for f in ("zcube", "roft") for k in (0, 1)}
    for r in doc["runs"]:
        assert len(r["points"]) >= 2 and r["bound"] in ("found", "below-range", "at-least-max")
        passing = [p["rate_per_gpu"] for p in r["points"] if p["meets_slo"]]
        assert r["capacity_per_gpu_rps"] == (max(passing) if passing else 0.0)
    (s,) = doc["summaries"]
    assert s["engine"] == "fixed-rate" and s["ratio"]["of"] == "zcube/roft" and s["ratio"]["n"] == 2
    assert (folder / "throughput_vs_load.png").stat().st_size > 1000
    assert (folder / "ttft_p99_vs_load.png").stat().st_size > 1000


class OpaqueEngine:
    """An engine that, like the packet engine or the emulation, cannot tell its next completion:
    it offers only a far horizon and stops at the first completion when run (run_until)."""

    HORIZON_NS = 10**12

    def __init__(self, inner):
        self.inner, self.name, self.clock = inner, inner.name, 0

    def start(self, t_ns, flow_id, src, dst, size_bytes, sport=None):
        self.inner.start(t_ns, flow_id, src, dst, size_bytes, sport)

    def next_event_ns(self):
        return None if self.inner.next_event_ns() is None else self.clock + self.HORIZON_NS

    def run_until(self, t_ns):
        nxt = self.inner.next_event_ns()
        self.clock = t_ns if nxt is None else min(t_ns, nxt)
        return self.clock

    def advance(self, t_ns):
        self.clock = t_ns
        return self.inner.advance(t_ns)


def test_an_engine_that_cannot_see_ahead_gives_the_same_schedule():
    """The closed loop reacts at each completion's own instant with an opaque engine too: every
    request's timestamps equal those with the flow engine it wraps, on a contended ROFT."""
    from testbed.flowsim.engine import FlowEngine

    sc = setup.scenario(especs.load(None, []), "roft", "h100")
    reqs = sc.requests(3.0, 40, 0, 0)

    def stamps(engine):
        res = model.simulate(reqs, sc.deployment, sc.compute, sc.compute, engine, sc.flow_planner(0), sc.scheduler)
        return [(r.req.id, r.t_kv_done_ns, r.t_first_token_ns, r.t_done_ns) for r in res.records]

    clear = stamps(FlowEngine(sc.fabric))
    assert clear == stamps(OpaqueEngine(FlowEngine(sc.fabric)))

    class Late(OpaqueEngine):  # learns of completions only at the next modelled event
        def run_until(self, t_ns):
            self.clock = t_ns
            return t_ns

    assert clear != stamps(Late(FlowEngine(sc.fabric)))  # the comparison above can fail


def test_a_window_of_slos_fails_a_load_a_short_burst_passes():
    """Measured: 150 requests on 32 GPUs (glm-4.5, tp=8) pass 3 req/s/GPU because the queue has no
    time to build; arrivals spanning 20 TTFT SLOs fail it (the sustained capacity is about 1.6)."""
    sp = especs.load(
        None,
        [
            "deployment.tp=8",
            "workload.model=glm-4.5",
            "fabrics.zcube=zcube:n=8,gpus=32,gpus_per_server=8,links_per_pair=2,gpu_gbps=100",
            "fabrics.roft=roft:gpus=32,gpus_per_server=8,gpu_gbps=100",
        ],
    )
    sc = setup.scenario(sp, "roft", "h100")
    slo = {"ttft": 2.0, "tpot": 0.2}
    opts = capacity.Options(("fixed-rate",), "h100", slo, 0.02, 4.0, 7, 1, 150, 0, 1)
    assert capacity.requests_for(opts, 3.0, sc.n_gpus) == 20 * 2 * 3 * 32
    assert capacity.requests_for(opts, 0.01, sc.n_gpus) == 150  # never fewer than asked
    assert abs(capacity.overload_resolution(opts) - 1 / 18) < 1e-12

    def meets(n: int) -> bool:
        reqs = sc.requests(3.0, n, 0, 1)
        engine = FixedRateEngine(sc.port_rates_bps())
        res = model.simulate(reqs, sc.deployment, sc.compute, sc.compute, engine, sc.flow_planner(1), sc.scheduler)
        return metrics.summarise(res, sc.n_gpus, slo)["meets_slo"]

    assert meets(150) and not meets(capacity.requests_for(opts, 3.0, sc.n_gpus))


class FlakyLiveEngine(FixedRateEngine):
    """A fixed-rate engine that reports a live engine's fidelity: the first `void_first` simulations
    (counted over the whole search) fell behind the wall clock, the rest did not."""

    calls = 0
    void_first = 0

    def fidelity(self) -> dict:
        FlakyLiveEngine.calls += 1
        void = FlakyLiveEngine.calls <= FlakyLiveEngine.void_first
        return {"worst_lag_wall_ms": 22.0 if void else 1.0, "max_lag_wall_ms": 10.0, "void": void, "transfers": 1}


def _flaky(name, sc):
    return FlakyLiveEngine(sc.port_rates_bps())


def _retake_search(retakes: int, void_first: int) -> dict:
    import dataclasses

    sp = especs.load(None, [])
    scenarios = {label: setup.scenario(sp, label, "h100") for label in sp["fabrics"]}
    w = sp["workload"]
    opts = capacity.Options(
        ("fixed-rate",), "h100", {"ttft": 2.0, "tpot": 0.2}, 0.02, 4.0, 2, 1, 30, w["start_index"], sp["seed"], 2.0
    )
    FlakyLiveEngine.calls, FlakyLiveEngine.void_first = 0, void_first
    return capacity.search(scenarios, dataclasses.replace(opts, retakes=retakes), None, _flaky)


def test_a_void_point_is_retaken_with_the_same_seed_and_says_so():
    """The first two simulations are void: with two retakes the first point is simulated three times,
    keeps the valid third's verdict and metrics (the same seed: the same as a search with no void at
    all), and records both void attempts; the search is valid."""
    clean, retaken = _retake_search(2, 0), _retake_search(2, 2)
    first = retaken["runs"][0]["points"][0]
    assert [f["worst_lag_wall_ms"] for f in first["fidelity"]["retaken"]] == [22.0, 22.0]
    assert not first["fidelity"]["void"]
    assert retaken["runs"][0]["retaken_points"] == 1 and retaken["runs"][0]["void_points"] == 0
    strip = [{k: v for k, v in p.items() if k != "fidelity"} for r in retaken["runs"] for p in r["points"]]
    assert strip == [{k: v for k, v in p.items() if k != "fidelity"} for r in clean["runs"] for p in r["points"]]
    assert all(s["valid"] and s["void_points"] == 0 for s in retaken["summaries"])


def test_a_point_still_void_after_the_retakes_fails_the_search_closed():
    doc = _retake_search(1, 2)  # two void simulations, one retake: the first point stays void
    run = doc["runs"][0]
    assert run["void_points"] == 1 and run["points"][0]["fidelity"]["void"]
    assert len(run["points"][0]["fidelity"]["retaken"]) == 1
    assert doc["summaries"][0]["void_points"] == 1 and not doc["summaries"][0]["valid"]


def test_capacity_with_a_void_point_writes_its_folder_and_exits_3(monkeypatch, tmp_path, capsys):
    """Fail closed at the command: the document is written (nothing lost), the run says INVALID in one
    line on stderr and exits 3, as `zlab run` does for an invalid fabric."""
    from testbed.cli import main

    FlakyLiveEngine.calls, FlakyLiveEngine.void_first = 0, 10**6  # every simulation void
    monkeypatch.setattr("testbed.serving.engines.make_engine", _flaky)
    args = ["capacity", "--results", str(tmp_path), "--repeats", "1", "--iterations", "1", "--no-progress"]
    rc = main([*args, "--requests", "20", "--window-slos", "1", "--retakes", "0"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("INVALID")]
    assert rc == 3 and len(err) == 1 and "void after 0 retake" in err[0]
    (folder,) = tmp_path.iterdir()
    assert (folder / "capacity.json").exists()
