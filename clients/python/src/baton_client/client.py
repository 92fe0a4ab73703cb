"""Async clients of the orchestrator and the context store (grpc.aio).

Events and responses are the generated protobuf messages of ``baton.v1``;
:func:`kind` names an event's payload. Every call takes ``timeout`` (seconds,
the gRPC deadline) and the run calls take ``traceparent`` (W3C trace context,
so the run joins the caller's trace). Errors are the typed exceptions of
:mod:`baton_client.errors`.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import duration_pb2

from baton.v1 import (
    context_store_pb2 as store_pb,
    context_store_pb2_grpc as store_grpc,
    evals_pb2 as evals_pb,
    events_pb2 as events_pb,
    orchestrator_pb2 as pb,
    orchestrator_pb2_grpc as orch_grpc,
    webhooks_pb2 as webhooks_pb,
)

from .errors import from_rpc_error

RunEvent = events_pb.RunEvent

_APPROVAL_MODES = {
    "ask": pb.APPROVAL_MODE_ASK,
    "auto_approve": pb.APPROVAL_MODE_AUTO_APPROVE,
    "auto_deny": pb.APPROVAL_MODE_AUTO_DENY,
}
_MODES = {
    "sequential": pb.PIPELINE_MODE_SEQUENTIAL,
    "parallel": pb.PIPELINE_MODE_PARALLEL,
    "dag": pb.PIPELINE_MODE_DAG,
}
_POLICIES = {
    "fail": pb.FAILURE_POLICY_FAIL,
    "continue": pb.FAILURE_POLICY_CONTINUE,
    "best_effort": pb.FAILURE_POLICY_BEST_EFFORT,
}
_TERMINAL = {"run_completed", "run_failed", "run_cancelled"}
_BUSY = {
    "wait": pb.CONVERSATION_BUSY_WAIT,
    "refuse": pb.CONVERSATION_BUSY_REFUSE,
}


def kind(event: RunEvent) -> str:
    """The payload's name: ``agent_started``, ``tool_progress``, ``run_completed``, …"""
    return event.WhichOneof("payload") or ""


def is_terminal(event: RunEvent) -> bool:
    """Whether the event ends its run's stream."""
    return kind(event) in _TERMINAL


def _run_webhooks(
    hooks: Iterable[Mapping[str, Any] | webhooks_pb.RunWebhook],
) -> list[webhooks_pb.RunWebhook]:
    """A request's ``webhooks`` from mappings (``url``, ``events``,
    ``secret``) or messages."""
    out = []
    for h in hooks:
        if isinstance(h, webhooks_pb.RunWebhook):
            out.append(h)
        else:
            out.append(
                webhooks_pb.RunWebhook(url=h["url"], events=list(h.get("events", ())), secret=h.get("secret", ""))
            )
    return out


def _duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


async def _call(method: Any, request: Any, timeout: float | None, metadata: Any = None) -> Any:
    """One unary call; gRPC errors become the typed errors."""
    try:
        return await method(request, timeout=timeout, metadata=metadata)
    except grpc.aio.AioRpcError as e:
        raise from_rpc_error(e) from None


def _metadata(traceparent: str | None) -> tuple[tuple[str, str], ...] | None:
    return (("traceparent", traceparent),) if traceparent else None


