"""SendMessage round trips and streaming throughput with the a2a-sdk client.

    bench_client.py --card-url URL [--binding JSONRPC|HTTP+JSON|GRPC]
                    [--key K] [-n 200] [--warmup 20] [--stream-updates 1000]
                    [--text hello] [--stream-text "stream {m}"]

1. Round trip: after --warmup unmeasured calls, -n sequential blocking
   SendMessage calls of --text over one client (one connection/channel);
   p50, p99, mean, min and max in milliseconds.
2. Streaming: one SendStreamingMessage of --stream-text ("{m}" is replaced by
   --stream-updates; bench_echo.py answers "stream M" with M artifact chunks).
   Reports events received, seconds from sending to the stream's end, events
   per second, and the time to the first event. --stream-updates 0 skips it.

Prints one JSON object. The same options as client.py pick the agent, the
binding and the key, so it works against bench_echo.py or Baton alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

from a2a.types import SendMessageConfiguration, SendMessageRequest

from client import BINDINGS, build_client, user_message


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return float('nan')
    rank = max(1, round(p / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def send_request(text: str) -> SendMessageRequest:
    return SendMessageRequest(
        message=user_message(text), configuration=SendMessageConfiguration()
    )


async def round_trips(args: argparse.Namespace) -> dict:
    client, _card, http = await build_client(args, streaming=False)
    try:
        async def one() -> None:
            async for _ in client.send_message(send_request(args.text)):
                pass

        for _ in range(args.warmup):
            await one()
        times = []
        for _ in range(args.n):
            start = time.perf_counter()
            await one()
            times.append((time.perf_counter() - start) * 1000)
    finally:
        await client.close()
        await http.aclose()
    times.sort()
    return {
        'calls': len(times),
        'p50_ms': round(percentile(times, 50), 3),
        'p99_ms': round(percentile(times, 99), 3),
        'mean_ms': round(statistics.fmean(times), 3) if times else None,
        'min_ms': round(times[0], 3) if times else None,
        'max_ms': round(times[-1], 3) if times else None,
    }


async def streaming(args: argparse.Namespace) -> dict:
    client, _card, http = await build_client(args, streaming=True)
    text = args.stream_text.replace('{m}', str(args.stream_updates))
    events = 0
    first = None
    try:
        start = time.perf_counter()
        async for _ in client.send_message(send_request(text)):
            events += 1
            if first is None:
                first = time.perf_counter() - start
        elapsed = time.perf_counter() - start
    finally:
        await client.close()
        await http.aclose()
    return {
        'requested_updates': args.stream_updates,
        'events': events,
        'seconds': round(elapsed, 4),
        'events_per_second': round(events / elapsed, 1) if elapsed else None,
        'first_event_ms': round(first * 1000, 3) if first is not None else None,
    }


async def run(args: argparse.Namespace) -> dict:
    result = {'binding': args.binding or 'card order', 'card_url': args.card_url}
    if args.n > 0:
        result['send_message'] = await round_trips(args)
    if args.stream_updates > 0:
        result['stream'] = await streaming(args)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    parser.add_argument('--card-url', required=True)
    parser.add_argument('--binding', choices=BINDINGS)
    parser.add_argument('--key')
    parser.add_argument('--version', help='A2A-Version override, or "none"')
    parser.add_argument('--timeout', type=float, default=60.0)
    parser.add_argument('-n', type=int, default=200)
    parser.add_argument('--warmup', type=int, default=20)
    parser.add_argument('--stream-updates', type=int, default=1000)
    parser.add_argument('--text', default='hello')
    parser.add_argument('--stream-text', default='stream {m}')
    args = parser.parse_args()
    try:
        result = asyncio.run(run(args))
    except Exception as e:  # noqa: BLE001
        print(json.dumps({'error': {'type': type(e).__name__, 'message': str(e)}}))
        return 3
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == '__main__':
    sys.exit(main())
