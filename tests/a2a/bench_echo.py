"""An instant A2A echo agent (a2a-sdk 1.3.0) for round-trip benchmarks.

Its card is named "bench-echo". Any message completes at once: the agent's
only event is a COMPLETED Task carrying the artifact "Echo: <input>". A
message "stream M" instead streams M artifact chunks as fast as it can and
then completes, for measuring streamed updates per second.

Usage: bench_echo.py [--port 0] [--grpc-port 0] [--key TOKEN]
Prints "LISTENING <port>" (plus " GRPC <port>" with --grpc-port) when ready.
"""

from __future__ import annotations

import argparse
import asyncio

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Artifact, Part, Task, TaskState, TaskStatus

from sdk_server import add_server_args, serve


class BenchEchoExecutor(AgentExecutor):
    async def execute(
        self, context: RequestContext, event_queue: EventQueue
    ) -> None:
        task_id = context.task_id or ''
        context_id = context.context_id or ''
        text = context.get_user_input().strip()
        words = text.split()
        history = [context.message] if context.message else []

        if len(words) == 2 and words[0] == 'stream' and words[1].isdigit():
            count = int(words[1])
            await event_queue.enqueue_event(
                Task(
                    id=task_id,
                    context_id=context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_WORKING),
                    history=history,
                )
            )
            updater = TaskUpdater(event_queue, task_id, context_id)
            for i in range(count):
                await updater.add_artifact(
                    [Part(text=f'{i} ')],
                    artifact_id='stream',
                    append=i > 0,
                    last_chunk=i == count - 1,
                )
            await updater.complete()
            return

        # One event: the finished task with its artifact.
        await event_queue.enqueue_event(
            Task(
                id=task_id,
                context_id=context_id,
                status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED),
                artifacts=[
                    Artifact(
                        artifact_id='echo',
                        name='echo',
                        parts=[Part(text=f'Echo: {text}')],
                    )
                ],
                history=history,
            )
        )

    async def cancel(
        self, context: RequestContext, event_queue: EventQueue
    ) -> None:
        updater = TaskUpdater(
            event_queue, context.task_id or '', context.context_id or ''
        )
        await updater.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_args(parser)
    args = parser.parse_args()
    asyncio.run(
        serve(
            BenchEchoExecutor(),
            name='bench-echo',
            description='Completes every message at once with an echo.',
            args=args,
        )
    )


if __name__ == '__main__':
    main()
