"""The closed-loop P/D serving model: discrete events in integer nanoseconds, KV moved by a network engine.

Why closed-loop: in an open-loop replay a late KV transfer changes nothing downstream, so the
network cannot move throughput. Here the couplings serving systems have are explicit:
* a prefill instance holds a request's KV in its HBM from prefill start until the transfer has
  completed: slow transfers fill prefill memory and stall new prefill batches;
* a transfer starts only once the decode instance has reserved KV memory for the request
  (prompt + output tokens), so a full decode instance holds the KV back (admission blocks);
* a request joins a decode batch only when all its KV shards have arrived and a batch slot is free;
* a decode step's time depends on the batch and its context (compute.InstanceCompute); memory is
  freed when the request's last token is out.
The engine (testbed/network_engine.py) decides when each shard arrives; everything else is modelled.
TTFT is counted to the first token the decode instance emits (the token a user of a disaggregated
service sees), so it includes prefill queueing, prefill, the KV wait and the first decode step.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from ..network_engine import NetworkEngine


class Compute(Protocol):
    def prefill_ns(self, prompt_tokens: list[int]) -> int: ...

    def decode_step_ns(self, batch: int, context_tokens: int) -> int: ...


# (p_instance, d_instance, request id, KV bytes) -> [(src GPU port, dst GPU port, size_bytes, sport)]
FlowPlanner = Callable[[int, int, int, int], list[tuple[str, str, int, int | None]]]


@dataclass(frozen=True)
class Request:
    id: int
    t_arrival_ns: int
    input_tokens: int
    output_tokens: int  # >= 1, all emitted by decode steps


@dataclass(frozen=True)
class Deployment:
    prefill_instances: int
    decode_instances: int
    prefill_kv_tokens: int  # KV capacity of one prefill instance (tokens)
    decode_kv_tokens: int  # of one decode instance
    max_decode_batch: int
    max_prefill_tokens: int
    kv_bytes_per_token: int


@dataclass
class RequestRecord:
    """One request's timeline (ns); the metrics split it into measured and modelled parts."""

    req: Request
    p_instance: int = -1
    d_instance: int = -1
    t_prefill_start_ns: int = -1
    t_prefill_end_ns: int = -1
    t_kv_start_ns: int = -1  # decode memory reserved, transfer started (engine's clock)
    t_kv_done_ns: int = -1  # the last shard's completion, as the engine reports it
    t_decode_join_ns: int = -1
    t_first_token_ns: int = -1
    t_done_ns: int = -1
    flows_left: int = 0
    generated: int = 0


@dataclass
class Occupancy:
    """Decode instances' state over time: (t_ns, instance, batch size, KV tokens reserved)."""

    samples: list[tuple[int, int, int, int]] = field(default_factory=list)


@dataclass
class _Prefill:
    queue: deque = field(default_factory=deque)
    used_tokens: int = 0
    busy: bool = False


@dataclass
class _Decode:
    pending: deque = field(default_factory=deque)  # prefilled, waiting for KV memory
    ready: deque = field(default_factory=deque)  # KV arrived, waiting for a batch slot
    batch: list = field(default_factory=list)
    used_tokens: int = 0
    stepping: bool = False
    assigned: int = 0  # requests sent here and not yet finished (least-loaded choice)


@dataclass
class Result:
    records: list[RequestRecord]
    occupancy: Occupancy
    deployment: Deployment
    engine: str


def simulate(
    requests: list[Request],
    dep: Deployment,
    prefill: Compute,
    decode: Compute,
    engine: NetworkEngine,
    flows: FlowPlanner,
    scheduler: str = "round-robin",
) -> Result:
    """Run every request to its last token; raises ValueError when a request can never fit."""
    return _Sim(requests, dep, prefill, decode, engine, flows, scheduler).run()


