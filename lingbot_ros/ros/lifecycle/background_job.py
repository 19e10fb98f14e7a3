"""BackgroundJob: one function run on a daemon thread, waited for while a condition holds.

The node's configure runs its heavy part (model load, warm-up: seconds to minutes, in torch)
this way, so the executor thread can notice a SIGINT/SIGTERM (rclpy shuts the context down)
and give up waiting at once; the abandoned thread writes nothing and dies with the process.
"""
from __future__ import annotations

import threading
from typing import Any, Callable


class BackgroundJob:
    def __init__(self, work: Callable[[], Any], name: str) -> None:
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(work,), name=name, daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], Any]) -> None:
        try:
            self._result = work()
        except BaseException as exc:  # noqa: BLE001 -- handed to the waiter by result()
            self._error = exc
        finally:
            self._done.set()

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    def wait(self, keep_waiting: Callable[[], bool], poll_s: float) -> bool:
        """Wait until the job is done (True), or until ``keep_waiting()`` is False (False:
        the job is abandoned, still running), checking every ``poll_s`` seconds."""
        while not self._done.wait(poll_s):
            if not keep_waiting():
                return False
        return True

    def result(self) -> Any:
        """The function's return value; its exception is raised here."""
        if self._error is not None:
            raise self._error
        return self._result
