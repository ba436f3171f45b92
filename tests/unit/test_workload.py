"""Workload model: trace readers, KV sizing, PD deployment and the scaling arithmetic; specs."""

import json

import pytest

from testbed.experiment import spec as especs
from traffic import kvmodel, traces, workload


def test_builtin_azure_code_trace_reads_whole():
    reqs = traces.read("azure-code")
    assert len(reqs) == 8819
    assert reqs[0].t_s == 0.0 and reqs[0].input_tokens == 4808 and reqs[0].output_tokens == 10
    assert reqs[-1].t_s == pytest.approx(3435.95, abs=0.01)
    assert all(b.t_s >= a.t_s for a, b in zip(reqs, reqs[1:]))


def test_builtin_azure_conversation_trace_reads_whole():
    """The counts and span its attribution (traffic/data/ATTRIBUTION.md) states."""
    reqs = traces.read("azure-conv")
    assert len(reqs) == 19366
    assert reqs[-1].t_s == pytest.approx(3501.72, abs=0.01)
    assert (
        sum(r.output_tokens for r in reqs) / len(reqs)
        > 5 * sum(r.output_tokens for r in traces.read("azure-code")) / 8819
    )  # a chat service: far longer outputs than the code service


@pytest.mark.parametrize(
    "row, message",
    [
        ("2023-11-16 18:17:04.0319600,abc,8", "3: invalid literal"),
        ("2023-11-16 18:17:04.0319600,10", "3: 2 columns"),
        ("2023-11-16 18:17:03.0000000,10,8", "3: timestamps go backwards"),
        ("yesterday,10,8", "3: time data"),
        ("2023-11-16 18:17:04.0319600,-1,8", "3: negative token count"),
    ],
)
def test_azure_bad_rows_name_file_and_line(tmp_path, row, message):
    p = tmp_path / "t.csv"
    p.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n{row}\n")
    with pytest.raises(traces.TraceError, match=f"t.csv:{message}"):
        traces.read_azure(p)


def test_azure_wrong_header(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("time,in,out\n")
    with pytest.raises(traces.TraceError, match="t.csv:1: expected header"):
        traces.read_azure(p)


def test_mooncake_jsonl(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]},
                {"timestamp": 1500, "input_length": 1100, "output_length": 7, "hash_ids": [1, 2, 3]},
            ]
        )
        + "\n"
    )
    reqs = traces.read(str(p))
    assert [(r.t_s, r.input_tokens, r.hash_ids) for r in reqs] == [(0.0, 600, (1, 2)), (0.5, 1100, (1, 2, 3))]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [1]}\n')
    with pytest.raises(traces.TraceError, match="bad.jsonl:1: .*1 hash_ids for 600 tokens"):
        traces.read(str(bad))
    with pytest.raises(traces.TraceError, match="m2.jsonl:1: missing field 'input_length'"):
        (tmp_path / "m2.jsonl").write_text('{"timestamp": 1}\n')
        traces.read(str(tmp_path / "m2.jsonl"))


def test_unknown_trace():
    with pytest.raises(traces.TraceError, match="built-in traces: azure-code, azure-conv"):
        traces.read("azure-chat")


def test_kv_bytes_per_token_match_the_published_configs():
    assert kvmodel.PRESETS["llama3-70b"].kv_bytes_per_token() == 327_680
    assert kvmodel.PRESETS["llama3-8b"].kv_bytes_per_token() == 131_072
    assert kvmodel.PRESETS["qwen2.5-coder-32b"].kv_bytes_per_token() == 262_144
    assert kvmodel.PRESETS["glm-4.5"].kv_bytes_per_token() == 376_832
    assert kvmodel.PRESETS["deepseek-v3"].kv_bytes_per_token() == 70_272
    assert kvmodel.PRESETS["glm-5"].kv_bytes_per_token() == 89_856
    assert (
        kvmodel.model({"name": "x", "layers": 2, "kv_heads": 1, "head_dim": 4, "dtype_bytes": 1}).kv_bytes_per_token()
        == 16
    )
    with pytest.raises(ValueError, match="presets: llama3-8b"):
        kvmodel.model("gpt-5")


def small_plan(**kw):
    reqs = [traces.TraceRequest(t, 1000, 10) for t in (0.0, 1.0, 2.0, 3.0)]
    args = dict(
        rate_scale=1e-4, size_scale=1e-3, tp=4, prefill_instances=2, decode_instances=2, load_factor=1.0, requests=4
    )
    args.update(kw)
    return workload.plan(
        reqs,
        kvmodel.ModelShape("m", 1, 1, 125, dtype_bytes=2),
        kvmodel.TimeModel(0.01, 1e5, 0.02),
        16,
        4,
        400e9,
        **args,
    )


