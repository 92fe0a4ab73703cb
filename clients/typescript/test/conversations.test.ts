/** Conversations (`Orchestrator.conversation`) against the real `baton up`
 * binary: its example agents for the conversation itself (`assistant`
 * answers "You said: {{input}}"), the test agents for a run that takes its
 * time. */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Aborted, AlreadyExists, InvalidArgument, NotFound, RunEvent, kind, pb } from "../src";
import { Running, startBaton } from "./baton";

let b: Running;
before(async () => {
  b = await startBaton({ exampleAgents: true });
});
after(async () => {
  await b.stop();
});

function output(events: RunEvent[]): string {
  const last = events[events.length - 1].payload;
  assert.ok(last?.$case === "runCompleted", JSON.stringify(last));
  return last.runCompleted.output;
}

function started(e: RunEvent) {
  assert.ok(e.payload?.$case === "runStarted", JSON.stringify(e.payload));
  return e.payload.runStarted;
}

/** A field-naming error of class `cls`, as the client's other tests check them. */
function named(cls: new (...args: never[]) => Error, field: string) {
  return (e: unknown) => {
    assert.ok(e instanceof cls, String(e));
    assert.equal((e as { field?: string }).field, field);
    return true;
  };
}

test("a conversation remembers its messages in order", async () => {
  const chat = b.orchestrator.conversation("assistant");
  assert.equal(chat.id, undefined);
  const runIds: string[] = [];
  for (const [n, text] of ["one", "two", "three"].entries()) {
    const stream = chat.send(text);
    const events = await stream.collect();
    assert.equal(output(events), `You said: ${text}`);
    const s = started(events[0]);
    // Baton named the conversation; each next run begins with the
    // messages before it.
    assert.ok(s.conversationId);
    assert.equal(chat.id, s.conversationId);
    assert.equal(stream.conversationId, chat.id);
    assert.equal(s.conversationMessages, 2 * n);
    runIds.push(events[0].runId);
  }
  const history = await chat.history();
  assert.deepEqual(
    history.map((m) => [m.message?.role, m.message?.content, m.runId]),
    [
      [pb.Role.ROLE_USER, "one", runIds[0]],
      [pb.Role.ROLE_ASSISTANT, "You said: one", runIds[0]],
      [pb.Role.ROLE_USER, "two", runIds[1]],
      [pb.Role.ROLE_ASSISTANT, "You said: two", runIds[1]],
      [pb.Role.ROLE_USER, "three", runIds[2]],
      [pb.Role.ROLE_ASSISTANT, "You said: three", runIds[2]],
    ],
  );
  assert.deepEqual(
    history.map((m) => m.index),
    [0, 1, 2, 3, 4, 5],
  );
  assert.ok(history.filter((m) => m.message?.role === pb.Role.ROLE_ASSISTANT).every((m) => m.agent === "assistant"));
  // Pages of 4 followed to the end; the newest 2 only.
  assert.deepEqual(await chat.history({ pageSize: 4 }), history);
  assert.deepEqual(
    (await chat.history({ last: 2 })).map((m) => m.message?.content),
    ["three", "You said: three"],
  );
  // Each run says its conversation.
  assert.equal((await b.orchestrator.getRun(runIds[1])).conversationId, chat.id);
  const info = await chat.get();
  assert.equal(info.messageCount, 6);
  assert.deepEqual(
    info.runs.map((r) => r.runId),
    runIds,
  );
  assert.ok(info.runs.every((r) => r.status === pb.RunStatus.RUN_STATUS_COMPLETED));
  // The same conversation, continued from its id by another object.
  const again = b.orchestrator.conversation("assistant", { id: chat.id });
  const events = await again.send("four").collect();
  assert.equal(started(events[0]).conversationMessages, 6);
  assert.deepEqual(
    (await chat.history({ last: 2 })).map((m) => m.message?.content),
    ["four", "You said: four"],
  );
  // Deleted: its history is gone, and so is a send to it.
  assert.equal(await chat.delete(), 4);
  await assert.rejects(chat.history(), named(NotFound, "conversation_id"));
  await assert.rejects(again.send("five").collect(), named(NotFound, "conversation_id"));
});

