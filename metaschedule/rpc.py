"""Measuring through a TVM RPC tracker without filling a budget with failed records when it stops answering.

MetaSchedule's ``RPCRunner`` turns a tracker that is down (or a device that went away) into one failed
result per candidate, after retrying each connection for 60 s. Those are not measurements of the programs:
recorded, they would count against a tuning budget, and a re-run would never measure the programs again.
``guarded_runner`` checks the tracker before each batch (waiting up to ``wait_s`` for it to come back),
runs a candidate whose connection failed (or timed out) once more; if it fails so again while the tracker
and a device of the key answer, the program failed them and its failure is recorded; otherwise the
candidate gets a result marked ``LOST`` and ``on_lost(reason)`` is called: callers drop marked results
(``is_lost``) and stop.
"""

from __future__ import annotations

import socket
import time

LOST = "costlab: not measured, the RPC tracker or its device stopped answering"

# What RPCRunner's results say when the connection, not the program, failed
_CONNECTION_SIGNS = ("Failed to connect to server", "Cannot connect to tracker", "Connection refused",
                     "Connection reset", "Broken pipe", "Connection aborted", "connection closed",
                     "Socket closed", "socket closed", "[Errno 111]", "[Errno 104]", "[Errno 32]")


def is_lost(error_msg) -> bool:
    """A runner result that is not a measurement: marked by the guard."""
    return error_msg is not None and str(error_msg).startswith(LOST)


def _lost_result(error_msg) -> bool:
    """A result that may say the device, not the program, failed: a connection error or a session timeout
    (a device gone mid-session leaves its requests waiting until the timeout)."""
    return error_msg is not None and (any(s in str(error_msg) for s in _CONNECTION_SIGNS)
                                      or str(error_msg).startswith("RPCRunner: Timeout"))


def tracker_problem(host: str, port: int, key: str, timeout: float = 5.0) -> str | None:
    """Why no device of ``key`` can be had from the tracker at host:port, or None when one can."""
    from tvm import rpc

    try:
        socket.create_connection((host, port), timeout=timeout).close()  # TVM retries a refusal for 60 s
        summary = rpc.connect_tracker(host, port).summary()
    except Exception as exc:  # noqa: BLE001  refused, unreachable, not a tracker
        lines = [x for x in str(exc).strip().splitlines() if x.strip()]
        return f"no RPC tracker answers at {host}:{port} ({lines[-1][:120] if lines else type(exc).__name__})"
    # a key stays in queue_info once seen; a device that answers is a connected server of the key
    servers = [str(c.get("key", "")).split(":", 1)[-1] for c in summary.get("server_info") or []]
    if key not in servers:
        keys = sorted(set(servers) | {str(k) for k in (summary.get("queue_info") or {})})
        return f"the RPC tracker at {host}:{port} has no device of key {key!r} connected (keys: {', '.join(keys) or 'none'})"
    return None


def guarded_runner(inner, host: str, port: int, key: str, wait_s: float = 60.0, on_lost=None):
    """``inner`` (an ``RPCRunner``) behind the guard described in the module's docstring."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerResult

    @derived_object
    class _Done(PyRunnerFuture):
        def __init__(self, result):
            super().__init__()
            self.value = result

        def done(self) -> bool:
            return True

        def result(self):
            return self.value

    @derived_object
    class GuardedRunner(PyRunner):
        def __init__(self):
            super().__init__()
            self.inner = inner  # its worker pool is shut down with the run (runners.close_runner)
            self.lost: str | None = None  # why the tracker was given up; every later batch is not run

        def _reachable(self) -> bool:
            give_up = time.monotonic() + max(0.0, float(wait_s))
            while True:
                why = tracker_problem(host, port, key)
                if why is None:
                    return True
                if time.monotonic() >= give_up:
                    self.lost = why
                    if on_lost is not None:
                        on_lost(f"{why}; waited {wait_s:g} s")
                    return False
                time.sleep(min(5.0, max(0.1, give_up - time.monotonic())))

        def _lost(self, n: int) -> list:
            return [RunnerResult(None, error_msg=f"{LOST} ({self.lost})") for _ in range(n)]

        def run(self, runner_inputs):
            if self.lost is not None or not self._reachable():
                return [_Done(r) for r in self._lost(len(runner_inputs))]
            results = [f.result() for f in inner.run(runner_inputs)]
            again = [i for i, r in enumerate(results) if _lost_result(r.error_msg)]
            if again and self._reachable():  # the tracker is back (or never left): one more try
                for i, fut in zip(again, inner.run([runner_inputs[i] for i in again])):
                    results[i] = fut.result()
                again = [i for i in again if _lost_result(results[i].error_msg)]
                if again and tracker_problem(host, port, key) is None:
                    again = []  # tracker and device answer: the program itself failed them (a crash), twice
                elif again:
                    self.lost = f"the device of key {key!r} stopped answering"
                    if on_lost is not None:
                        on_lost(self.lost)
            for i in again:
                results[i] = self._lost(1)[0]
            return [_Done(r) for r in results]

    return GuardedRunner()