def test_scaling_arithmetic():
    p = small_plan()
    assert p.scaling.dilation == pytest.approx(10.0)  # size_scale / rate_scale
    # 1000 tokens x 500 B = 500 kB real per request, 4 shards of 125 kB, x size_scale = 125 B emulated
    assert {t.real_bytes for t in p.transfers} == {125_000} and {t.bytes for t in p.transfers} == {125}
    r = p.requests[1]
    assert r.t_arrival_s == pytest.approx(10.0)  # 1 s real -> 10 s emulated
    assert r.prefill_s == pytest.approx(10 * (0.01 + 1000 / 1e5))
    assert p.transfers[4].t_post_s == pytest.approx(10.0 + r.prefill_s)
    # a transfer's emulated duration is its real one x dilation
    real_s = 125_000 * 8 / 400e9
    emu_s = 125 * 8 / (400e9 * 1e-4)
    assert emu_s / real_s == pytest.approx(p.scaling.dilation)


def test_load_factor_compresses_arrivals_and_offered_load_derives_it():
    fast = small_plan(load_factor=2.0)
    assert fast.requests[1].t_arrival_s == pytest.approx(5.0)
    p = small_plan(load_factor=None, offered_load=0.3)
    assert p.offered_load == pytest.approx(0.3)
    assert p.scaling.load_factor == pytest.approx(0.3 / p.natural_load)


def test_mappings_and_instances():
    rs = small_plan(mapping="rank-shifted")
    first = [(t.src_gpu, t.dst_gpu) for t in rs.transfers if t.req == 0]
    assert first == [(0, 9), (1, 10), (2, 11), (3, 8)]  # P0 = GPUs 0-3, D0 = GPUs 8-11
    inc = small_plan(mapping="incast")
    assert {t.dst_gpu for t in inc.transfers if t.req == 0} == {8}
    ra = small_plan()
    assert [(t.src_gpu, t.dst_gpu) for t in ra.transfers if t.req == 1] == [(4, 12), (5, 13), (6, 14), (7, 15)]
    with pytest.raises(ValueError, match="need 20 GPUs; the fabric has 16"):
        small_plan(prefill_instances=3)
    with pytest.raises(ValueError, match="valid: rail-aligned"):
        small_plan(mapping="zigzag")


def test_prefill_is_fifo_per_instance():
    reqs = [traces.TraceRequest(0.0, 10_000, 1) for _ in range(4)]
    p = workload.plan(
        reqs,
        kvmodel.PRESETS["llama3-8b"],
        kvmodel.TimeModel(0.0, 10_000, 0.0),
        16,
        4,
        400e9,
        rate_scale=1e-4,
        size_scale=1e-4,
        tp=4,
        prefill_instances=2,
        decode_instances=2,
        load_factor=1.0,
        requests=4,
    )
    assert [r.prefill_wait_s for r in p.requests] == pytest.approx([0.0, 0.0, 1.0, 1.0])


def test_prefix_reuse_skips_blocks_the_decode_instance_holds():
    reqs = [
        traces.TraceRequest(0.0, 1024, 1, (1, 2)),
        traces.TraceRequest(1.0, 1024, 1, (7, 8)),
        traces.TraceRequest(2.0, 1500, 1, (1, 2, 3)),
    ]
    p = workload.plan(
        reqs,
        kvmodel.PRESETS["llama3-8b"],
        kvmodel.TimeModel(),
        16,
        4,
        400e9,
        rate_scale=1e-4,
        size_scale=1e-4,
        tp=4,
        prefill_instances=2,
        decode_instances=2,
        load_factor=1.0,
        requests=3,
        prefix_reuse=True,
    )
    # request 2 goes to D0, which holds blocks 1 and 2 from request 0: only block 3 (476 tokens) moves
    assert [r.kv_tokens for r in p.requests] == [1024, 1024, 476]


def test_default_spec_validates_and_overrides_apply():
    s = especs.load(None, ["deployment.mapping=rank-shifted", "workload.requests=50"])
    assert s["deployment"]["mapping"] == "rank-shifted" and s["workload"]["requests"] == 50
    s = especs.load(None, ["workload.load_factor=3"])
    assert "offered_load" not in s["workload"] and s["workload"]["load_factor"] == 3


