"""A remote A2A agent written with a2a-sdk 1.3.0, for Baton's A2A tests.

Its card is named "remote-echo". What it does depends on the text it is sent:

- "ask ..."   asks "Which colour?" (TASK_STATE_INPUT_REQUIRED); the next
              message on the same task is the answer, and the task completes
              with "You chose <answer>." (as an artifact and as the status
              message).
- "slow ..."  20 updates, 100 ms apart by default (odd steps are WORKING status updates
              "tick i/20", even steps artifact chunks "tick i "), then
              completes. Cancelling it ends it as TASK_STATE_CANCELED.
- "fail ..."  ends as TASK_STATE_FAILED with the message
              "Failed as asked: <input>".
- otherwise   streams the words of "Remote echo: <input>" as chunks of one
              artifact ("echo") and completes.

Usage: remote_agent.py [--port 0] [--grpc-port 0] [--key TOKEN]
                       [--log FILE] [--slow-interval SECONDS]
Prints "LISTENING <port>" (plus " GRPC <port>" with --grpc-port) when ready.

--log FILE appends one JSON line per message the agent receives (each call
of execute()): {"messageId", "taskId", "contextId", "text", "followUp"}, so
a test can count what was sent to it. --slow-interval sets the pause
between the updates of "slow" (default 0.1 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Part, Task, TaskState, TaskStatus

from sdk_server import add_server_args, serve

SLOW_STEPS = 20
SLOW_INTERVAL = 0.1


class RemoteEchoExecutor(AgentExecutor):
    """The behaviours listed in the module docstring."""

    def __init__(
        self, log: str | None = None, slow_interval: float = SLOW_INTERVAL
    ) -> None:
        # Tasks whose cancel() has run; execute() checks this before every
        # event so nothing is published after the CANCELED status.
        self._cancelled: set[str] = set()
        self._log = log
        self._slow_interval = slow_interval

    def _record(self, context: RequestContext, context_id: str, text: str) -> None:
        """Appends the received message to the --log file, if any."""
        if not self._log:
            return
        message = context.message
        line = {
            'messageId': message.message_id if message else '',
            'taskId': context.task_id or '',
            'contextId': context_id,
            'text': text,
            'followUp': context.current_task is not None,
        }
        with open(self._log, 'a', encoding='utf-8') as f:
            f.write(json.dumps(line, sort_keys=True) + '\n')

    async def execute(
        self, context: RequestContext, event_queue: EventQueue
    ) -> None:
        task = context.current_task
        task_id = context.task_id or ''
        # a2a-sdk 1.3.0 gives a follow-up message that names only its task a
        # freshly generated context id; keep the task's own one instead.
        context_id = (task.context_id if task else None) or context.context_id or ''
        updater = TaskUpdater(event_queue, task_id, context_id)
        text = context.get_user_input().strip()
        self._record(context, context_id, text)

        # A follow-up message on a task waiting for input is the answer.
        if task is not None and (
            task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        ):
            await updater.start_work()
            reply = f'You chose {text}.'
            await updater.add_artifact([Part(text=reply)], name='answer')
            await updater.complete(updater.new_agent_message([Part(text=reply)]))
            return

        if task is None:
            # The SDK wants a Task event before any status update of a new
            # task; it carries the user's message as the first history entry.
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[context.message] if context.message else [],
                )
            )

        word = text.split(maxsplit=1)[0].lower() if text else ''
        if word.startswith('ask'):
            await updater.requires_input(
                updater.new_agent_message([Part(text='Which colour?')])
            )
            # Returning here ends this request; the answer arrives as a new
            # message on the same task and calls execute() again.
            return

        if word.startswith('fail'):
            await updater.start_work()
            await updater.failed(
                updater.new_agent_message([Part(text=f'Failed as asked: {text}')])
            )
            return

        if word.startswith('slow'):
            await self._slow(updater, task_id)
            return

        await self._echo(updater, text)

    async def _slow(self, updater: TaskUpdater, task_id: str) -> None:
        await updater.start_work()
        for step in range(1, SLOW_STEPS + 1):
            await asyncio.sleep(self._slow_interval)
            if task_id in self._cancelled:
                return
            if step % 2:
                await updater.update_status(
                    TaskState.TASK_STATE_WORKING,
                    message=updater.new_agent_message(
                        [Part(text=f'tick {step}/{SLOW_STEPS}')]
                    ),
                )
            else:
                await updater.add_artifact(
                    [Part(text=f'tick {step} ')],
                    artifact_id='slow',
                    name='slow',
                    append=step > 2,
                    last_chunk=step == SLOW_STEPS,
                )
        if task_id not in self._cancelled:
            await updater.complete()

    async def _echo(self, updater: TaskUpdater, text: str) -> None:
        await updater.start_work()
        words = f'Remote echo: {text}'.split(' ')
        for i, chunk in enumerate(words):
            last = i == len(words) - 1
            await updater.add_artifact(
                # Keep the spaces so the joined parts read as the sentence.
                [Part(text=chunk if last else chunk + ' ')],
                artifact_id='echo',
                name='echo',
                append=i > 0,
                last_chunk=last,
            )
        await updater.complete()

    async def cancel(
        self, context: RequestContext, event_queue: EventQueue
    ) -> None:
        # The SDK awaits this before cancelling the running execute(); the
        # CANCELED status written here is the task's final state.
        task_id = context.task_id or ''
        self._cancelled.add(task_id)
        task = context.current_task
        context_id = (task.context_id if task else None) or context.context_id or ''
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.cancel(
            updater.new_agent_message([Part(text='Canceled on request.')])
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_args(parser)
    parser.add_argument(
        '--log', default=None, help='append each received message as a JSON line'
    )
    parser.add_argument(
        '--slow-interval',
        type=float,
        default=SLOW_INTERVAL,
        help='seconds between the updates of "slow"',
    )
    args = parser.parse_args()
    asyncio.run(
        serve(
            RemoteEchoExecutor(log=args.log, slow_interval=args.slow_interval),
            name='remote-echo',
            description='Echoes, asks a question, streams slowly or fails.',
            args=args,
        )
    )


if __name__ == '__main__':
    main()
