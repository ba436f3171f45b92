"""Bad input, table-driven, as a user types it: every case exits 2 with one line on stderr that
names the field (and the limit or the allowed values), and nothing is brought up or written."""

import gzip
import json

import pytest

from testbed.cli import main

MOONCAKE_OK = {"timestamp": 1000, "input_length": 10, "output_length": 1}


def _jsonl(tmp_path, name, records):
    p = tmp_path / name
    p.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return str(p)


def _cases(tmp_path):
    """(argv, text the one error line must contain)."""
    gz = tmp_path / "trace.jsonl"
    gz.write_bytes(gzip.compress((json.dumps(MOONCAKE_OK) + "\n").encode()))
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    as_json = tmp_path / "trace.json"
    as_json.write_text("[]")
    misspelt = tmp_path / "misspelt.yaml"
    misspelt.write_text("workload:\n  reqests: 20\n")
    second_bad = tmp_path / "second.yaml"
    second_bad.write_text("fabrics:\n  zcube: zcube:n=4,gpus_per_server=4\n  roft: roft:gpus=16,gpus_per_server=5\n")
    run = ["run", "--dry-run", "--set"]
    nan_line = '{"timestamp": NaN, "input_length": 1, "output_length": 1}'
    return [
        (["fabric", "show", "zcube:n=4,gpu_gbps=inf"], "gpu_gbps='inf' must be a finite number"),
        (
            ["route", "zcube:n=4", "g0-p0", "g5-p0"],
            "no route from g0-p0 to g5-p0: no table entry; give the destination",
        ),
        (["layout", "zcube:n=4", "--set", "racks=3"], "unknown constraint 'racks'; known: rack_units"),
        (["layout", "zcube:n=4", "--set", "server_power_kw=80"], "not one server fits a rack"),
        (["multiplane", "zcube-planes:planes=3,n=4,gpus_per_server=4"], "to divide gpus_per_server"),
        (["multiplane", "zcube-planes:planes=2,n=4", "--seeds", "0"], "--seeds must be >= 1"),
        (["load", "zcube:n=4", "--pattern", "random", "--fail", "switch:zz9"], "no switch 'zz9'"),
        (["load", "zcube:n=4", "--pattern", "random", "--repair", "host"], "--repair needs --fail"),
        (
            ["load", "zcube:n=4", "--pattern", "random", "--fail", "switch:zb1", "--repair", "ecmp"],
            "valid: none, host, detour, both",
        ),
        (["resilience", "zcube:n=4", "--repair", "magic"], "valid: none, host, detour, both"),
        (["resilience", "zcube:n=4", "--sample", "0"], "--sample must be >= 1"),
        (["fabric", "show", "zcube:n=4,gpu_gbps=nan"], "gpu_gbps='nan' must be a finite number"),
        (["fabric", "show", "zcube:n=256"], "65536 GPUs exceed the address plan's 65534 GPUs (square ZCube: n <= 255)"),
        (["fabric", "show", "roft:gpus=70000,gpus_per_server=8"], "exceeds the address plan's 65534 GPUs"),
        (["fabric", "show", "zcube:n=4,gpu_gbps=-400"], "gpu_gbps must be positive"),
        (["fabric", "show", "zcube:n=4,nn=2"], "unknown parameter 'nn'; valid parameters: n, gpus"),
        (["fabric", "show", "fattree:k=4"], "unknown fabric kind 'fattree'; valid kinds: roft, zcube"),
        (["route", "zcube:n=4", "g0-p9", "g5"], "'g0-p9' is not a GPU port name or address"),
        (["load", "zcube:n=4", "--pattern", "bogus"], "unknown pattern 'bogus'; valid patterns: rail-aligned"),
        (
            ["load", "zcube:n=4", "--pattern", "random", "--split", "diagonal"],
            "unknown split policy 'diagonal'; valid: half",
        ),
        (["load", "zcube:n=4", "--file", str(tmp_path / "nope.csv")], "nope.csv: cannot read: No such file"),
        (
            run
            + [
                f"workload.trace={_jsonl(tmp_path, 'unsorted.jsonl', [dict(MOONCAKE_OK, timestamp=2000), MOONCAKE_OK])}"
            ],
            "unsorted.jsonl:2: timestamps go backwards",
        ),
        (
            run + [f"workload.trace={_jsonl(tmp_path, 'nan.jsonl', [nan_line])}"],
            "nan.jsonl:1: timestamp must be a finite number",
        ),
        (
            run + [f"workload.trace={_jsonl(tmp_path, 'frac.jsonl', [dict(MOONCAKE_OK, input_length=600.9)])}"],
            "frac.jsonl:1: input_length must be a whole number, got 600.9",
        ),
        (
            run + [f"workload.trace={_jsonl(tmp_path, 'bool.jsonl', [dict(MOONCAKE_OK, output_length=True)])}"],
            "bool.jsonl:1: output_length must be a whole number, got True",
        ),
        (run + [f"workload.trace={gz}"], "trace.jsonl: gzip-compressed; decompress it first"),
        (run + [f"workload.trace={binary}"], "bin.csv:1: not UTF-8 text"),
        (run + [f"workload.trace={as_json}"], "unsupported trace format '.json'"),
        (run + [f"workload.trace={tmp_path / 'missing.csv'}"], "spec error at workload.trace: trace"),
        (run + ["emulation.rate_scale=-2.5e-5"], "spec error at emulation.rate_scale: -2.5e-05 is less than or equal"),
        (run + ["emulation.rate_scale=1e-2"], "cannot honour more than 1000 Mb/s"),
        (run + ["workload.size_scale=-1"], "spec error at workload.size_scale"),
        (run + ["deployment.mapping=rank-shift"], "spec error at deployment.mapping: 'rank-shift' is not one of"),
        (
            run + ["deployment.path_mtu=4096", "--set", "emulation.mtu_bytes=1500"],
            "deployment.path_mtu: 4096 needs a link MTU",
        ),
        (run + ["deployment.tp=32"], "need 128 GPUs; the fabric has 16"),
        (run + ["controller=floodlight"], "spec error at controller: 'floodlight' is not one of ['os-ken', 'ryu']"),
        (
            run + ['failures.events={zcub: [{at_emulated_s: 1, action: down, target: "switch:za0"}]}'],
            "spec error at failures.events: zcub is not a fabric of this spec",
        ),
        (
            run
            + ['failures.events={zcube: [{at_emulated_s: 1, action: gray, loss_percent: 5, target: "cable:g0-p0"}]}'],
            "gray failures are injected on switch-to-switch cables",
        ),
        (run + ['failures.events={roft: [{at_emulated_s: 1, action: down, target: "switch:za0"}]}'], "no switch 'za0'"),
        (
            run + ['failures.events={zcube: [{at_emulated_s: 1, action: explode, target: "switch:za0"}]}'],
            "spec error at failures.events.zcube.0.action: 'explode' is not one of",
        ),
        (
            run
            + [
                "failures.recovery={roft: host}",
                "--set",
                'failures.events={roft: [{at_emulated_s: 1, action: down, target: "switch:sp0"}]}',
            ],
            "have one port",
        ),
        (
            run + ["fabrics.roft=roft:gpus=16,gpus_per_server=5"],
            "spec error at fabrics.roft: roft: gpus=16 must be a multiple",
        ),
        (
            ["run", "--dry-run", str(misspelt)],
            "spec error at workload: Additional properties are not allowed ('reqests'",
        ),
        (["run", "--dry-run", str(second_bad)], "spec error at fabrics.roft"),
        (["run", "--dry-run", str(tmp_path / "absent.yaml")], "cannot read spec"),
        (["run", str(second_bad), "--results", str(tmp_path / "results")], "spec error at fabrics.roft"),
        (["up", "zcube:n=4", "--rate-scale", "-1", "--results", str(tmp_path / "results")], "rate_scale must be > 0"),
        (
            ["up", "zcube:n=4", "--rate-scale", "1e-2", "--results", str(tmp_path / "results")],
            "cannot honour more than",
        ),
        (["report", str(tmp_path)], "not a zlab run folder (no experiment.json)"),
        (["compare", str(tmp_path)], "is it a finished zlab run folder"),
    ]