@pytest.mark.parametrize(
    "override, message",
    [
        ("deployment.mapping=rank-shift", "spec error at deployment.mapping: 'rank-shift' is not one of"),
        ("workload.requests=0", "spec error at workload.requests: 0 is less than the minimum of 1"),
        ("emulation.rate_scal=1", "spec error at emulation: Additional properties are not allowed \\('rate_scal'"),
        ("measurement.queue_sample_ms=50", "spec error at measurement.queue_sample_ms: 50 is greater than the maximum"),
        ("nonsense", "is not KEY=VALUE"),
    ],
)
def test_schema_errors_name_the_bad_field(override, message):
    with pytest.raises(especs.ExperimentSpecError, match=message):
        especs.load(None, [override])


def test_yaml_file_errors(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("workload: {requests: ten}\n")
    with pytest.raises(especs.ExperimentSpecError, match="workload.requests: 'ten' is not of type 'integer'"):
        especs.load(str(p))
    p.write_text("workload: [\n")
    with pytest.raises(especs.ExperimentSpecError, match="not valid YAML"):
        especs.load(str(p))
    with pytest.raises(especs.ExperimentSpecError, match="cannot read spec"):
        especs.load(str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize(
    "lines, message",
    [
        (
            [
                '{"timestamp": 2000, "input_length": 10, "output_length": 1}',
                '{"timestamp": 1000, "input_length": 10, "output_length": 1}',
            ],
            "m.jsonl:2: timestamps go backwards",
        ),
        (
            ['{"timestamp": NaN, "input_length": 10, "output_length": 1}'],
            "m.jsonl:1: timestamp must be a finite number",
        ),
        (
            ['{"timestamp": 1, "input_length": 600.9, "output_length": 1}'],
            "m.jsonl:1: input_length must be a whole number",
        ),
        (
            ['{"timestamp": 1, "input_length": true, "output_length": 1}'],
            "m.jsonl:1: input_length must be a whole number",
        ),
        (
            ['{"timestamp": 1, "input_length": "600", "output_length": 1}'],
            "m.jsonl:1: input_length must be a whole number",
        ),
        (["[1, 2]"], "m.jsonl:1: expected a JSON object"),
    ],
)
def test_mooncake_bad_values_name_file_and_line(tmp_path, lines, message):
    p = tmp_path / "m.jsonl"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(traces.TraceError, match=message):
        traces.read(str(p))


def test_trace_files_that_are_not_traces(tmp_path):
    import gzip

    gz = tmp_path / "t.jsonl"
    gz.write_bytes(gzip.compress(b'{"timestamp": 1, "input_length": 1, "output_length": 1}\n'))
    with pytest.raises(traces.TraceError, match="t.jsonl: gzip-compressed; decompress it first"):
        traces.read(str(gz))
    binary = tmp_path / "b.csv"
    binary.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n\xff\xfe\x00junk\n")
    with pytest.raises(traces.TraceError, match="b.csv:2: not UTF-8 text"):
        traces.read(str(binary))
    js = tmp_path / "t.json"
    js.write_text("[]")
    with pytest.raises(traces.TraceError, match=r"t.json: unsupported trace format '.json'; zlab reads .csv"):
        traces.read(str(js))


def test_offered_load_counts_the_bytes_that_move_with_prefix_reuse(tmp_path):
    """Requests that share prefix blocks move fewer KV bytes; the load factor is corrected so the
    planned traffic is still the offered load asked for."""
    import json as _json

    recs = [
        {"timestamp": 1000 * i, "input_length": 2048, "output_length": 1, "hash_ids": [1, 2, 3, 10 + i]}
        for i in range(40)
    ]
    p = tmp_path / "shared.jsonl"
    p.write_text("\n".join(_json.dumps(r) for r in recs) + "\n")
    trace = traces.read(str(p))
    kw = dict(rate_scale=2.5e-5, size_scale=2.5e-4, tp=4, prefill_instances=2, decode_instances=2, requests=40)
    plan = workload.plan(
        trace, kvmodel.model("llama3-70b"), kvmodel.TimeModel(), 16, 4, 400e9, offered_load=0.2, prefix_reuse=True, **kw
    )
    assert plan.offered_load == pytest.approx(0.2, rel=1e-6)
    moved = sum(r.kv_tokens for r in plan.requests)
    assert moved < sum(r.input_tokens for r in plan.requests)  # reuse really removed bytes