test("conversations are listed most recent first and take a title", async () => {
  const first = b.orchestrator.conversation("assistant", { id: "ts-first-chat", new: true, ttl: 3600 });
  await first.send("hello").collect();
  assert.equal(first.id, "ts-first-chat");
  const second = b.orchestrator.conversation("assistant");
  await second.send("hi").collect();
  // This file's other tests share the server: only these two, in order.
  const mine = async () =>
    (await b.orchestrator.listConversations()).conversations.filter((c) => c.id === first.id || c.id === second.id);
  assert.deepEqual(
    (await mine()).map((c) => c.id),
    [second.id, "ts-first-chat"],
  );
  // A message makes it the most recent; newest of all.
  await first.send("again").collect();
  const listed = await b.orchestrator.listConversations();
  assert.equal(listed.conversations[0].id, "ts-first-chat");
  assert.equal(listed.conversations[0].messageCount, 4);
  assert.deepEqual(listed.conversations[0].messages, []); // a listing has no messages
  assert.deepEqual(
    (await mine()).map((c) => c.id),
    ["ts-first-chat", second.id],
  );
  const page = await b.orchestrator.listConversations(1);
  assert.deepEqual(
    page.conversations.map((c) => c.id),
    ["ts-first-chat"],
  );
  assert.ok(page.nextPageToken);
  const next = await b.orchestrator.listConversations(1, page.nextPageToken);
  assert.deepEqual(
    next.conversations.map((c) => c.id),
    [second.id],
  );
  // Its ttl: kept an hour after its last use.
  const info = await first.get();
  assert.equal(Number(info.expiresAt?.seconds) - Number(info.updatedAt?.seconds), 3600);
  // A title and labels; an empty label value removes the label.
  let updated = await first.update({ title: "Greetings", labels: { topic: "hello", lang: "en" } });
  assert.equal(updated.title, "Greetings");
  assert.deepEqual(updated.labels, { topic: "hello", lang: "en" });
  updated = await b.orchestrator.updateConversation("ts-first-chat", { labels: { lang: "" } });
  assert.equal(updated.title, "Greetings");
  assert.deepEqual(updated.labels, { topic: "hello" });
  assert.deepEqual(
    (await mine()).map((c) => [c.id, c.title]),
    [
      ["ts-first-chat", "Greetings"],
      [second.id, ""],
    ],
  );
  await assert.rejects(first.update({ labels: { "Not A Key": "x" } }), named(InvalidArgument, "labels"));
  // Its id is taken now.
  await assert.rejects(
    b.orchestrator.conversation("assistant", { id: "ts-first-chat", new: true }).send("x").collect(),
    named(AlreadyExists, "conversation_id"),
  );
});

test("conversation requests that are refused name their field", async () => {
  await assert.rejects(
    b.orchestrator.conversation("assistant", { id: "no-such-conversation" }).send("hi").collect(),
    named(NotFound, "conversation_id"),
  );
  await assert.rejects(b.orchestrator.deleteConversation("no-such-conversation"), named(NotFound, "conversation_id"));
  await assert.rejects(
    b.orchestrator.conversation("assistant", { id: "not a valid id!" }).send("hi").collect(),
    named(InvalidArgument, "conversation_id"),
  );
  const chat = b.orchestrator.conversation("assistant");
  await chat.send("hi").collect();
  // The conversation holds the history: a request's own is refused.
  const earlier = [{ role: pb.Role.ROLE_USER, content: "earlier" }];
  await assert.rejects(chat.send("more", { history: earlier }).collect(), named(InvalidArgument, "history"));
  await assert.rejects(
    b.orchestrator.runAgent("assistant", "x", { conversationId: chat.id, history: earlier }).collect(),
    named(InvalidArgument, "history"),
  );
  // A new conversation refused before it started: the next send starts one.
  const fresh = b.orchestrator.conversation("assistant");
  await assert.rejects(fresh.send("x", { history: earlier }).collect(), named(InvalidArgument, "history"));
  assert.equal(fresh.id, undefined);
  await fresh.send("x").collect();
  assert.ok(fresh.id !== undefined && fresh.id !== chat.id);
  // Its id comes with its first run's runStarted: a second message before
  // that would start another conversation.
  const early = b.orchestrator.conversation("assistant");
  const opening = early.send("a");
  assert.throws(() => early.send("b"), /has not started its run yet/);
  await opening.collect();
  await early.send("b").collect();
  assert.deepEqual(
    (await early.history()).map((m) => m.message?.content),
    ["a", "You said: a", "b", "You said: b"],
  );
  // Without its first run started, a conversation has no id to ask about.
  await assert.rejects(b.orchestrator.conversation("assistant").history(), /no id yet/);
  // A plain run has no conversation.
  const plain = b.orchestrator.runAgent("assistant", "alone");
  await plain.collect();
  assert.equal(plain.conversationId, undefined);
});

test("one run at a time: a message waits, or is refused", async () => {
  // The test agents' `slow` takes 30 s: its run holds the conversation.
  const t = await startBaton();
  try {
    const chat = t.orchestrator.conversation("slow");
    const first = chat.send("first");
    const it = first[Symbol.asyncIterator]();
    const s = started((await it.next()).value!);
    assert.equal(chat.id, s.conversationId);
    const runId = first.runId!;
    await assert.rejects(chat.send("second", { busy: "refuse" }).collect(), (e: unknown) => {
      assert.ok(e instanceof Aborted, String(e));
      assert.ok(e.details.includes(runId), e.details);
      return true;
    });
    // The default waits for the run before it to end.
    let done = false;
    const waiting = t.orchestrator
      .runAgent("echo", "third", { conversationId: chat.id })
      .collect()
      .finally(() => (done = true));
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(done, false);
    await it.return!(undefined); // leaves the stream: the slow run is cancelled, the waiting one goes on
    const events = await waiting;
    assert.equal(output(events), "third");
    assert.equal(started(events[0]).conversationMessages, 1);
    assert.deepEqual(
      (await chat.history()).map((m) => [m.message?.content, m.interrupted]),
      [
        ["first", true],
        ["third", false],
        ["third", false],
      ],
    );
    assert.equal(kind(events[0]), "runStarted");
  } finally {
    await t.stop();
  }
});
