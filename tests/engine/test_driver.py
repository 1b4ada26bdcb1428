"""The driver with futures whose producer calls their ``then`` hook (as the HTTP pool's do)."""

from __future__ import annotations

import asyncio

import simpy

from dialogsim.agents.http.client import Answer
from dialogsim.engine.driver import Driver


def test_an_answer_calling_then_lets_the_driver_step_on_in_the_same_turn():
    """Resolving the call the driver is blocked on and calling ``then`` steps simpy at once: the process
    has taken the answer and started its next call before the event loop runs anything else."""
    env = simpy.Environment(initial_time=0.0)
    driver = Driver(env)
    calls: list[Answer] = []
    taken: list[int] = []

    def process():
        for _ in range(3):
            future, wake = driver.start(Answer(loop=asyncio.get_running_loop()), env.now + 1.0)
            calls.append(future)
            yield wake
            taken.append(future.result())

    async def main() -> None:
        env.process(process())
        run = asyncio.ensure_future(driver.run())
        for n in range(3):
            while len(calls) <= n:
                await asyncio.sleep(0)
            calls[n].set_result(n)
            calls[n].then()
            assert taken == list(range(n + 1))  # taken in this turn, not when the driver task resumes
            assert len(calls) == min(n + 2, 3)
        await run

    asyncio.run(main())
    assert taken == [0, 1, 2] and env.now == 3.0


def test_a_failure_while_stepping_from_then_is_raised_by_run():
    """An error escaping a step run from ``then`` reaches whoever awaits ``Driver.run``."""
    env = simpy.Environment(initial_time=0.0)
    driver = Driver(env)
    calls: list[Answer] = []

    def process():
        future, wake = driver.start(Answer(loop=asyncio.get_running_loop()), 0.0)
        calls.append(future)
        yield wake
        raise KeyError("boom")

    async def main() -> None:
        env.process(process())
        run = asyncio.ensure_future(driver.run())
        while not calls:
            await asyncio.sleep(0)
        calls[0].set_result(None)
        calls[0].then()
        try:
            await run
        except KeyError:
            return
        raise AssertionError("the failure was lost")

    asyncio.run(main())