def test_every_bad_input_exits_2_with_one_line(tmp_path, capsys):
    failures = []
    for argv, text in _cases(tmp_path):
        code = main(argv)
        out, err = capsys.readouterr()
        lines = err.strip().splitlines()
        if code != 2 or len(lines) != 1 or text not in lines[0] or not lines[0].startswith("zlab: error: "):
            failures.append((argv, code, err))
    assert not failures, "\n".join(f"{a}: exit {c}: {e!r}" for a, c, e in failures)
    assert not (tmp_path / "results").exists()  # nothing was written, let alone brought up


def test_a_programming_error_keeps_its_traceback(monkeypatch):
    import testbed.cli.commands.fabric as fabric

    def boom(args):
        raise KeyError("a bug")

    monkeypatch.setattr(fabric, "kinds", boom)
    with pytest.raises(KeyError, match="a bug"):
        main(["fabric", "kinds"])


def test_a_runtime_failure_exits_1_naming_the_log(monkeypatch, capsys):
    import testbed.cli.commands.doctor as doctor
    from testbed.errors import RuntimeFailure

    def fail(args):
        raise RuntimeFailure("controller died (exit 1)", "/tmp/run/controller/controller.log")

    monkeypatch.setattr(doctor, "run", fail)
    assert main(["doctor"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["zlab: failed: controller died (exit 1) (log: /tmp/run/controller/controller.log)"]
