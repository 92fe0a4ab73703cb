"""Conversations (Orchestrator.conversation) against the real `baton up`
binary: its example agents for the conversation itself (`assistant`
answers "You said: {{input}}"), the test agents for a run that takes its
time."""

from __future__ import annotations

import asyncio

import pytest

from baton.v1 import orchestrator_pb2 as pb
from baton_client import Aborted, AlreadyExists, InvalidArgument, NotFound, kind

from conftest import running


def run(coro):
    return asyncio.run(coro)


def output(events) -> str:
    assert kind(events[-1]) == "run_completed", events[-1]
    return events[-1].run_completed.output


def test_a_conversation_remembers_its_messages_in_order():
    async def main():
        async with running(example_agents=True) as b:
            chat = b.orchestrator.conversation("assistant")
            assert chat.id is None
            run_ids = []
            for n, text in enumerate(["one", "two", "three"]):
                stream = chat.send(text)
                events = await stream.collect()
                assert output(events) == f"You said: {text}"
                started = events[0].run_started
                assert kind(events[0]) == "run_started"
                # Baton named the conversation; each next run begins with
                # the messages before it.
                assert started.conversation_id and chat.id == started.conversation_id
                assert stream.conversation_id == chat.id
                assert started.conversation_messages == 2 * n
                run_ids.append(events[0].run_id)
            history = await chat.history()
            assert [(m.message.role, m.message.content, m.run_id) for m in history] == [
                (pb.ROLE_USER, "one", run_ids[0]),
                (pb.ROLE_ASSISTANT, "You said: one", run_ids[0]),
                (pb.ROLE_USER, "two", run_ids[1]),
                (pb.ROLE_ASSISTANT, "You said: two", run_ids[1]),
                (pb.ROLE_USER, "three", run_ids[2]),
                (pb.ROLE_ASSISTANT, "You said: three", run_ids[2]),
            ]
            assert [m.index for m in history] == list(range(6))
            assert all(m.agent == "assistant" for m in history if m.message.role == pb.ROLE_ASSISTANT)
            # Pages of 4 followed to the end; the newest 2 only.
            assert list(await chat.history(page_size=4)) == history
            assert [m.message.content for m in await chat.history(last=2)] == ["three", "You said: three"]
            # Each run says its conversation.
            assert (await b.orchestrator.get_run(run_ids[1])).conversation_id == chat.id
            info = await chat.get()
            assert info.message_count == 6 and [r.run_id for r in info.runs] == run_ids
            assert all(r.status == pb.RUN_STATUS_COMPLETED for r in info.runs)
            # The same conversation, continued from its id by another object.
            again = b.orchestrator.conversation("assistant", chat.id)
            events = await again.send("four").collect()
            assert events[0].run_started.conversation_messages == 6
            assert [m.message.content for m in await chat.history(last=2)] == ["four", "You said: four"]
            # Deleted: its history is gone, and so is a send to it.
            assert await chat.delete() == 4
            with pytest.raises(NotFound) as gone:
                await chat.history()
            assert gone.value.field == "conversation_id"
            with pytest.raises(NotFound) as gone:
                await again.send("five").collect()
            assert gone.value.field == "conversation_id"

    run(main())


def test_conversations_are_listed_most_recent_first_and_take_a_title():
    async def main():
        async with running(example_agents=True) as b:
            first = b.orchestrator.conversation("assistant", "first-chat", new=True, ttl=3600)
            await first.send("hello").collect()
            assert first.id == "first-chat"
            second = b.orchestrator.conversation("assistant")
            await second.send("hi").collect()
            listed = await b.orchestrator.list_conversations()
            assert [c.id for c in listed.conversations] == [second.id, "first-chat"]
            # A message makes it the most recent.
            await first.send("again").collect()
            listed = await b.orchestrator.list_conversations()
            assert [c.id for c in listed.conversations] == ["first-chat", second.id]
            assert listed.conversations[0].message_count == 4
            assert not listed.conversations[0].messages  # a listing has no messages
            page = await b.orchestrator.list_conversations(page_size=1)
            assert [c.id for c in page.conversations] == ["first-chat"] and page.next_page_token
            page = await b.orchestrator.list_conversations(page_size=1, page_token=page.next_page_token)
            assert [c.id for c in page.conversations] == [second.id] and not page.next_page_token
            # Its ttl: kept an hour after its last use.
            info = await first.get()
            assert info.expires_at.seconds - info.updated_at.seconds == 3600
            # A title and labels; an empty label value removes the label.
            updated = await first.update(title="Greetings", labels={"topic": "hello", "lang": "en"})
            assert updated.title == "Greetings" and dict(updated.labels) == {"topic": "hello", "lang": "en"}
            updated = await b.orchestrator.update_conversation("first-chat", labels={"lang": ""})
            assert updated.title == "Greetings" and dict(updated.labels) == {"topic": "hello"}
            listed = await b.orchestrator.list_conversations()
            assert [(c.id, c.title) for c in listed.conversations] == [("first-chat", "Greetings"), (second.id, "")]
            with pytest.raises(InvalidArgument) as bad:
                await first.update(labels={"Not A Key": "x"})
            assert bad.value.field == "labels"
            # Its id is taken now.
            with pytest.raises(AlreadyExists) as taken:
                await b.orchestrator.conversation("assistant", "first-chat", new=True).send("x").collect()
            assert taken.value.field == "conversation_id"

    run(main())


