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

from costlab.metaschedule.pools import kill_workers, shutdown_pool

LOST = "costlab: not measured, the RPC tracker or its device stopped answering"

# What RPCRunner's results say when the connection, not the program, failed
_CONNECTION_SIGNS = ("Failed to connect to server", "Cannot connect to tracker", "Connection refused",
                     "Connection reset", "Broken pipe", "Connection aborted", "connection closed",
                     "Socket closed", "socket closed", "[Errno 111]", "[Errno 104]", "[Errno 32]",
                     # the session's server shut it down as it began (a server killed, or restarted, meanwhile)
                     "(code == RPCCode::kReturn) is false: code=1")
POLL_S = 2.0  # how often the tracker is asked while a batch's results are awaited


def is_lost(error_msg) -> bool:
    """A runner result that is not a measurement: marked by the guard."""
    return error_msg is not None and str(error_msg).startswith(LOST)


def _lost_result(error_msg) -> bool:
    """A result that may say the device, not the program, failed: a connection error or a session timeout
    (a device gone mid-session leaves its requests waiting until the timeout)."""
    return error_msg is not None and (any(s in str(error_msg) for s in _CONNECTION_SIGNS)
                                      or str(error_msg).startswith("RPCRunner: Timeout"))


def _summary(host: str, port: int, timeout: float) -> dict:
    """The tracker's summary, asked in a thread of its own: TVM's tracker session has no timeout, and a tracker that
    accepts a connection but never answers (stopped, or its host frozen) would hold the caller for good."""
    import threading

    from tvm import rpc

    box: dict = {}

    def ask():
        try:
            box["summary"] = rpc.connect_tracker(host, port).summary()
        except Exception as exc:  # noqa: BLE001  handed to the caller
            box["error"] = exc

    asking = threading.Thread(target=ask, daemon=True)  # left blocked on its socket when the tracker never answers
    asking.start()
    asking.join(timeout)
    if asking.is_alive():
        raise TimeoutError(f"no answer in {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box["summary"]


def tracker_problem(host: str, port: int, key: str, timeout: float = 5.0) -> str | None:
    """Why no device of ``key`` can be had from the tracker at host:port, or None when one can."""
    return _tracker_state(host, port, key, timeout)[0]


def _tracker_state(host: str, port: int, key: str, timeout: float = 5.0) -> tuple[str | None, dict]:
    """``tracker_problem``'s answer, and the tracker's queue of ``key`` (``free``, ``pending``; {} when the tracker
    did not answer), from one question to the tracker."""
    try:
        socket.create_connection((host, port), timeout=timeout).close()  # TVM retries a refusal for 60 s
        summary = _summary(host, port, timeout)
    except Exception as exc:  # noqa: BLE001  refused, unreachable, not a tracker
        lines = [x for x in str(exc).strip().splitlines() if x.strip()]
        return f"no RPC tracker answers at {host}:{port} ({lines[-1][:120] if lines else type(exc).__name__})", {}
    queue = dict((summary.get("queue_info") or {}).get(key) or {})
    # a key stays in queue_info once seen; a device that answers is a connected server of the key
    servers = [str(c.get("key", "")).split(":", 1)[-1] for c in summary.get("server_info") or []]
    if key not in servers:
        keys = sorted(set(servers) | {str(k) for k in (summary.get("queue_info") or {})})
        return (f"the RPC tracker at {host}:{port} has no device of key {key!r} connected (keys: "
                f"{', '.join(keys) or 'none'})"), queue
    return None, queue


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

        def _give_up(self, why: str) -> None:
            """The batch's requests still waiting are not answered: its runner's worker, blocked in one (a request
            queued at the tracker for a device that is gone, a session with a device that stopped answering), is
            ended; no later batch is run."""
            self.lost = why
            if on_lost is not None:
                on_lost(f"{why}; waited {wait_s:g} s")
            pool = getattr(inner, "pool", None)
            if pool is not None and not getattr(pool, "_shutdown", False):
                kill_workers(pool)  # TVM's shutdown would close a blocked worker's pipe first, and wait on its read
                shutdown_pool(pool)

        def _collect(self, futures) -> list:
            """The results of ``futures``, None for those given up: a device that died mid-batch leaves its next
            request queued at the tracker for good (TVM waits for a device of the key without a limit), and one
            that stopped answering (frozen, cut off) leaves its session waiting; each is waited for ``wait_s``."""
            results = [None] * len(futures)
            timeout = float(getattr(getattr(inner, "rpc_config", None), "session_timeout_sec", 0) or 0)
            gone_since, check, last = None, time.monotonic() + POLL_S, time.monotonic()
            while True:
                for i, fut in enumerate(futures):
                    if results[i] is None and fut.done():
                        results[i], last = fut.result(), time.monotonic()
                if all(r is not None for r in results):
                    return results
                now = time.monotonic()
                if now >= check:
                    check = now + POLL_S
                    why, queue = _tracker_state(host, port, key)
                    gone_since = None if why is None else (gone_since or now)
                    if why is not None and now - gone_since >= wait_s:
                        self._give_up(why)
                        return results
                    # no answer for longer than a session may last, while no request waits for a busy device: ours
                    # holds the device, and it stopped answering. A request waiting (ours for a device another
                    # client holds, maybe for long) restarts the clock: our session can only have begun after it
                    if why is None and timeout:
                        if queue.get("pending"):
                            last = now
                        elif now - last > timeout + max(wait_s, POLL_S):
                            self._give_up(f"the device of key {key!r} stopped answering (no result in "
                                          f"{now - last:.0f} s)")
                            return results
                time.sleep(0.1)

        def _lost(self, n: int) -> list:
            return [RunnerResult(None, error_msg=f"{LOST} ({self.lost})") for _ in range(n)]

        def run(self, runner_inputs):
            if self.lost is not None or not self._reachable():
                return [_Done(r) for r in self._lost(len(runner_inputs))]
            results = self._collect(inner.run(runner_inputs))
            if self.lost is not None:
                return [_Done(r if r is not None and not _lost_result(r.error_msg) else self._lost(1)[0])
                        for r in results]
            again = [i for i, r in enumerate(results) if _lost_result(r.error_msg)]
            if again and self._reachable():  # the tracker is back (or never left): one more try
                for i, r in zip(again, self._collect(inner.run([runner_inputs[i] for i in again]))):
                    results[i] = r if r is not None else self._lost(1)[0]
                if self.lost is not None:
                    return [_Done(r if not _lost_result(r.error_msg) else self._lost(1)[0]) for r in results]
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