class _Sim:
    def __init__(self, requests, dep: Deployment, prefill, decode, engine, flows, scheduler):
        if scheduler not in ("round-robin", "least-loaded"):
            raise ValueError(f"unknown scheduler {scheduler!r}; valid: round-robin, least-loaded")
        for r in requests:
            if r.output_tokens < 1 or r.input_tokens < 1:
                raise ValueError(f"request {r.id}: input and output tokens must be >= 1")
            if r.input_tokens > dep.prefill_kv_tokens:
                raise ValueError(
                    f"request {r.id}: {r.input_tokens} prompt tokens exceed a prefill instance's KV "
                    f"memory ({dep.prefill_kv_tokens} tokens)"
                )
            if r.input_tokens + r.output_tokens > dep.decode_kv_tokens:
                raise ValueError(
                    f"request {r.id}: {r.input_tokens + r.output_tokens} tokens exceed a decode "
                    f"instance's KV memory ({dep.decode_kv_tokens} tokens)"
                )
        self.dep, self.prefill, self.decode, self.engine, self.flows = dep, prefill, decode, engine, flows
        self.scheduler = scheduler
        self.records = [RequestRecord(r) for r in sorted(requests, key=lambda r: (r.t_arrival_ns, r.id))]
        self.P = [_Prefill() for _ in range(dep.prefill_instances)]
        self.D = [_Decode() for _ in range(dep.decode_instances)]
        self.heap: list = []
        self.seq = 0
        self.flow_owner: dict[int, RequestRecord] = {}
        self.next_flow = 0
        self.rr_p = self.rr_d = 0
        self.occ = Occupancy()
        self.now = 0
        # instances to reconsider once every event at `now` is in: requests that arrive, or KV that
        # lands, at the same instant are then batched together (kind order: transfers, prefill, steps)
        self.dirty: set[tuple[int, int]] = set()
        for rec in self.records:
            self._push(rec.req.t_arrival_ns, "arrive", rec)

    def _push(self, t_ns: int, kind: str, arg) -> None:
        heapq.heappush(self.heap, (t_ns, self.seq, kind, arg))
        self.seq += 1

    def run(self) -> Result:
        while True:
            t_int = self.heap[0][0] if self.heap else None
            t_net = self.engine.next_event_ns()
            t_next = min((t for t in (t_int, t_net) if t is not None), default=None)
            if self.dirty and (t_next is None or t_next > self.now):
                self._flush()
                continue
            if t_next is None:
                break
            run_until = getattr(self.engine, "run_until", None)
            if run_until is not None and t_net is not None:
                # an engine that cannot see its next completion without running (packet engine,
                # emulation): run it to the next modelled event, stopping at its first completion
                t_stop = run_until(t_int if t_int is not None else t_net)
                if t_int is None or t_stop < t_int:
                    self.now = t_stop
                    self._network(t_stop)
                    continue
            elif t_net is not None and (t_int is None or t_net <= t_int):
                self.now = t_net
                self._network(t_net)
                continue
            self.now = t_int
            t, _, kind, arg = heapq.heappop(self.heap)
            self._network(t)  # bring the engine's clock to t before anything starts a flow
            getattr(self, "_on_" + kind)(t, arg)
        unfinished = [r.req.id for r in self.records if r.t_done_ns < 0]
        if unfinished:
            raise RuntimeError(f"{len(unfinished)} requests never finished (first: {unfinished[0]})")
        return Result(self.records, self.occ, self.dep, self.engine.name)

    def _flush(self) -> None:
        while self.dirty:
            kind, i = min(self.dirty)
            self.dirty.discard((kind, i))
            (self._try_transfer, self._try_prefill, self._try_step)[kind](self.now, i)

    # --- network -------------------------------------------------------------------------------
    def _network(self, t_ns: int) -> None:
        for flow_id, t_done in self.engine.advance(t_ns):
            rec = self.flow_owner.pop(flow_id)
            rec.flows_left -= 1
            rec.t_kv_done_ns = max(rec.t_kv_done_ns, t_done)
            if rec.flows_left == 0:
                self._kv_arrived(t_ns, rec)

    def _kv_arrived(self, t_ns: int, rec: RequestRecord) -> None:
        p = self.P[rec.p_instance]
        p.used_tokens -= rec.req.input_tokens  # the prefill instance lets the KV go only now
        self.dirty.add((1, rec.p_instance))
        d = self.D[rec.d_instance]
        d.ready.append(rec)
        self.dirty.add((2, rec.d_instance))

    # --- prefill -------------------------------------------------------------------------------
    def _on_arrive(self, t_ns: int, rec: RequestRecord) -> None:
        if self.scheduler == "round-robin":
            i = self.rr_p
            self.rr_p = (self.rr_p + 1) % len(self.P)
        else:
            i = min(range(len(self.P)), key=lambda k: (len(self.P[k].queue) + self.P[k].busy, k))
        rec.p_instance = i
        self.P[i].queue.append(rec)
        self.dirty.add((1, i))

    def _try_prefill(self, t_ns: int, i: int) -> None:
        p = self.P[i]
        if p.busy or not p.queue:
            return
        batch, tokens = [], 0
        while p.queue:
            n = p.queue[0].req.input_tokens
            if batch and tokens + n > self.dep.max_prefill_tokens:
                break
            if p.used_tokens + n > self.dep.prefill_kv_tokens:
                break  # prefill memory is full of KV not yet sent: wait for a transfer to finish
            batch.append(p.queue.popleft())
            tokens += n
            p.used_tokens += n
        if not batch:
            return
        p.busy = True
        for rec in batch:
            rec.t_prefill_start_ns = t_ns
        t_end = t_ns + self.prefill.prefill_ns([r.req.input_tokens for r in batch])
        self._push(t_end, "prefill_done", (i, batch))

    def _on_prefill_done(self, t_ns: int, arg) -> None:
        i, batch = arg
        self.P[i].busy = False
        touched = []
        for rec in batch:
            rec.t_prefill_end_ns = t_ns
            if self.scheduler == "round-robin":
                j = self.rr_d
                self.rr_d = (self.rr_d + 1) % len(self.D)
            else:
                j = min(range(len(self.D)), key=lambda k: (self.D[k].assigned, k))
            rec.d_instance = j
            self.D[j].assigned += 1
            self.D[j].pending.append(rec)
            touched.append(j)
        for j in touched:
            self.dirty.add((0, j))
        self.dirty.add((1, i))

    # --- KV transfer ---------------------------------------------------------------------------
    def _try_transfer(self, t_ns: int, j: int) -> None:
        """FIFO: the head of the pending queue starts its transfer once its tokens fit in memory."""
        d = self.D[j]
        while d.pending:
            rec = d.pending[0]
            need = rec.req.input_tokens + rec.req.output_tokens
            if d.used_tokens + need > self.dep.decode_kv_tokens:
                return
            d.pending.popleft()
            d.used_tokens += need
            self._sample(t_ns, j)
            rec.t_kv_start_ns = t_ns
            planned = self.flows(rec.p_instance, j, rec.req.id, rec.req.input_tokens * self.dep.kv_bytes_per_token)
            planned = [f for f in planned if f[2] > 0]
            if not planned:
                rec.t_kv_done_ns = t_ns
                self._kv_arrived(t_ns, rec)
                continue
            rec.flows_left = len(planned)
            for src, dst, size_bytes, sport in planned:
                fid = self.next_flow
                self.next_flow += 1
                self.flow_owner[fid] = rec
                self.engine.start(t_ns, fid, src, dst, int(size_bytes), sport)

    # --- decode --------------------------------------------------------------------------------
    def _try_step(self, t_ns: int, j: int) -> None:
        d = self.D[j]
        if d.stepping:
            return
        while d.ready and len(d.batch) < self.dep.max_decode_batch:
            rec = d.ready.popleft()
            rec.t_decode_join_ns = t_ns
            d.batch.append(rec)
        if not d.batch:
            return
        context = sum(r.req.input_tokens + r.generated for r in d.batch)
        d.stepping = True
        self._sample(t_ns, j)
        self._push(t_ns + self.decode.decode_step_ns(len(d.batch), context), "step_done", j)

    def _on_step_done(self, t_ns: int, j: int) -> None:
        d = self.D[j]
        d.stepping = False
        keep = []
        for rec in d.batch:
            rec.generated += 1
            if rec.generated == 1:
                rec.t_first_token_ns = t_ns
            if rec.generated >= rec.req.output_tokens:
                rec.t_done_ns = t_ns
                d.used_tokens -= rec.req.input_tokens + rec.req.output_tokens
                d.assigned -= 1
            else:
                keep.append(rec)
        freed = len(keep) < len(d.batch)
        d.batch = keep
        if freed:
            self.dirty.add((0, j))
            self._sample(t_ns, j)
        self.dirty.add((2, j))

    def _sample(self, t_ns: int, j: int) -> None:
        d = self.D[j]
        self.occ.samples.append((t_ns, j, len(d.batch), d.used_tokens))