class RunStream:
    """The events of one run, as an async iterator. Leaving it early (or
    :meth:`cancel`) disconnects, which cancels the run on the server unless
    it was started detached.

    When the stream breaks with ``UNAVAILABLE`` before the run's terminal
    event (its replica is draining, or died and another resumed the run),
    it re-attaches by itself with ``WatchRun(after_seq)`` through the same
    target and goes on where it was: the caller sees a pause, not an error.
    It gives up after ``REATTACH_FOR`` seconds, raising the last error."""

    #: How long a broken stream keeps trying to re-attach, in seconds.
    REATTACH_FOR = 30.0

    def __init__(self, call: grpc.aio.UnaryStreamCall, reattach: Any = None) -> None:
        self._call = call
        #: ``reattach(run_id, after_seq)`` makes a new WatchRun call.
        self._reattach = reattach
        self._ended = False
        self.last_seq = 0
        self.run_id: str | None = None
        self.trace_id: str | None = None
        #: The conversation the run is in (its ``run_started`` says it),
        #: once that event was read; ``None`` for a run in none.
        self.conversation_id: str | None = None

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> RunEvent:
        if self._ended:
            raise StopAsyncIteration
        try:
            event = await self._call.read()
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE or self.run_id is None or self._reattach is None:
                raise from_rpc_error(e) from None
            event = await self._resume(e)
        if event is grpc.aio.EOF:
            raise StopAsyncIteration
        if self.run_id is None:
            self.run_id, self.trace_id = event.run_id, event.trace_id
        if event.WhichOneof("payload") == "run_started" and event.run_started.conversation_id:
            self.conversation_id = event.run_started.conversation_id
        self.last_seq = event.seq
        if event.WhichOneof("payload") in ("run_completed", "run_failed", "run_cancelled"):
            self._ended = True
            # The server ends the stream right after: read that end (its
            # status) rather than leave the call to be cancelled, which
            # resets the stream; a connection whose streams are reset by the
            # thousand is closed by the server's HTTP/2 reset-flood guard.
            try:
                await self._call.read()
            except grpc.aio.AioRpcError:
                pass
        return event

    async def _resume(self, error: grpc.aio.AioRpcError) -> Any:
        """Re-attaches after ``last_seq``; the first event of the new call."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.REATTACH_FOR
        wait = 0.1
        while True:
            self._call = self._reattach(self.run_id, self.last_seq)
            try:
                return await self._call.read()
            except grpc.aio.AioRpcError as e:
                retry = e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND)
                if not retry or loop.time() + wait > deadline:
                    raise from_rpc_error(error) from None
            await asyncio.sleep(wait)
            wait = min(wait * 2, 1.0)

    def cancel(self) -> None:
        """Disconnects; the server cancels the run (unless detached)."""
        self._call.cancel()

    async def collect(self) -> list[RunEvent]:
        """Every remaining event, to the end of the run."""
        return [e async for e in self]

    async def __aenter__(self) -> RunStream:
        return self

    async def __aexit__(self, *_: object) -> None:
        self.cancel()


# Calls are spread over every address the target's name resolves to (gRPC's
# round_robin; the default, pick_first, sends everything to one): with
# ``dns:///baton-orchestrator-headless:50051`` in Kubernetes, every replica
# gets calls. A single address behaves as before.
_ROUND_ROBIN = json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})


def _read(path: str | os.PathLike[str] | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


def _channel(
    target: str,
    *,
    tls: bool | None = None,
    ca_file: str | os.PathLike[str] | None = None,
    cert_file: str | os.PathLike[str] | None = None,
    key_file: str | os.PathLike[str] | None = None,
) -> grpc.aio.Channel:
    """A channel to ``host:port``, ``http://host:port``, ``https://host:port``
    or ``dns:///host:port``, balanced round robin.

    TLS when the target is ``https://`` or ``tls`` is true (a ``dns:///``
    target, say) or a CA or client certificate is given: the server's
    certificate is checked against ``ca_file`` (PEM), else the system's
    roots; ``cert_file``/``key_file`` present a client certificate (mTLS)."""
    secure = tls if tls is not None else (
        target.startswith("https://") or ca_file is not None or cert_file is not None
    )
    address = target.removeprefix("http://").removeprefix("https://")
    options = [("grpc.service_config", _ROUND_ROBIN)]
    if not secure:
        return grpc.aio.insecure_channel(address, options=options)
    if (cert_file is None) != (key_file is None):
        raise ValueError("cert_file and key_file go together")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_read(ca_file),
        private_key=_read(key_file),
        certificate_chain=_read(cert_file),
    )
    return grpc.aio.secure_channel(address, credentials, options=options)


_SETTING_KEYS = {
    "temperature", "top_p", "max_tokens", "stop", "seed", "tool_choice",
    "parallel_tool_calls", "response_format", "extra",
}


def generation_settings(
    settings: Mapping[str, Any] | pb.GenerationSettings | None,
) -> pb.GenerationSettings | None:
    """A run's generation settings from a dict: ``temperature``, ``top_p``,
    ``max_tokens``, ``stop`` (a list), ``seed``, ``tool_choice`` (``auto``,
    ``none``, ``required`` or a tool name), ``parallel_tool_calls``,
    ``response_format`` (``{"schema": {...}, "name": ..., "strict": ...,
    "retries": ...}``) and ``extra`` (provider-specific body fields, a dict).
    The server checks the values; an unknown key is a ``ValueError`` here."""
    if settings is None or isinstance(settings, pb.GenerationSettings):
        return settings
    unknown = set(settings) - _SETTING_KEYS
    if unknown:
        raise ValueError(f"settings: unknown keys {sorted(unknown)} (known: {sorted(_SETTING_KEYS)})")
    out = pb.GenerationSettings()
    for key in ("temperature", "top_p"):
        if settings.get(key) is not None:
            setattr(out, key, float(settings[key]))
    for key in ("max_tokens", "seed"):
        if settings.get(key) is not None:
            setattr(out, key, int(settings[key]))
    if settings.get("parallel_tool_calls") is not None:
        out.parallel_tool_calls = bool(settings["parallel_tool_calls"])
    out.stop.extend(settings.get("stop") or [])
    out.tool_choice = settings.get("tool_choice") or ""
    fmt = settings.get("response_format")
    if fmt is not None:
        out.response_format.CopyFrom(
            pb.ResponseFormat(
                schema_json=json.dumps(fmt["schema"]),
                name=fmt.get("name", ""),
                strict=bool(fmt.get("strict", False)),
                retries=int(fmt.get("retries", 0)),
            )
        )
    if settings.get("extra"):
        out.extra_body_json = json.dumps(settings["extra"])
    return out


class Orchestrator:
    """A client of ``baton.v1.Orchestrator``.

    >>> async with Orchestrator("127.0.0.1:50051") as baton:
    ...     async for event in baton.run_agent("researcher", "tides", max_depth=2):
    ...         print(event.context_id, kind(event))
    """

    def __init__(
        self,
        target: str = "127.0.0.1:50051",
        *,
        channel: grpc.aio.Channel | None = None,
        api_key: str | None = None,
        tls: bool | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        cert_file: str | os.PathLike[str] | None = None,
        key_file: str | os.PathLike[str] | None = None,
    ) -> None:
        """``api_key``: sent as ``authorization: Bearer <key>`` with every call
        (an orchestrator with ``auth.api_keys_file`` requires a known key).

        TLS: an ``https://`` target (or ``tls=True``) is checked against the
        system's roots, or ``ca_file``; ``cert_file``/``key_file`` present a
        client certificate."""
        self._channel = channel or _channel(
            target, tls=tls, ca_file=ca_file, cert_file=cert_file, key_file=key_file
        )
        self._auth: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {api_key}"),) if api_key else ()
        self._stub = orch_grpc.OrchestratorStub(self._channel)

    async def __aenter__(self) -> Orchestrator:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    def run_agent(
        self,
        agent: str,
        input: str = "",
        *,
        history: Iterable[pb.Message] = (),
        run_context: Mapping[str, Any] | None = None,
        default_model: str = "",
        max_depth: int | None = None,
        max_turns: int = 0,
        run_timeout: float | None = None,
        approval_mode: str = "ask",
        filter: events_pb.EventFilter | None = None,
        traceparent: str | None = None,
        timeout: float | None = None,
        detach: bool = False,
        settings: Mapping[str, Any] | pb.GenerationSettings | None = None,
        budget_tokens: int | None = None,
        budget_cost: float | None = None,
        conversation_id: str = "",
        new_conversation: bool = False,
        conversation_busy: str | None = None,
        conversation_ttl: float | None = None,
        webhooks: Iterable[Mapping[str, Any] | webhooks_pb.RunWebhook] = (),
    ) -> RunStream:
        """Starts ``agent`` (or a group) on ``input``; returns its events.
        ``max_depth`` is how deep agents may call agents in this run (the
        request's ``limits.max_depth``; root is 0, the server's default 4;
        a call that would go deeper is a tool error the model sees), not
        what the stream shows: that is ``filter``
        (``EventFilter(max_depth=0)``: only the top-level conversation).
        A detached run (``detach``) outlives the stream: leaving it does not cancel
        the run (follow it with ``watch``, find it with ``list_runs``).
        ``settings`` are the run's generation settings, over every agent's
        and provider's own (see :func:`generation_settings`).
        ``budget_tokens`` and ``budget_cost`` bound what the whole run may
        spend on models (the request's ``limits.budget``).

        ``conversation_id`` continues a conversation: the run begins with
        its messages, then ``input``, and appends what it added when it
        ends (no ``history`` with it). ``new_conversation`` starts one, with
        the id ``conversation_id`` or, empty, one Baton makes (the stream's
        ``conversation_id`` says it once ``run_started`` was read).
        ``conversation_busy``: ``"wait"`` (the server's default) for the
        conversation's running run to end, or ``"refuse"`` (``Aborted``);
        ``conversation_ttl``: seconds it is kept after its last use.
        :meth:`conversation` does all this for you.

        ``webhooks``: the run's own webhooks (docs/webhooks.md), each
        ``{"url", "events", "secret"}`` (a ``whsec_`` secret of yours)."""
        if conversation_busy is not None and conversation_busy not in _BUSY:
            raise ValueError(f"conversation_busy: {conversation_busy!r} is not one of {sorted(_BUSY)}")
        request = pb.RunAgentRequest(
            agent=agent,
            input=input,
            history=list(history),
            run_context_json=json.dumps(run_context) if run_context is not None else "",
            default_model=default_model,
            limits=self._limits(max_depth, max_turns, run_timeout, budget_tokens, budget_cost),
            approval_mode=self._approval_mode(approval_mode),
            filter=filter,
            detach=detach,
            settings=generation_settings(settings),
            conversation_id=conversation_id,
            new_conversation=new_conversation,
            conversation_busy=_BUSY.get(conversation_busy or "", pb.CONVERSATION_BUSY_UNSPECIFIED),
            webhooks=_run_webhooks(webhooks),
        )
        if conversation_ttl is not None:
            request.conversation_ttl.CopyFrom(_duration(conversation_ttl))
        return RunStream(
            self._stub.RunAgent(request, timeout=timeout, metadata=self._md(traceparent)),
            self._watcher(filter),
        )

    def run_pipeline(
        self,
        steps: Iterable[Mapping[str, Any] | pb.PipelineStep],
        *,
        name: str = "",
        mode: str = "sequential",
        policy: str = "fail",
        max_concurrency: int | None = None,
        initial_slots: Mapping[str, str] | None = None,
        keep_context: bool = False,
        max_depth: int | None = None,
        approval_mode: str = "ask",
        filter: events_pb.EventFilter | None = None,
        traceparent: str | None = None,
        timeout: float | None = None,
        detach: bool = False,
        default_model: str = "",
        max_turns: int = 0,
        run_timeout: float | None = None,
        settings: Mapping[str, Any] | pb.GenerationSettings | None = None,
        budget_tokens: int | None = None,
        budget_cost: float | None = None,
        webhooks: Iterable[Mapping[str, Any] | webhooks_pb.RunWebhook] = (),
    ) -> RunStream:
        """Starts a pipeline. Steps are dicts with the fields of
        ``PipelineStep`` (``timeout`` in seconds) or the messages themselves.
        ``settings`` and ``webhooks``: as in :meth:`run_agent`."""
        if mode not in _MODES:
            raise ValueError(f"mode: {mode!r} is not one of {sorted(_MODES)}")
        if policy not in _POLICIES:
            raise ValueError(f"policy: {policy!r} is not one of {sorted(_POLICIES)}")
        spec = pb.PipelineSpec(
            name=name,
            steps=[self._step(s) for s in steps],
            mode=_MODES[mode],
            policy=_POLICIES[policy],
        )
        if max_concurrency is not None:
            spec.max_concurrency = max_concurrency
        request = pb.RunPipelineRequest(
            pipeline=spec,
            initial_slots=dict(initial_slots or {}),
            keep_context=keep_context,
            default_model=default_model,
            limits=self._limits(max_depth, max_turns, run_timeout, budget_tokens, budget_cost),
            approval_mode=self._approval_mode(approval_mode),
            filter=filter,
            detach=detach,
            settings=generation_settings(settings),
            webhooks=_run_webhooks(webhooks),
        )
        return RunStream(
            self._stub.RunPipeline(request, timeout=timeout, metadata=self._md(traceparent)),
            self._watcher(filter),
        )

    def fork_run(
        self,
        run_id: str,
        at_seq: int,
        *,
        model_turn: tuple[str, Iterable[tuple[str, Mapping[str, Any]]]] | None = None,
        tool_result: str | None = None,
        tool_error: bool = False,
        approval: tuple[bool, str] | None = None,
        input: str | None = None,
        step_output: str | None = None,
        run_context: Mapping[str, Any] | None = None,
        filter: events_pb.EventFilter | None = None,
        timeout: float | None = None,
        detach: bool = False,
    ) -> RunStream:
        """Forks run ``run_id`` at seq ``at_seq`` (ForkRun): everything
        before it is replayed from the run's recording (no model, tool or
        person is asked again; those events come first, ``replayed`` set),
        the point takes at most one edit, then the fork runs live. Edits:
        ``model_turn=(text, [(tool, arguments), ...])``, ``tool_result``
        (with ``tool_error``), ``approval=(approved, reason)``, ``input``,
        ``step_output``, or ``run_context`` (at any point: the point as
        recorded, then this run context); none: the point is done again
        (a retry)."""
        given = [e for e in (model_turn, tool_result, approval, input, step_output, run_context) if e is not None]
        if len(given) > 1:
            raise ValueError(
                "edit: give at most one of model_turn, tool_result, approval, input, step_output, run_context"
            )
        edit = None
        if model_turn is not None:
            text, calls = model_turn
            edit = pb.ForkEdit(
                model_turn=pb.ModelTurnEdit(
                    text=text,
                    tool_calls=[
                        events_pb.ToolCall(call_id=str(i + 1), tool=tool, arguments_json=json.dumps(dict(args)))
                        for i, (tool, args) in enumerate(calls)
                    ],
                )
            )
        elif tool_result is not None:
            edit = pb.ForkEdit(tool_result=pb.ToolResultEdit(result=tool_result, is_error=tool_error))
        elif approval is not None:
            edit = pb.ForkEdit(approval=pb.ApprovalEdit(approved=approval[0], reason=approval[1]))
        elif input is not None:
            edit = pb.ForkEdit(input=input)
        elif step_output is not None:
            edit = pb.ForkEdit(step_output=step_output)
        elif run_context is not None:
            edit = pb.ForkEdit(run_context_json=json.dumps(dict(run_context)))
        request = pb.ForkRunRequest(run_id=run_id, at_seq=at_seq, edit=edit, filter=filter, detach=detach)
        return RunStream(
            self._stub.ForkRun(request, timeout=timeout, metadata=self._md(None)),
            self._watcher(filter),
        )

    def replay_run(
        self,
        run_id: str,
        *,
        strict: bool = False,
        filter: events_pb.EventFilter | None = None,
        timeout: float | None = None,
        detach: bool = False,
    ) -> RunStream:
        """Replays the ended run ``run_id`` against today's agents
        (ReplayRun): model calls and calls of tools outside Baton whose
        request matches the recording are answered from it, people's
        answers too. At the first request that differs a ``diverged`` event
        says where and what; then ``strict`` fails the replay, otherwise it
        goes live. The terminal event's ``replay`` counts the calls that
        matched."""
        request = pb.ReplayRunRequest(run_id=run_id, strict=strict, filter=filter, detach=detach)
        return RunStream(
            self._stub.ReplayRun(request, timeout=timeout, metadata=self._md(None)),
            self._watcher(filter),
        )

    def watch(self, run_id: str, *, after_seq: int = 0, timeout: float | None = None) -> RunStream:
        """Re-attaches to a run's events after ``after_seq`` (WatchRun)."""
        request = pb.WatchRunRequest(run_id=run_id, after_seq=after_seq)
        stream = RunStream(self._stub.WatchRun(request, timeout=timeout, metadata=self._md(None)), self._watcher(None))
        stream.run_id, stream.last_seq = run_id, after_seq
        return stream

    def _watcher(self, filter: events_pb.EventFilter | None) -> Any:
        """A new WatchRun call of a run after a seq, with ``filter``."""

        def watch(run_id: str, after_seq: int) -> grpc.aio.UnaryStreamCall:
            request = pb.WatchRunRequest(run_id=run_id, after_seq=after_seq, filter=filter)
            return self._stub.WatchRun(request, metadata=self._md(None))

        return watch

    async def resolve_approval(
        self, run_id: str, approval_id: str, approved: bool, reason: str = "", *, timeout: float | None = None
    ) -> None:
        """Grants or denies a pending approval."""
        request = pb.ResolveApprovalRequest(run_id=run_id, approval_id=approval_id, approved=approved, reason=reason)
        await self._unary(self._stub.ResolveApproval, request, timeout)

    async def submit_input(self, run_id: str, input_id: str, input: str, *, timeout: float | None = None) -> None:
        """Answers a pending input request."""
        await self._unary(
            self._stub.SubmitInput, pb.SubmitInputRequest(run_id=run_id, input_id=input_id, input=input), timeout
        )

    async def cancel(self, run_id: str, reason: str = "", *, timeout: float | None = None) -> int:
        """Cancels a run; returns its status (a ``RunStatus`` value)."""
        response = await self._unary(self._stub.CancelRun, pb.CancelRunRequest(run_id=run_id, reason=reason), timeout)
        return response.status

    async def get_run(self, run_id: str, *, timeout: float | None = None) -> pb.GetRunResponse:
        """A run's status and result."""
        return await self._unary(self._stub.GetRun, pb.GetRunRequest(run_id=run_id), timeout)

    async def list_runs(
        self,
        status: int = 0,
        *,
        page_size: int = 0,
        page_token: str = "",
        waiting: bool = False,
        timeout: float | None = None,
    ) -> pb.ListRunsResponse:
        """A page of the caller's runs, newest first (``status`` 0: every
        status; ``waiting``: only runs waiting for a person, each saying on
        what in ``waiting_for``); pass ``next_page_token`` back as
        ``page_token`` until it is empty."""
        request = pb.ListRunsRequest(
            status=status, page_size=page_size, page_token=page_token, waiting=waiting
        )
        return await self._unary(self._stub.ListRuns, request, timeout)

    async def list_agents(self, *, timeout: float | None = None) -> pb.ListAgentsResponse:
        """The agents and groups the server runs."""
        return await self._unary(self._stub.ListAgents, pb.ListAgentsRequest(), timeout)

    def conversation(
        self,
        agent: str,
        id: str | None = None,
        *,
        new: bool | None = None,
        busy: str | None = None,
        ttl: float | None = None,
    ) -> Conversation:
        """A conversation with ``agent`` (or a group): each
        :meth:`Conversation.send` runs the agent on the conversation so far
        and a new message. Without ``id`` the first ``send`` starts a new
        conversation (Baton names it); with the ``id`` of an existing one it
        continues that; ``new=True`` with an ``id`` starts one of that id.
        ``busy`` and ``ttl``: each send's ``conversation_busy`` and
        ``conversation_ttl`` (see :meth:`run_agent`)."""
        return Conversation(self, agent, id, new=new, busy=busy, ttl=ttl)

    async def get_conversation(
        self,
        conversation_id: str,
        *,
        page_size: int = 0,
        page_token: str = "",
        last: int = 0,
        timeout: float | None = None,
    ) -> pb.Conversation:
        """A conversation (GetConversation): its title, labels and counts,
        its runs and a page of its messages, oldest first (``last``: the
        first page starts that many messages from the end). Pass
        ``next_page_token`` back as ``page_token`` until it is empty."""
        request = pb.GetConversationRequest(
            conversation_id=conversation_id, page_size=page_size, page_token=page_token, last=last
        )
        return await self._unary(self._stub.GetConversation, request, timeout)

    async def list_conversations(
        self, *, page_size: int = 0, page_token: str = "", timeout: float | None = None
    ) -> pb.ListConversationsResponse:
        """A page of the caller's conversations, most recently used first
        (without their messages); pass ``next_page_token`` back as
        ``page_token`` until it is empty."""
        request = pb.ListConversationsRequest(page_size=page_size, page_token=page_token)
        return await self._unary(self._stub.ListConversations, request, timeout)

    async def update_conversation(
        self,
        conversation_id: str,
        *,
        title: str | None = None,
        labels: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> pb.Conversation:
        """Sets a conversation's ``title`` (``None`` keeps it) and
        ``labels`` (merged into its labels; an empty value removes one)."""
        request = pb.UpdateConversationRequest(conversation_id=conversation_id, labels=dict(labels or {}))
        if title is not None:
            request.title = title
        return await self._unary(self._stub.UpdateConversation, request, timeout)

    async def delete_conversation(self, conversation_id: str, *, timeout: float | None = None) -> int:
        """Deletes a conversation (cancelling a run of it still going), its
        messages and its runs' histories; returns how many runs' histories
        were deleted."""
        request = pb.DeleteConversationRequest(conversation_id=conversation_id)
        return (await self._unary(self._stub.DeleteConversation, request, timeout)).runs_deleted

    async def run_experiment(
        self,
        dataset: str | os.PathLike[str],
        *,
        agent: str = "",
        name: str = "",
        repeat: int = 0,
        concurrency: int = 0,
        default_model: str = "",
        budget_tokens: int = 0,
        budget_cost: float = 0.0,
        on_case: Any = None,
        timeout: float | None = None,
    ) -> evals_pb.Experiment:
        """Runs a dataset file (JSON Lines, or YAML when it ends in
        ``.yaml``/``.yml``) as an experiment (RunExperiment) and returns its
        record once it ends; ``on_case`` is called with each
        :class:`CaseResult` as it is scored. Cancelling the call (or its
        task) cancels the experiment's runs still going; the experiment
        keeps the cases that finished. A bad dataset raises
        :class:`InvalidArgument` naming the file, line and field."""
        path = Path(dataset)
        request = evals_pb.RunExperimentRequest(
            dataset=path.read_text(),
            dataset_name=str(path),
            agent=agent,
            name=name,
            repeat=repeat,
            concurrency=concurrency,
            default_model=default_model,
        )
        if budget_tokens or budget_cost:
            request.budget.CopyFrom(evals_pb.ExperimentBudget(tokens=budget_tokens, cost=budget_cost))
        call = self._stub.RunExperiment(request, timeout=timeout, metadata=self._md(None))
        try:
            async for event in call:
                which = event.WhichOneof("event")
                if which == "case_scored" and on_case is not None:
                    on_case(event.case_scored)
                elif which == "ended":
                    return event.ended
        except grpc.aio.AioRpcError as e:
            raise from_rpc_error(e) from None
        finally:
            call.cancel()
        raise RuntimeError("the experiment's stream ended before the experiment did")

    async def create_webhook(
        self,
        url: str,
        *,
        events: Iterable[str] = (),
        description: str = "",
        secret: str = "",
        timeout: float | None = None,
    ) -> webhooks_pb.CreateWebhookResponse:
        """Subscribes ``url`` to what happens to the caller's tenant's runs
        (CreateWebhook); the answer holds its secret (``whsec_…``, Baton's
        unless ``secret`` is given), shown this once."""
        request = webhooks_pb.CreateWebhookRequest(
            url=url, events=list(events), description=description, secret=secret
        )
        return await self._unary(self._stub.CreateWebhook, request, timeout)

    async def list_webhooks(self, *, timeout: float | None = None) -> list[webhooks_pb.Webhook]:
        """The caller's tenant's webhooks (without their secrets)."""
        answer = await self._unary(self._stub.ListWebhooks, webhooks_pb.ListWebhooksRequest(), timeout)
        return list(answer.webhooks)

    async def delete_webhook(self, webhook_id: str, *, timeout: float | None = None) -> None:
        """Deletes a webhook: nothing more is delivered to it."""
        await self._unary(
            self._stub.DeleteWebhook, webhooks_pb.DeleteWebhookRequest(webhook_id=webhook_id), timeout
        )

    async def rotate_webhook_secret(
        self, webhook_id: str, *, previous_valid_for: float | None = None, timeout: float | None = None
    ) -> webhooks_pb.RotateWebhookSecretResponse:
        """A new secret for a webhook; the previous one signs too for
        ``previous_valid_for`` seconds (None: the server's overlap)."""
        request = webhooks_pb.RotateWebhookSecretRequest(webhook_id=webhook_id)
        if previous_valid_for is not None:
            request.previous_valid_for.CopyFrom(_duration(previous_valid_for))
        return await self._unary(self._stub.RotateWebhookSecret, request, timeout)

    async def list_dead_letters(
        self, *, page_size: int = 0, timeout: float | None = None
    ) -> list[webhooks_pb.DeadLetter]:
        """Deliveries of the caller's tenant that kept failing, newest first."""
        answer = await self._unary(
            self._stub.ListDeadLetters, webhooks_pb.ListDeadLettersRequest(page_size=page_size), timeout
        )
        return list(answer.dead_letters)

    async def redeliver_dead_letter(self, delivery_id: str, *, timeout: float | None = None) -> None:
        """Delivers a dead letter again, with the same ``webhook-id``."""
        await self._unary(
            self._stub.RedeliverDeadLetter,
            webhooks_pb.RedeliverDeadLetterRequest(delivery_id=delivery_id),
            timeout,
        )

    async def create_schedule(
        self,
        agent: str = "",
        input: str = "",
        *,
        pipeline: pb.RunPipelineRequest | None = None,
        cron: str = "",
        time_zone: str = "",
        every: float | None = None,
        end_at: float | None = None,
        overlap: str = "skip",
        missed: str = "skip",
        description: str = "",
        paused: bool = False,
        timeout: float | None = None,
    ) -> pb.Schedule:
        """Makes a schedule (docs/schedules.md): a detached run of ``agent``
        with ``input`` (or ``pipeline``) at each tick of ``cron`` in
        ``time_zone``, or every ``every`` seconds, until ``end_at`` (a Unix
        time); ``overlap``: ``skip``, ``queue_one`` or ``allow``;
        ``missed``: ``skip`` or ``run_once``."""
        request = pb.CreateScheduleRequest(
            description=description,
            cron=cron,
            time_zone=time_zone,
            overlap=pb.ScheduleOverlap.Value("SCHEDULE_OVERLAP_" + overlap.upper()),
            missed=pb.ScheduleMissed.Value("SCHEDULE_MISSED_" + missed.upper()),
            paused=paused,
        )
        if pipeline is not None:
            request.pipeline.CopyFrom(pipeline)
        else:
            request.agent.CopyFrom(pb.RunAgentRequest(agent=agent, input=input))
        if every is not None:
            request.interval.CopyFrom(_duration(every))
        if end_at is not None:
            request.end_at.FromNanoseconds(int(end_at * 1e9))
        return await self._unary(self._stub.CreateSchedule, request, timeout)

    async def list_schedules(self, *, timeout: float | None = None) -> list[pb.Schedule]:
        """The caller's tenant's schedules, the agents file's first."""
        answer = await self._unary(self._stub.ListSchedules, pb.ListSchedulesRequest(), timeout)
        return list(answer.schedules)

    async def get_schedule(self, schedule_id: str, *, timeout: float | None = None) -> pb.Schedule:
        """A schedule with its next fire times and recent ticks."""
        return await self._unary(
            self._stub.GetSchedule, pb.GetScheduleRequest(schedule_id=schedule_id), timeout
        )

    async def pause_schedule(self, schedule_id: str, *, timeout: float | None = None) -> pb.Schedule:
        """Stops a schedule firing until it is resumed."""
        return await self._unary(
            self._stub.PauseSchedule, pb.PauseScheduleRequest(schedule_id=schedule_id), timeout
        )

    async def resume_schedule(self, schedule_id: str, *, timeout: float | None = None) -> pb.Schedule:
        """Fires a paused schedule again, from its next tick."""
        return await self._unary(
            self._stub.ResumeSchedule, pb.ResumeScheduleRequest(schedule_id=schedule_id), timeout
        )

    async def delete_schedule(self, schedule_id: str, *, timeout: float | None = None) -> None:
        """Deletes a schedule; the runs it started go on."""
        await self._unary(
            self._stub.DeleteSchedule, pb.DeleteScheduleRequest(schedule_id=schedule_id), timeout
        )

    async def get_experiment(self, experiment: str, *, timeout: float | None = None) -> evals_pb.Experiment:
        """An experiment (by id or name) with its cases, scores and reasons."""
        request = evals_pb.GetExperimentRequest(experiment=experiment)
        return await self._unary(self._stub.GetExperiment, request, timeout)

    async def cancel_experiment(self, experiment: str, *, timeout: float | None = None) -> evals_pb.Experiment:
        """Stops a running experiment (by id or name) on whichever replica
        runs it (CancelExperiment): its runs still going are cancelled and
        the cases that finished are kept; returns its record once it says
        CANCELLED (as it stands after 10 s when its replica is slow to say
        so; COMPLETED when it ended first).
        One that is not running raises :class:`FailedPrecondition`."""
        request = evals_pb.CancelExperimentRequest(experiment=experiment)
        return await self._unary(self._stub.CancelExperiment, request, timeout)

    async def list_experiments(
        self, *, page_size: int = 0, page_token: str = "", timeout: float | None = None
    ) -> evals_pb.ListExperimentsResponse:
        """A page of the caller's experiments, newest first, without their
        cases; pass ``next_page_token`` back as ``page_token``."""
        request = evals_pb.ListExperimentsRequest(page_size=page_size, page_token=page_token)
        return await self._unary(self._stub.ListExperiments, request, timeout)

    async def compare_experiments(
        self, baseline: str, candidate: str, *, alpha: float = 0.0, timeout: float | None = None
    ) -> evals_pb.ExperimentComparison:
        """Two experiments compared case by case; ``regressed`` says whether
        the candidate regressed a case beyond noise."""
        request = evals_pb.CompareExperimentsRequest(baseline=baseline, candidate=candidate, alpha=alpha)
        return await self._unary(self._stub.CompareExperiments, request, timeout)

    async def save_case(self, run_id: str, *, inline_recording: bool = False, timeout: float | None = None) -> dict:
        """A dataset case made of an ended run (SaveCase), as a dict: write
        ``json.dumps(case)`` as a line of a JSON Lines dataset."""
        request = evals_pb.SaveCaseRequest(run_id=run_id, inline_recording=inline_recording)
        return json.loads((await self._unary(self._stub.SaveCase, request, timeout)).case_json)

    def _md(self, traceparent: str | None) -> tuple[tuple[str, str], ...] | None:
        md = self._auth + (_metadata(traceparent) or ())
        return md or None

    async def _unary(self, method: Any, request: Any, timeout: float | None) -> Any:
        return await _call(method, request, timeout, self._md(None))

    @staticmethod
    def _limits(
        max_depth: int | None,
        max_turns: int,
        run_timeout: float | None,
        budget_tokens: int | None = None,
        budget_cost: float | None = None,
    ) -> pb.RunLimits:
        limits = pb.RunLimits(max_turns=max_turns)
        if max_depth is not None:
            limits.max_depth = max_depth
        if run_timeout is not None:
            limits.run_timeout.CopyFrom(_duration(run_timeout))
        if budget_tokens is not None:
            limits.budget.tokens = budget_tokens
        if budget_cost is not None:
            limits.budget.cost = budget_cost
        return limits

    @staticmethod
    def _approval_mode(mode: str) -> int:
        if mode not in _APPROVAL_MODES:
            raise ValueError(f"approval_mode: {mode!r} is not one of {sorted(_APPROVAL_MODES)}")
        return _APPROVAL_MODES[mode]

    @staticmethod
    def _step(step: Mapping[str, Any] | pb.PipelineStep) -> pb.PipelineStep:
        if isinstance(step, pb.PipelineStep):
            return step
        fields = dict(step)
        timeout = fields.pop("timeout", None)
        message = pb.PipelineStep(**fields)
        if timeout is not None:
            message.timeout.CopyFrom(_duration(timeout))
        return message


class Conversation:
    """A conversation with an agent (:meth:`Orchestrator.conversation`).

    >>> chat = baton.conversation("assistant")
    >>> await chat.send("hello").collect()     # starts it
    >>> await chat.send("and again").collect() # continues it
    >>> [m.message.content for m in await chat.history()]

    ``id`` is ``None`` until the first message's run has started (its
    ``run_started`` event was read) when Baton names the conversation."""

    def __init__(
        self,
        orchestrator: Orchestrator,
        agent: str,
        id: str | None = None,
        *,
        new: bool | None = None,
        busy: str | None = None,
        ttl: float | None = None,
    ) -> None:
        if busy is not None and busy not in _BUSY:
            raise ValueError(f"busy: {busy!r} is not one of {sorted(_BUSY)}")
        if id is None and new is False:
            raise ValueError("new: a conversation without an id is a new one")
        self._orchestrator = orchestrator
        #: The agent (or group) each message is sent to.
        self.agent = agent
        #: The conversation's id; ``None`` until Baton named it.
        self.id = id
        self.busy = busy
        self.ttl = ttl
        # Whether the next send starts the conversation, and the stream of
        # the send that does while its run has not started yet.
        self._create = id is None if new is None else new
        self._starting: _ConversationStream | None = None

    def send(
        self, text: str, *, busy: str | None = None, ttl: float | None = None, **options: Any
    ) -> RunStream:
        """Runs the agent on the conversation so far and ``text``; returns
        the run's events (a :class:`RunStream`, as
        :meth:`Orchestrator.run_agent` does, whose other keyword arguments
        ``options`` are: ``max_depth``, ``settings``, ``timeout``, …). The
        run appends ``text`` and its answer to the conversation when it
        ends. While another run of the conversation goes on the message
        waits for it, or, with ``busy="refuse"``, fails ``Aborted``.

        The first message of a new conversation starts it: read its stream
        (at least to ``run_started``) before sending the next."""
        if self._create and self._starting is not None:
            raise RuntimeError(
                "the conversation's first message has not started its run yet: "
                "read its stream (to run_started) before sending the next"
            )
        busy = busy if busy is not None else self.busy
        ttl = ttl if ttl is not None else self.ttl
        plain = self._orchestrator.run_agent(
            self.agent,
            text,
            conversation_id=self.id or "",
            new_conversation=self._create,
            conversation_busy=busy,
            conversation_ttl=ttl,
            **options,
        )
        stream = _ConversationStream(plain._call, plain._reattach, self)
        if self._create:
            self._starting = stream
        return stream

    def _started(self, stream: _ConversationStream, conversation_id: str) -> None:
        if stream is self._starting:
            self.id, self._create, self._starting = conversation_id, False, None

    def _failed(self, stream: _ConversationStream) -> None:
        # The first message failed before its run started: the next send
        # starts the conversation again.
        if stream is self._starting:
            self._starting = None

    def _need_id(self) -> str:
        if self.id is None:
            raise RuntimeError("the conversation has no id yet: send its first message (and read to run_started)")
        return self.id

    async def history(
        self, *, last: int = 0, page_size: int = 0, timeout: float | None = None
    ) -> list[pb.ConversationMessage]:
        """The conversation's messages, oldest first, every page followed
        (``last``: only the newest ``last``). Each has its ``message``
        (``role``, ``content``), the ``run_id`` that added it, its
        ``index``, and ``interrupted`` for a run that failed or was
        cancelled. ``timeout`` bounds each page."""
        conversation_id = self._need_id()
        page = await self._orchestrator.get_conversation(
            conversation_id, page_size=page_size, last=last, timeout=timeout
        )
        messages = list(page.messages)
        while page.next_page_token:
            page = await self._orchestrator.get_conversation(
                conversation_id, page_size=page_size, page_token=page.next_page_token, timeout=timeout
            )
            messages.extend(page.messages)
        return messages

    async def get(self, *, timeout: float | None = None) -> pb.Conversation:
        """The conversation as GetConversation returns it: its title,
        labels, counts, expiry and runs, and its first page of messages."""
        return await self._orchestrator.get_conversation(self._need_id(), timeout=timeout)

    async def update(
        self,
        *,
        title: str | None = None,
        labels: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> pb.Conversation:
        """Sets its ``title`` and ``labels`` (see
        :meth:`Orchestrator.update_conversation`)."""
        return await self._orchestrator.update_conversation(
            self._need_id(), title=title, labels=labels, timeout=timeout
        )

    async def delete(self, *, timeout: float | None = None) -> int:
        """Deletes it (see :meth:`Orchestrator.delete_conversation`)."""
        return await self._orchestrator.delete_conversation(self._need_id(), timeout=timeout)


class _ConversationStream(RunStream):
    """A conversation's run: tells the conversation its id once the run
    started (or that it failed before)."""

    def __init__(self, call: grpc.aio.UnaryStreamCall, reattach: Any, conversation: Conversation) -> None:
        super().__init__(call, reattach)
        self._conversation = conversation

    async def __anext__(self) -> RunEvent:
        try:
            event = await super().__anext__()
        except BaseException:  # the end, an error, a cancellation
            self._conversation._failed(self)
            raise
        if self.conversation_id is not None:
            self._conversation._started(self, self.conversation_id)
        return event

    def cancel(self) -> None:
        self._conversation._failed(self)
        super().cancel()


class Store:
    """A client of ``baton.v1.ContextStore``: trace-scoped slots."""

    def __init__(
        self,
        target: str = "127.0.0.1:50052",
        *,
        channel: grpc.aio.Channel | None = None,
        api_key: str | None = None,
        tls: bool | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        cert_file: str | os.PathLike[str] | None = None,
        key_file: str | os.PathLike[str] | None = None,
    ) -> None:
        """``api_key``: sent as ``authorization: Bearer <key>`` with every call.
        A store authenticates every call unless it runs with
        ``auth.mode = "none"`` (``baton up``); a client API key reaches the
        slots of its own tenant only. TLS as for :class:`Orchestrator`."""
        self._channel = channel or _channel(
            target, tls=tls, ca_file=ca_file, cert_file=cert_file, key_file=key_file
        )
        self._md: tuple[tuple[str, str], ...] | None = (
            (("authorization", f"Bearer {api_key}"),) if api_key else None
        )
        self._stub = store_grpc.ContextStoreStub(self._channel)

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    async def put(
        self,
        trace_id: str,
        key: str,
        value: bytes | str,
        *,
        content_type: str = "",
        ttl: float | None = None,
        expected_version: int | None = None,
        timeout: float | None = None,
    ) -> store_pb.PutResponse:
        """Writes a slot (``str`` as UTF-8 text); ``expected_version`` makes it
        a compare-and-swap (0: only if absent). Returns version and expiry."""
        if isinstance(value, str):
            value, content_type = value.encode(), content_type or "text/plain; charset=utf-8"
        request = store_pb.PutRequest(trace_id=trace_id, key=key, value=value, content_type=content_type)
        if ttl is not None:
            request.ttl.CopyFrom(_duration(ttl))
        if expected_version is not None:
            request.expected_version = expected_version
        return await _call(self._stub.Put, request, timeout, self._md)

    async def put_many(
        self,
        trace_id: str,
        entries: Mapping[str, bytes | str] | Iterable[Mapping[str, Any]],
        *,
        timeout: float | None = None,
    ) -> list[store_pb.PutResponse]:
        """Writes several slots of a trace in one call, all or none (up to
        1000). ``entries`` is a ``{key: value}`` mapping, or dicts with
        ``key``, ``value`` and optionally ``content_type``, ``ttl`` (seconds)
        and ``expected_version``; ``str`` values are UTF-8 text as in
        :meth:`put`. Returns each entry's version and expiry, in order; an
        error's ``field`` names the entry (``entries[2].expected_version``)."""
        if isinstance(entries, Mapping):
            entries = [{"key": k, "value": v} for k, v in entries.items()]
        request = store_pb.PutManyRequest(trace_id=trace_id)
        for e in entries:
            value, content_type = e["value"], e.get("content_type", "")
            if isinstance(value, str):
                value, content_type = value.encode(), content_type or "text/plain; charset=utf-8"
            entry = request.entries.add(key=e["key"], value=value, content_type=content_type)
            if e.get("ttl") is not None:
                entry.ttl.CopyFrom(_duration(e["ttl"]))
            if e.get("expected_version") is not None:
                entry.expected_version = e["expected_version"]
        return list((await _call(self._stub.PutMany, request, timeout, self._md)).written)

    async def delete_many(
        self,
        trace_id: str,
        keys: Iterable[str] | None = None,
        *,
        prefix: str = "",
        timeout: float | None = None,
    ) -> int:
        """Deletes the listed ``keys`` (absent ones are skipped; up to 1000),
        or every slot under a non-empty ``prefix``, in one call; returns how
        many live slots it removed."""
        request = store_pb.DeleteManyRequest(trace_id=trace_id, keys=list(keys or []), prefix=prefix)
        return (await _call(self._stub.DeleteMany, request, timeout, self._md)).deleted

    async def get(self, trace_id: str, key: str, *, timeout: float | None = None) -> store_pb.GetResponse:
        """A live slot: ``value`` and ``slot`` (version, content type, expiry)."""
        return await _call(self._stub.Get, store_pb.GetRequest(trace_id=trace_id, key=key), timeout, self._md)

    async def list(self, trace_id: str, prefix: str = "", *, timeout: float | None = None) -> store_pb.ListResponse:
        """The trace's live slots under ``prefix`` (every page, followed), and
        its usage as of the last page. ``timeout`` bounds each page."""
        listing = await self.list_page(trace_id, prefix, timeout=timeout)
        token = listing.next_page_token
        while token:
            page = await self.list_page(trace_id, prefix, page_token=token, timeout=timeout)
            listing.slots.extend(page.slots)
            listing.used_bytes, listing.used_keys = page.used_bytes, page.used_keys
            token = page.next_page_token
        listing.next_page_token = ""
        return listing

    async def list_page(
        self,
        trace_id: str,
        prefix: str = "",
        *,
        page_size: int = 0,
        page_token: str = "",
        timeout: float | None = None,
    ) -> store_pb.ListResponse:
        """One page of the trace's slots under ``prefix``: at most ``page_size``
        (0: the server's default), continuing the listing ``page_token`` came
        from; ``next_page_token`` is empty on the last page."""
        request = store_pb.ListRequest(
            trace_id=trace_id, prefix=prefix, page_size=page_size, page_token=page_token
        )
        return await _call(self._stub.List, request, timeout, self._md)

    async def delete(
        self, trace_id: str, key: str, *, expected_version: int | None = None, timeout: float | None = None
    ) -> int:
        """Deletes a slot (only at ``expected_version`` when given)."""
        request = store_pb.DeleteRequest(trace_id=trace_id, key=key)
        if expected_version is not None:
            request.expected_version = expected_version
        return (await _call(self._stub.Delete, request, timeout, self._md)).version

    async def clear(self, trace_id: str, *, timeout: float | None = None) -> int:
        """Deletes every slot of the trace; returns how many live slots it removed."""
        request = store_pb.ClearRequest(trace_id=trace_id)
        return (await _call(self._stub.Clear, request, timeout, self._md)).deleted

    async def watch(
        self, trace_id: str, prefix: str = "", *, timeout: float | None = None
    ) -> AsyncIterator[store_pb.WatchResponse]:
        """The trace's changes from now on, as they happen."""
        call = self._stub.Watch(
            store_pb.WatchRequest(trace_id=trace_id, prefix=prefix), timeout=timeout, metadata=self._md
        )
        try:
            async for change in call:
                yield change
        except grpc.aio.AioRpcError as e:
            raise from_rpc_error(e) from None
        finally:
            call.cancel()
