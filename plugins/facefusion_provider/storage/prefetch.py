"""Work done ahead of its use: results made in threads, a bounded number at once, and handed out in order.

The merge uses it to download and check the next segments while it remuxes the current one.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")


class Prefetch(Generic[T]):
    """Runs ``tasks`` in ``ahead`` threads, from its creation on, and hands their results out in order (``results()``).

    At most ``ahead + 1`` results exist at once: the one in use and ``ahead`` more being made or ready. Asking for the
    next result releases the previous one (``release``, if given: e.g. deleting a downloaded file), so what they hold
    stays bounded. A task's exception is raised by ``results()`` when its turn comes. ``close()`` (also on leaving the
    ``with`` block, the way to use it) cancels the tasks not started, waits for the running ones and releases every
    finished result not released yet: no task outlives it. Tasks run in a copy of the caller's context (its storage
    credentials).
    """

    def __init__(
        self, tasks: Sequence[Callable[[], T]], ahead: int, release: Callable[[T], None] | None = None
    ) -> None:
        self._tasks, self._ahead, self._release = tasks, ahead, release
        self._executor = ThreadPoolExecutor(max_workers=ahead, thread_name_prefix="facefusion-prefetch")
        self._unreleased: dict[int, Future[tuple[T, float]]] = {}
        self._submitted = 0
        self.wait_seconds = 0.0  # how long the consumer waited for results that were not ready yet
        self.work_seconds = 0.0  # the handed-out tasks' own run times, summed over the threads
        self._submit_up_to(ahead + 1)  # the first tasks start now, before anyone asks for their results

    def __enter__(self) -> Prefetch[T]:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def results(self) -> Iterator[T]:
        """The tasks' results in order; each one is released when the next is asked for (the last at the end)."""
        for index in range(len(self._tasks)):
            began = time.perf_counter()
            value, seconds = self._unreleased[index].result()
            self.wait_seconds += time.perf_counter() - began
            self.work_seconds += seconds
            yield value
            del self._unreleased[index]
            self._release_value(value)
            self._submit_up_to(index + 1 + self._ahead + 1)

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        for future in self._unreleased.values():
            if future.done() and not future.cancelled() and future.exception() is None:
                self._release_value(future.result()[0])
        self._unreleased.clear()

    def _release_value(self, value: T) -> None:
        if self._release is not None:
            self._release(value)

    def _submit_up_to(self, end: int) -> None:
        while self._submitted < min(end, len(self._tasks)):
            task = self._tasks[self._submitted]
            self._unreleased[self._submitted] = self._executor.submit(contextvars.copy_context().run, _timed, task)
            self._submitted += 1


def _timed(task: Callable[[], T]) -> tuple[T, float]:
    began = time.perf_counter()
    value = task()
    return value, time.perf_counter() - began
