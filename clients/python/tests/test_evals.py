"""Evaluations from Python against the real `baton up` binary and its
example agents: the example dataset runs as an experiment (each case told
as it is scored), a recorded run saved as a case passes with its tools
answered from the recording, two experiments compare, and a bad dataset
is refused naming its file, line and field."""

from __future__ import annotations

import asyncio
import json

import pytest

from baton.v1 import evals_pb2 as evals_pb
from baton_client import FailedPrecondition, InvalidArgument, NotFound

from conftest import REPO, running


def run(coro):
    return asyncio.run(coro)


def test_an_experiment_runs_compares_and_a_saved_case_passes(tmp_path):
    async def main():
        async with running(example_agents=True) as b:
            told = []
            e = await b.orchestrator.run_experiment(
                REPO / "deploy/config/evals/examples.jsonl", name="py-main", on_case=told.append
            )
            assert e.status == evals_pb.EXPERIMENT_STATUS_COMPLETED
            assert sorted(c.case_id for c in told) == sorted(c.case_id for c in e.cases)
            assert e.totals.cases == 4 and e.totals.passed == 4, e.totals
            assert (await b.orchestrator.get_experiment("py-main")).id == e.id
            listed = await b.orchestrator.list_experiments()
            assert [x.name for x in listed.experiments] == ["py-main"]
            assert not listed.experiments[0].cases

            # A researcher run, saved as a case with its recording inline.
            researcher = next(c for c in e.cases if c.case_id == "researcher-tides")
            case = await b.orchestrator.save_case(researcher.tries[0].run_id, inline_recording=True)
            assert case["tools"] == "recorded" and case["input"] == "tides"
            dataset = tmp_path / "saved.jsonl"
            dataset.write_text(json.dumps(case) + "\n")
            saved = await b.orchestrator.run_experiment(dataset, name="py-saved", repeat=2)
            assert saved.cases[0].passed and saved.cases[0].pass_rate == 1.0, saved.cases[0]

            again = await b.orchestrator.run_experiment(REPO / "deploy/config/evals/examples.jsonl", name="py-again")
            compared = await b.orchestrator.compare_experiments("py-main", "py-again")
            assert not compared.regressed
            assert {c.kind for c in compared.cases} == {evals_pb.CASE_CHANGE_KIND_SAME}

            bad = tmp_path / "bad.jsonl"
            bad.write_text('{"input": "hi", "agent": "assistant", "expected": "x"}\n{"input": "hi", "agent": "reseacher", "expected": "x"}\n')
            with pytest.raises(InvalidArgument) as refused:
                await b.orchestrator.run_experiment(bad)
            assert f'{bad}:2: agent: unknown agent or group "reseacher"' in str(refused.value)
            with pytest.raises(NotFound):
                await b.orchestrator.get_experiment("nope")
            assert again.totals.passed == 4

    run(main())


def test_cancel_experiment_stops_a_running_one_and_keeps_what_finished(tmp_path):
    async def main():
        async with running() as b:
            dataset = tmp_path / "slow.jsonl"
            dataset.write_text(
                '{"id": "quick", "agent": "echo", "input": "hi", "scorers": [{"kind": "contains", "value": "hi"}]}\n'
                '{"id": "slow-1", "input": "x", "expected": "never"}\n'
                '{"id": "slow-2", "input": "x", "expected": "never"}\n'
            )
            told = []
            started = asyncio.create_task(
                b.orchestrator.run_experiment(dataset, agent="slow", name="py-slow", on_case=told.append)
            )
            for _ in range(200):
                if told:
                    break
                await asyncio.sleep(0.02)
            assert [c.case_id for c in told] == ["quick"]
            e = await b.orchestrator.cancel_experiment("py-slow")
            assert e.status == evals_pb.EXPERIMENT_STATUS_CANCELLED
            assert [c.case_id for c in e.cases] == ["quick"]
            ended = await asyncio.wait_for(started, 10)
            assert ended.status == evals_pb.EXPERIMENT_STATUS_CANCELLED
            with pytest.raises(FailedPrecondition) as refused:
                await b.orchestrator.cancel_experiment("py-slow")
            assert "only a running experiment can be cancelled" in str(refused.value)

    run(main())
