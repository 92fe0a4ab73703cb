"""The Python client and ToolServer against the real `baton up` binary."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from baton.v1 import events_pb2 as events_pb
from baton.v1 import orchestrator_pb2 as pb
from baton.v1 import tool_host_pb2 as tool_pb
from baton.v1 import tool_host_pb2_grpc as tool_pb_grpc
from baton_client import (
    Aborted,
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    Orchestrator,
    Store,
    ToolContext,
    Unauthenticated,
    Unavailable,
    ToolServer,
    kind,
)

from conftest import authenticated_store, make_pki, running


def run(coro):
    return asyncio.run(coro)


def test_nested_run_with_a_python_tool_and_its_progress():
    async def main():
        async with running() as b:
            events = await b.orchestrator.run_agent("outer", "tides", max_depth=2).collect()
            seq = [(kind(e), e.context_id, e.depth) for e in events]
            assert seq[0] == ("run_started", "root", 0)
            assert ("agent_started", "root.inner.1", 1) in seq
            progress = [e.tool_progress for e in events if kind(e) == "tool_progress"]
            assert [(p.percent, p.message) for p in progress] == [(50, "step 1"), (100, "step 2")]
            assert all(e.context_id == "root.inner.1" for e in events if kind(e) == "tool_progress")
            assert kind(events[-1]) == "run_completed"
            assert events[-1].run_completed.output == "outer: inner: 2 results for find tides at depth 1"
            assert [e.seq for e in events] == list(range(1, len(events) + 1))

    run(main())


def test_max_depth_filter_and_traceparent():
    async def main():
        async with running() as b:
            trace = "4bf92f3577b34da6a3ce929d0e0e4736"
            stream = b.orchestrator.run_agent(
                "outer", "x", max_depth=2, traceparent=f"00-{trace}-00f067aa0ba902b7-01"
            )
            events = await stream.collect()
            assert stream.trace_id == trace
            assert {e.trace_id for e in events} == {trace}
            # max_depth 0: the nested agent is refused, which the model sees.
            events = await b.orchestrator.run_agent("outer", "x", max_depth=0).collect()
            assert max(e.depth for e in events) == 0
            assert "over max_depth 0" in events[-1].run_completed.output

    run(main())


def test_input_asked_by_a_python_tool():
    async def main():
        async with running() as b:
            stream = b.orchestrator.run_agent("picker", "go")
            offered = []
            async for e in stream:
                if kind(e) == "tool_options":
                    offered.append((e.tool_options.question, list(e.tool_options.options)))
                if kind(e) == "input_requested":
                    assert e.input_requested.prompt == "Which plan?"
                    assert list(e.input_requested.options) == ["basic", "gold"]
                    await b.orchestrator.submit_input(e.run_id, e.input_requested.input_id, "gold")
                if kind(e) == "run_completed":
                    assert e.run_completed.output == "picked gold"
                    # Offered on the first call and again when resumed.
                    assert offered == [("Plans on offer", ["basic", "gold"])] * 2
                    return
            raise AssertionError("no run_completed")

    run(main())


def test_approval_then_the_slot_is_in_the_store():
    async def main():
        async with running() as b:
            stream = b.orchestrator.run_agent("payer", "order 7")
            async for e in stream:
                if kind(e) == "approval_requested":
                    await b.orchestrator.resolve_approval(e.run_id, e.approval_requested.approval_id, True)
                if kind(e) == "run_completed":
                    break
            slot = await b.store.get(stream.trace_id, "paid")
            assert slot.value == b"yes"
            run_info = await b.orchestrator.get_run(stream.run_id)
            assert run_info.status == pb.RUN_STATUS_COMPLETED
            # Re-attach to the finished run: its events after seq 2.
            replayed = await b.orchestrator.watch(stream.run_id, after_seq=2).collect()
            assert replayed[0].seq == 3 and kind(replayed[-1]) == "run_completed"
            assert [e.seq for e in replayed] == list(range(3, run_info.last_seq + 1))

    run(main())


def test_pipeline_dag():
    async def main():
        async with running() as b:
            events = await b.orchestrator.run_pipeline(
                [
                    {"id": "a", "agent": "echo", "task": "alpha", "output_to": "x", "timeout": 10},
                    {"id": "b", "agent": "echo", "task": "got {{x}}"},
                ],
                mode="dag",
                name="py",
            ).collect()
            done = next(e.pipeline_completed for e in events if kind(e) == "pipeline_completed")
            assert list(done.succeeded) == ["a", "b"]
            assert events[-1].run_completed.output == "got alpha"
            assert ("step_started", "root.a", 1) in [(kind(e), e.context_id, e.depth) for e in events]

    run(main())


def test_schedules_fire_runs_and_are_paused_resumed_and_deleted():
    async def main():
        async with running() as b:
            made = await b.orchestrator.create_schedule("echo", "tick", every=10, description="py")
            assert made.schedule_id.startswith("sch_") and made.target == "echo"
            assert len(made.next_fire_times) == 5
            cron = await b.orchestrator.create_schedule(
                "echo", "morning", cron="0 9 * * MON-FRI", time_zone="Europe/Paris", overlap="queue_one"
            )
            assert cron.overlap == pb.SCHEDULE_OVERLAP_QUEUE_ONE
            listed = await b.orchestrator.list_schedules()
            assert [s.schedule_id for s in listed] == [made.schedule_id, cron.schedule_id]
            paused = await b.orchestrator.pause_schedule(made.schedule_id)
            assert paused.paused and len(paused.next_fire_times) == 0
            resumed = await b.orchestrator.resume_schedule(made.schedule_id)
            assert not resumed.paused
            await b.orchestrator.delete_schedule(made.schedule_id)
            with pytest.raises(NotFound) as gone:
                await b.orchestrator.get_schedule(made.schedule_id)
            assert gone.value.field == "schedule_id"
            with pytest.raises(InvalidArgument) as bad:
                await b.orchestrator.create_schedule("echo", "x", cron="0 9 * * *", time_zone="Mars/Base")
            assert bad.value.field == "time_zone"
            with pytest.raises(InvalidArgument) as bad:
                await b.orchestrator.create_schedule("echo", "x", every=1)
            assert bad.value.field == "interval"
            assert [s.schedule_id for s in await b.orchestrator.list_schedules()] == [cron.schedule_id]

    run(main())


def test_a_tenants_webhooks_are_made_listed_rotated_and_deleted():
    async def main():
        async with running() as b:
            made = await b.orchestrator.create_webhook(
                "https://hooks.example.com/baton", events=["run.completed"], description="py"
            )
            assert made.secret.startswith("whsec_")
            listed = await b.orchestrator.list_webhooks()
            assert [w.url for w in listed] == ["https://hooks.example.com/baton"]
            assert made.secret[6:] not in str(listed)
            rotated = await b.orchestrator.rotate_webhook_secret(made.webhook.webhook_id, previous_valid_for=60)
            assert rotated.secret != made.secret and rotated.webhook.HasField("previous_secret_expires_at")
            assert await b.orchestrator.list_dead_letters() == []
            with pytest.raises(NotFound) as gone:
                await b.orchestrator.redeliver_dead_letter("msg_nope")
            assert gone.value.field == "delivery_id"
            await b.orchestrator.delete_webhook(made.webhook.webhook_id)
            assert await b.orchestrator.list_webhooks() == []
            with pytest.raises(InvalidArgument) as bad:
                await b.orchestrator.create_webhook("https://10.0.0.1/x")
            assert bad.value.field == "url"

    run(main())


def test_typed_errors_name_the_field():
    async def main():
        async with running() as b:
            with pytest.raises(InvalidArgument) as bad:
                await b.orchestrator.run_agent("nobody", "x").collect()
            assert bad.value.field == "agent"
            with pytest.raises(InvalidArgument) as bad:
                await b.orchestrator.run_pipeline([{"id": "a", "agent": "nobody"}]).collect()
            assert bad.value.field == "pipeline.steps[0].agent"
            with pytest.raises(InvalidArgument) as bad:
                await b.orchestrator.run_agent(
                    "echo", "x", webhooks=[{"url": "https://10.0.0.1/hook", "secret": "whsec_x"}]
                ).collect()
            assert bad.value.field == "webhooks[0].url"
            with pytest.raises(NotFound):
                await b.orchestrator.get_run("0190f5a2-7b3c-7d4e-8f10-1a2b3c4d5e6f")
            with pytest.raises(InvalidArgument) as bad:
                await b.orchestrator.get_run("no-such-run")
            assert bad.value.field == "run_id"
            with pytest.raises(DeadlineExceeded):
                await b.orchestrator.run_agent("slow", "x", timeout=0.3).collect()
            trace = "0af7651916cd43dd8448eb211c80319c"
            await b.store.put(trace, "k", "v1")
            with pytest.raises(Aborted) as mismatch:
                await b.store.put(trace, "k", "v2", expected_version=7)
            assert mismatch.value.field == "expected_version"
            assert mismatch.value.current_version == 1
            with pytest.raises(InvalidArgument) as bad:
                await b.store.get("not-a-trace", "k")
            assert bad.value.field == "trace_id"

    run(main())


def test_leaving_the_stream_cancels_the_run():
    async def main():
        async with running() as b:
            stream = b.orchestrator.run_agent("slow", "x")
            first = await stream.__anext__()
            assert kind(first) == "run_started"
            stream.cancel()
            for _ in range(100):
                status = (await b.orchestrator.get_run(first.run_id)).status
                if status == pb.RUN_STATUS_CANCELLED:
                    return
                await asyncio.sleep(0.05)
            raise AssertionError(f"the run is still {status}")

    run(main())


def test_store_put_get_list_delete_watch():
    async def main():
        async with running() as b:
            trace = "5bf92f3577b34da6a3ce929d0e0e4736"
            changes = []

            async def watch():
                async for c in b.store.watch(trace, "notes/"):
                    changes.append((c.kind, c.key))
                    if len(changes) == 2:
                        return

            watcher = asyncio.create_task(watch())
            await asyncio.sleep(0.2)
            put = await b.store.put(trace, "notes/a", "hello", ttl=60)
            got = await b.store.get(trace, "notes/a")
            assert (got.value, got.slot.version) == (b"hello", put.version)
            assert got.slot.content_type == "text/plain; charset=utf-8"
            listing = await b.store.list(trace, "notes/")
            assert [s.key for s in listing.slots] == ["notes/a"]
            await b.store.delete(trace, "notes/a")
            with pytest.raises(NotFound):
                await b.store.get(trace, "notes/a")
            await asyncio.wait_for(watcher, 5)
            assert [k for _, k in changes] == ["notes/a", "notes/a"]

    run(main())


def test_store_batches_are_all_or_nothing():
    async def main():
        async with running() as b:
            trace = "6bf92f3577b34da6a3ce929d0e0e4736"
            written = await b.store.put_many(trace, {"b/1": "one", "b/2": b"two"})
            assert [w.version for w in written] == [1, 2]
            got = await b.store.get(trace, "b/1")
            assert (got.value, got.slot.content_type) == (b"one", "text/plain; charset=utf-8")
            # A stale expected version in the second entry: nothing written.
            with pytest.raises(Aborted) as stale:
                await b.store.put_many(
                    trace,
                    [{"key": "b/3", "value": "x"}, {"key": "b/1", "value": "y", "expected_version": 7}],
                )
            assert stale.value.field == "entries[1].expected_version"
            assert [s.key for s in (await b.store.list(trace)).slots] == ["b/1", "b/2"]
            with pytest.raises(InvalidArgument) as twice:
                await b.store.put_many(trace, [{"key": "k", "value": "1"}, {"key": "k", "value": "2"}])
            assert twice.value.field == "entries[1].key"
            written = await b.store.put_many(trace, [{"key": "c", "value": "z", "ttl": 60, "expected_version": 0}])
            assert written[0].version == 3
            assert await b.store.delete_many(trace, ["b/2", "absent"]) == 1
            assert await b.store.delete_many(trace, prefix="b/") == 1
            assert [s.key for s in (await b.store.list(trace)).slots] == ["c"]
            with pytest.raises(InvalidArgument) as empty:
                await b.store.delete_many(trace)
            assert empty.value.field == "keys"

    run(main())


def test_store_list_follows_every_page():
    async def main():
        async with running() as b:
            trace = "7bf92f3577b34da6a3ce929d0e0e4736"
            keys = [f"k/{i:04}" for i in range(2500)]
            for start in range(0, len(keys), 250):
                await asyncio.gather(*(b.store.put(trace, k, "v") for k in keys[start : start + 250]))
            listing = await b.store.list(trace, "k/")
            assert [s.key for s in listing.slots] == keys, "three pages of 1000, followed"
            assert (listing.used_keys, listing.next_page_token) == (2500, "")
            first = await b.store.list_page(trace, "k/", page_size=2)
            assert [s.key for s in first.slots] == keys[:2] and first.next_page_token
            second = await b.store.list_page(trace, "k/", page_size=2, page_token=first.next_page_token)
            assert [s.key for s in second.slots] == keys[2:4]
            with pytest.raises(InvalidArgument) as bad:
                await b.store.list_page(trace, "k/", page_token="garbage")
            assert bad.value.field == "page_token"

    run(main())


def test_tool_schemas_come_from_type_hints():
    tools = ToolServer()

    @tools.tool(name="find")
    async def find(ctx: ToolContext, query: str, tags: list[str], limit: int = 3, exact: bool | None = None) -> dict:
        """Finds things."""
        return {}

    async def main():
        listed = await tools.ListTools(None, None)
        (spec,) = listed.tools
        assert (spec.name, spec.description) == ("find", "Finds things.")
        assert json.loads(spec.parameters_json_schema) == {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "limit": {"type": "integer"},
                "exact": {"type": "boolean"},
            },
            "required": ["query", "tags"],
        }

    run(main())


def test_a_tool_sees_its_calls_idempotency_key():
    tools = ToolServer()

    @tools.tool(name="charge")
    async def charge(ctx: ToolContext, amount: int) -> str:
        """Charges once per call, however often it is executed."""
        return f"{ctx.idempotency_key} {amount}"

    class Context:
        def invocation_metadata(self):
            return ()

    async def main():
        request = tool_pb.ExecuteRequest(
            tool="charge",
            call_id="c1",
            arguments_json='{"amount": 5}',
            context=tool_pb.ToolCallContext(run_id="r", context_id="root.payer.1"),
            idempotency_key="r/root.payer.1/c1",
        )
        answers = [r async for r in tools.Execute(request, Context())]
        assert answers[-1].result.output == "r/root.payer.1/c1 5"

    run(main())


def test_a_detached_run_outlives_its_stream_and_is_listed():
    async def main():
        async with running() as b:
            stream = b.orchestrator.run_agent("slow", "x", detach=True)
            first = await stream.__anext__()
            stream.cancel()
            await asyncio.sleep(0.1)
            assert (await b.orchestrator.get_run(first.run_id)).status == pb.RUN_STATUS_RUNNING
            page = await b.orchestrator.list_runs(pb.RUN_STATUS_RUNNING, page_size=1000)
            (mine,) = [r for r in page.runs if r.run_id == first.run_id]
            assert mine.detached and mine.target == "slow"
            # Sleeping, it waits for nobody: not among the runs waiting for a person.
            assert list(mine.waiting_for) == []
            waiting = await b.orchestrator.list_runs(waiting=True, page_size=1000)
            assert first.run_id not in [r.run_id for r in waiting.runs]
            assert await b.orchestrator.cancel(first.run_id, "done") == pb.RUN_STATUS_CANCELLED

    run(main())


def test_cancel_run():
    async def main():
        async with running() as b:
            stream = b.orchestrator.run_agent("slow", "x")
            first = await stream.__anext__()
            status = await b.orchestrator.cancel(first.run_id, "changed my mind")
            assert status in (pb.RUN_STATUS_RUNNING, pb.RUN_STATUS_CANCELLED)
            rest = await stream.collect()
            assert kind(rest[-1]) == "run_cancelled"
            assert rest[-1].run_cancelled.reason.endswith("changed my mind")
            assert (await b.orchestrator.get_run(first.run_id)).status == pb.RUN_STATUS_CANCELLED

    run(main())


def test_api_keys_name_tenants():
    acme, globex = "acme-key-0123456789", "globex-key-9876543210"

    async def main():
        async with running(api_keys=f"acme {acme}\nglobex {globex}\n", api_key=acme) as b:
            assert (await b.orchestrator.list_agents()).agents
            async with Orchestrator(b.orchestrator_target) as anonymous:
                with pytest.raises(Unauthenticated) as e:
                    await anonymous.list_agents()
                assert "authorization: missing" in e.value.message
            async with Orchestrator(b.orchestrator_target, api_key="not-a-known-key-at-all") as stranger:
                with pytest.raises(Unauthenticated):
                    await stranger.list_agents()
            async with Orchestrator(b.orchestrator_target, api_key=globex) as other:
                stream = b.orchestrator.run_agent("payer", "order 9")
                async for e in stream:
                    if kind(e) == "approval_requested":
                        # Another tenant sees no such run, and changes nothing.
                        with pytest.raises(NotFound) as nf:
                            await other.resolve_approval(e.run_id, e.approval_requested.approval_id, True)
                        assert nf.value.field == "run_id"
                        with pytest.raises(NotFound):
                            await other.get_run(e.run_id)
                        await b.orchestrator.resolve_approval(e.run_id, e.approval_requested.approval_id, True)
                    if kind(e) == "run_completed":
                        break
                assert (await b.orchestrator.get_run(stream.run_id)).status == pb.RUN_STATUS_COMPLETED

    run(main())


def test_a_store_key_reaches_only_its_tenants_slots():
    acme, globex = "acme-key-0123456789", "globex-key-9876543210"
    trace = "7af92f3577b34da6a3ce929d0e0e4736"

    async def main():
        async with authenticated_store(f"acme {acme}\nglobex {globex}\n", "service-token-0123456789") as target:
            async with Store(target) as anonymous:
                with pytest.raises(Unauthenticated) as e:
                    await anonymous.put(trace, "k", "x")
                assert "authorization" in e.value.message
            async with Store(target, api_key=acme) as a, Store(target, api_key=globex) as g:
                await a.put(trace, "plan", "acme's")
                with pytest.raises(NotFound):
                    await g.get(trace, "plan")
                assert len((await g.list(trace)).slots) == 0
                assert await g.clear(trace) == 0
                await g.put(trace, "plan", "globex's")
                assert (await a.get(trace, "plan")).value == b"acme's"
                assert (await g.get(trace, "plan")).value == b"globex's"

    run(main())


class _Call:
    """A stand-in for a streaming call: reads its items in order (an
    exception is raised when read)."""

    def __init__(self, items):
        self.items = list(items)

    async def read(self):
        item = self.items.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def cancel(self):
        pass


def _unavailable():
    return grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "replica draining"
    )


def _event(seq, **payload):
    return events_pb.RunEvent(seq=seq, run_id="r1", trace_id="t", **payload)


def test_a_broken_stream_re_attaches_after_its_last_seq():
    from baton_client.client import RunStream

    asked = []

    def reattach(run_id, after_seq):
        asked.append((run_id, after_seq))
        if len(asked) == 1:
            return _Call([_unavailable()])  # the next replica is not ready yet
        return _Call([_event(3), _event(4, run_completed=events_pb.RunCompleted(output="done")), grpc.aio.EOF])

    async def main():
        stream = RunStream(_Call([_event(1), _event(2), _unavailable()]), reattach)
        events = await stream.collect()
        assert [e.seq for e in events] == [1, 2, 3, 4]
        assert events[-1].run_completed.output == "done"
        assert asked == [("r1", 2), ("r1", 2)]

        # Other errors, and errors before the run is known, are the caller's.
        broken = RunStream(_Call([_unavailable()]), reattach)
        with pytest.raises(Unavailable):
            await broken.collect()

    run(main())


def test_store_over_tls_with_a_ca_file_and_a_client_certificate(tmp_path):
    """The store binary speaking TLS only, requiring client certificates:
    reached over ``https://`` with the test CA and a client certificate;
    refused in plaintext, without the CA (system roots) or without a
    client certificate."""
    pki = make_pki(tmp_path)
    key = "acme-key-0123456789"
    trace = "6af92f3577b34da6a3ce929d0e0e4736"

    async def main():
        async with authenticated_store(f"acme {key}\n", "service-token-0123456789", pki, mtls=True) as target:
            port = target.rsplit(":", 1)[1]
            https = f"https://localhost:{port}"
            async with Store(
                https, api_key=key, ca_file=pki.ca, cert_file=pki.client_cert, key_file=pki.client_key
            ) as s:
                await s.put(trace, "k", "over tls")
                assert (await s.get(trace, "k")).value == b"over tls"
            for refused in (
                Store(target, api_key=key),
                Store(https, api_key=key, cert_file=pki.client_cert, key_file=pki.client_key),
                Store(https, api_key=key, ca_file=pki.ca),
            ):
                async with refused as s:
                    with pytest.raises(Unavailable):
                        await s.get(trace, "k", timeout=5)

    run(main())


def test_a_run_budget_bounds_what_the_run_spends():
    async def main():
        async with running() as b:
            with pytest.raises(InvalidArgument) as bad:
                await b.orchestrator.run_agent("echo", "hi", budget_tokens=0).collect()
            assert bad.value.field == "limits.budget.tokens"
            # One token leaves no room for the call's input: refused before
            # the model is asked, naming the budget.
            events = await b.orchestrator.run_agent("echo", "hi", budget_tokens=1).collect()
            failed = events[-1].run_failed
            assert failed.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], failed
            assert failed.message.startswith("budget run exhausted: 0 of 1 tokens spent"), failed
            events = await b.orchestrator.run_agent("echo", "hi", budget_tokens=100_000).collect()
            assert events[-1].WhichOneof("payload") == "run_completed"

    run(main())


def test_generation_settings_reach_the_run():
    async def main():
        async with running() as b:
            # A bad setting is the server's INVALID_ARGUMENT, naming it.
            with pytest.raises(InvalidArgument) as bad:
                await b.orchestrator.run_agent("echo", "hi", settings={"temperature": 3}).collect()
            assert bad.value.field == "settings.temperature"
            with pytest.raises(ValueError):
                await b.orchestrator.run_agent("echo", "hi", settings={"warmth": 1}).collect()
            # A schema the scripted answer (plain text) does not match.
            events = await b.orchestrator.run_agent(
                "echo",
                "hi",
                settings={"temperature": 0.2, "max_tokens": 10, "response_format": {"schema": {"type": "object"}}},
            ).collect()
            failed = events[-1].run_failed
            assert failed.code == grpc.StatusCode.FAILED_PRECONDITION.value[0], failed
            assert "does not match response_format" in failed.message
            # The same settings on a pipeline.
            events = await b.orchestrator.run_pipeline(
                [{"id": "a", "agent": "echo", "task": "hi"}],
                settings={"response_format": {"schema": {"type": "object"}}},
            ).collect()
            assert any(
                "does not match response_format" in e.step_failed.error
                for e in events
                if e.WhichOneof("payload") == "step_failed"
            )

    run(main())


def test_the_readme_tool_server_runs_as_printed(tmp_path):
    """The README's `Serving tools` snippet, saved as a file and run with
    python, serves its tool until SIGTERM, then exits cleanly."""
    import pathlib
    import re
    import signal
    import socket
    import subprocess
    import sys

    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    snippet = re.search(r"## Serving tools\n\n```python\n(.*?)```", readme, re.S).group(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "tools.py"
    script.write_text(snippet.replace('"0.0.0.0:50061"', f'"127.0.0.1:{port}"'))
    server = subprocess.Popen([sys.executable, str(script)], stderr=subprocess.PIPE, text=True)
    try:
        line = server.stderr.readline()
        assert f"serving web_search on 127.0.0.1:{port}" in line, line

        async def listed():
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = tool_pb_grpc.ToolHostStub(channel)
                return await stub.ListTools(tool_pb.ListToolsRequest(), timeout=5)

        tools = run(listed())
        assert [t.name for t in tools.tools] == ["web_search"]
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=10) == 0
    finally:
        server.kill()


def test_fork_run_replays_up_to_the_point_and_takes_the_edit():
    async def main():
        async with running() as b:
            original = await b.orchestrator.run_agent("outer", "cats").collect()
            assert kind(original[-1]) == "run_completed"
            # inner's py_search result, one level down.
            at = next(
                e.seq
                for e in original
                if kind(e) == "tool_call_completed" and e.context_id == "root.inner.1"
            )
            fork = await b.orchestrator.fork_run(original[0].run_id, at, tool_result="no cats today").collect()
            assert kind(fork[-1]) == "run_completed"
            assert fork[-1].run_completed.output == "outer: inner: no cats today"
            assert fork[0].replayed and fork[0].run_started.forked_from.run_id == original[0].run_id
            assert fork[0].run_started.forked_from.seq == at
            assert [e.seq for e in fork] == list(range(1, len(fork) + 1))
            got = await b.orchestrator.get_run(fork[0].run_id)
            assert got.forked_from.run_id == original[0].run_id
            # An edit of the wrong kind names the field and starts nothing.
            with pytest.raises(InvalidArgument) as e:
                await b.orchestrator.fork_run(original[0].run_id, at, input="x").collect()
            assert e.value.field == "edit.input"
            with pytest.raises(ValueError):
                b.orchestrator.fork_run(original[0].run_id, at, input="x", tool_result="y")

    run(main())


def test_replay_run_strictly_answers_every_call_from_the_recording():
    async def main():
        async with running() as b:
            # The tool server may have been away when Baton started: its
            # first call lists its tools, and a run before that offered the
            # model other tool descriptions (a replay rightly says so).
            await b.orchestrator.run_agent("outer", "warm-up").collect()
            original = await b.orchestrator.run_agent("outer", "dogs").collect()
            assert kind(original[-1]) == "run_completed"
            replay = await b.orchestrator.replay_run(original[0].run_id, strict=True).collect()
            assert kind(replay[-1]) == "run_completed", [e for e in replay if kind(e) in ("diverged", "run_failed")]
            assert replay[-1].run_completed.output == original[-1].run_completed.output
            assert replay[0].run_started.replay_of == original[0].run_id and replay[0].run_started.strict
            stats = replay[-1].run_completed.replay
            assert stats.run_id == original[0].run_id and not stats.diverged
            # outer's and inner's model turns and inner's py_search call.
            assert stats.matched_calls == stats.calls >= 3
            assert not [e for e in replay if kind(e) == "diverged"]
            got = await b.orchestrator.get_run(replay[0].run_id)
            assert got.replay_of == original[0].run_id
            with pytest.raises(NotFound):
                await b.orchestrator.replay_run("01a21dea-4a96-7714-991b-987a17c8b34d").collect()

    run(main())


def test_fork_run_with_a_run_context_edit():
    async def main():
        async with running() as b:
            original = await b.orchestrator.run_agent("outer", "dogs").collect()
            at = next(e.seq for e in original if kind(e) == "tool_call_completed" and e.context_id == "root.inner.1")
            fork = await b.orchestrator.fork_run(original[0].run_id, at, run_context={"mood": "curious"}).collect()
            assert kind(fork[-1]) == "run_completed"
            assert json.loads(fork[-1].run_completed.run_context_json)["mood"] == "curious"
            assert fork[-1].run_completed.output == original[-1].run_completed.output

    run(main())