def test_conversation_requests_that_are_refused_name_their_field():
    async def main():
        async with running(example_agents=True) as b:
            with pytest.raises(NotFound) as unknown:
                await b.orchestrator.conversation("assistant", "no-such-conversation").send("hi").collect()
            assert unknown.value.field == "conversation_id"
            with pytest.raises(NotFound) as unknown:
                await b.orchestrator.delete_conversation("no-such-conversation")
            assert unknown.value.field == "conversation_id"
            with pytest.raises(InvalidArgument) as bad:
                await b.orchestrator.conversation("assistant", "not a valid id!").send("hi").collect()
            assert bad.value.field == "conversation_id"
            chat = b.orchestrator.conversation("assistant")
            await chat.send("hi").collect()
            # The conversation holds the history: a request's own is refused.
            earlier = [pb.Message(role=pb.ROLE_USER, content="earlier")]
            with pytest.raises(InvalidArgument) as bad:
                await chat.send("more", history=earlier).collect()
            assert bad.value.field == "history"
            with pytest.raises(InvalidArgument) as bad:
                await b.orchestrator.run_agent("assistant", "x", conversation_id=chat.id, history=earlier).collect()
            assert bad.value.field == "history"
            # A new conversation refused before it started: the next send
            # starts one.
            fresh = b.orchestrator.conversation("assistant")
            with pytest.raises(InvalidArgument) as bad:
                await fresh.send("x", history=earlier).collect()
            assert bad.value.field == "history" and fresh.id is None
            await fresh.send("x").collect()
            assert fresh.id is not None and fresh.id != chat.id
            # Its id comes with its first run's run_started: a second
            # message before that would start another conversation.
            early = b.orchestrator.conversation("assistant")
            opening = early.send("a")
            with pytest.raises(RuntimeError):
                early.send("b")
            await opening.collect()
            await early.send("b").collect()
            assert [m.message.content for m in await early.history()] == ["a", "You said: a", "b", "You said: b"]
            with pytest.raises(RuntimeError):
                await b.orchestrator.conversation("assistant").history()
            with pytest.raises(ValueError):
                b.orchestrator.conversation("assistant", busy="later")

    run(main())


def test_one_run_at_a_time_a_message_waits_or_is_refused():
    async def main():
        async with running() as b:
            # `slow` takes 30 s: its run holds the conversation.
            chat = b.orchestrator.conversation("slow")
            first = chat.send("first")
            started = await first.__anext__()
            assert kind(started) == "run_started" and chat.id == started.run_started.conversation_id
            with pytest.raises(Aborted) as busy:
                await chat.send("second", busy="refuse").collect()
            assert started.run_id in busy.value.message
            # The default waits for the run before it to end.
            waiting = asyncio.ensure_future(
                b.orchestrator.run_agent("echo", "third", conversation_id=chat.id).collect()
            )
            await asyncio.sleep(0.5)
            assert not waiting.done()
            first.cancel()  # cancels the slow run: the waiting one goes on
            events = await asyncio.wait_for(waiting, 30)
            assert output(events) == "third"
            assert events[0].run_started.conversation_messages == 1
            history = await chat.history()
            assert [(m.message.content, m.interrupted) for m in history] == [
                ("first", True),
                ("third", False),
                ("third", False),
            ]

    run(main())
