"""costlab's TVM worker processes (``metaschedule/pools.worker_pool``): TVM without PyTorch, each in a session of
its own, behind the builder, the runner and the checks."""

import os
import signal
import subprocess
import sys
import time

import pytest

from costlab.metaschedule import pools

# what a worker reports of itself: is PyTorch importable there, its session, and TVM at work
FACTS = ("(__import__('sys').modules.get('torch', 'absent'), __import__('os').getsid(0), "
         "str(__import__('tvm').runtime.device('cpu', 0)))")


def test_workers_run_tvm_without_pytorch_in_a_session_of_their_own():
    import torch  # noqa: F401  (this process has it: the worker's refusal is not for want of it)

    pool = pools.worker_pool(max_workers=1, timeout=120)
    try:
        torch_there, session, device = pool.submit(eval, FACTS).result()
    finally:
        pools.shutdown_pool(pool)
    assert torch_there is None  # refused: `import torch` raises ImportError there
    assert session != os.getsid(0)
    assert device == "cpu:0"


def test_the_builder_and_runner_use_costlabs_workers():
    from costlab.metaschedule.builders import make_builder
    from costlab.metaschedule.runners import _runner_class, close_runner

    builder = make_builder(workers=1, pooled=True)
    runner = _runner_class()(timeout_sec=60)
    try:
        assert type(builder._executor()) is pools._pool_class()
        assert type(runner.pool) is pools._pool_class()
        assert runner.pool.submit(eval, FACTS).result()[0] is None
    finally:
        close_runner(runner)
        builder.close()


DRIVER = """
import sys, time
from costlab.metaschedule.builders import make_builder
from costlab.metaschedule.runners import _runner_class, close_runner
builder = make_builder(workers=2, pooled=True)
runner = _runner_class()(timeout_sec=60)
builder.warm_up()
runner.start("cpu")
print("started", flush=True)
try:
    time.sleep(120)
except KeyboardInterrupt:
    close_runner(runner)
    builder.close()
    print("stopped", flush=True)
    sys.exit(130)
"""


def test_ctrl_c_at_the_terminal_while_workers_start_prints_one_process_s_words():
    """A terminal's Ctrl-C reaches the whole foreground process group. TVM's workers, in the command's group,
    each printed a KeyboardInterrupt traceback when it came while they imported TVM (2 s each here); costlab's
    are in sessions of their own, and the command stops them."""
    proc = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            # a shell starts background jobs (a suite run with `&`) with SIGINT ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout.readline() == "started\n"
        time.sleep(0.3)  # the workers are importing TVM
        os.killpg(proc.pid, signal.SIGINT)  # as the terminal sends it: to the command's process group
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and out == "stopped\n", (out, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


STUCK = """
import os, sys, time
from costlab.metaschedule.pools import worker_pool
pool = worker_pool(max_workers=1, timeout=600)
print(pool.submit(os.getpid).result(), flush=True)
pool.submit(time.sleep, 300)  # the worker busy, as in a kernel that does not end
time.sleep(300)
"""


def _gone(pid: int) -> bool:
    """The process has ended (a zombie no one has reaped yet counts: it runs nothing)."""
    try:
        status = open(f"/proc/{pid}/status").read()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_killed_command_leaves_no_worker_behind():
    """The command killed (SIGKILL: nothing of it runs) while its worker is busy: the kernel kills the worker,
    which, in a session of its own, no terminal or process-group signal reaches."""
    proc = subprocess.Popen([sys.executable, "-c", STUCK], stdout=subprocess.PIPE, text=True)
    worker = int(proc.stdout.readline())
    time.sleep(0.5)  # the worker is in its long task
    assert not _gone(worker)
    proc.kill()
    proc.wait()
    deadline = time.time() + 20
    while not _gone(worker) and time.time() < deadline:
        time.sleep(0.1)
    gone = _gone(worker)
    if not gone:
        os.kill(worker, signal.SIGKILL)
    assert gone


def test_workers_import_pytorch_where_the_machine_needs_it(monkeypatch):
    """A machine whose CUDA runtime TVM finds only through the libraries PyTorch loads first: gpu_setup's check
    sets COSTLAB_WORKERS_IMPORT_TORCH=1 in env.sh there, and the workers then import PyTorch as TVM's do."""
    from costlab.metaschedule.worker import WITH_TORCH

    monkeypatch.setenv(WITH_TORCH, "1")
    pool = pools.worker_pool(max_workers=1, timeout=120)
    try:
        torch_there = pool.submit(eval, FACTS).result()[0]
    finally:
        pools.shutdown_pool(pool)
    assert torch_there is not None and torch_there.__name__ == "torch"


def test_a_pool_shut_down_with_tasks_queued_cancels_them():
    """Ctrl-C while a batch's builds are queued: TVM's shutdown killed the workers, then ran every queued task,
    each on a worker started again for it (seconds per task). The queued ones are cancelled."""
    pool = pools.worker_pool(max_workers=2, timeout=60)
    futures = [pool.submit(time.sleep, 1) for _ in range(8)]  # two taken by the pool's two threads, six queued
    time.sleep(0.3)
    pools.shutdown_pool(pool)
    assert [f.cancelled() for f in futures] == [False] * 2 + [True] * 6


def test_a_wait_for_a_workers_task_hears_a_ctrl_c_where_waits_restart_after_signals():
    """TVM's tuning leaves Python's SIGINT handler installed with SA_RESTART: a wait on a worker's answer
    (``future.result()``) is not woken by a Ctrl-C, which was heard only once the task ended. ``result_of`` waits in
    short steps: the Ctrl-C stops the wait while the task still runs, and the pool's shutdown ends the task (it
    waited for it: TVM closed the answers' pipe while a thread read from it)."""
    import threading

    pool = pools.worker_pool(max_workers=1, timeout=None)
    # Python's own handler (a background job starts with SIGINT ignored), installed as a tuning run leaves it
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.siginterrupt(signal.SIGINT, False)
    try:
        future = pool.submit(time.sleep, 30)
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            pools.result_of(future)
        assert not future.done()
    finally:
        signal.signal(signal.SIGINT, previous)
        pools.shutdown_pool(pool)
    assert future.exception() is not None  # ended by the shutdown, not run to its end


def test_what_a_worker_prints_goes_to_the_commands_stderr_not_its_result(capfd):
    """A command's standard output is its result (``--json``): a line a worker writes there (TVM, a compiler, a
    task's print) would break it. Workers write to the command's standard error instead."""
    pool = pools.worker_pool(max_workers=1, timeout=60)
    try:
        assert pool.submit(print, "a worker's line", flush=True).result() is None
    finally:
        pools.shutdown_pool(pool)
    out, err = capfd.readouterr()
    assert "a worker's line" not in out and "a worker's line" in err


@pytest.mark.parametrize("closed", [1, 2])
def test_workers_run_when_the_command_runs_with_its_stdout_or_stderr_closed(tmp_path, closed):
    """A command started with ``>&-`` or ``2>&-`` (a cron job, a daemon): its workers leave their output where it
    is. Sending it to a closed or reused descriptor killed every worker (no ``sys.stdout``), or wrote onto the
    pipe of answers (a pipe took descriptor 2), and good programs were recorded as failing."""
    out = tmp_path / "answer"
    code = ("import sys\n"
            "from costlab.metaschedule import pools\n"
            "pool = pools.worker_pool(max_workers=1, timeout=120)\n"
            "answers = [pool.submit(int, '42').result() for _ in range(3)]\n"
            "pools.shutdown_pool(pool)\n"
            "open(sys.argv[1], 'w').write(str(answers))\n")
    done = subprocess.run([sys.executable, "-c", code, str(out)], preexec_fn=lambda: os.close(closed), timeout=300)
    assert done.returncode == 0 and out.read_text() == "[42, 42, 42]"


@pytest.mark.parametrize("sig, words", [(signal.SIGKILL, "killed by SIGKILL; the kernel's out-of-memory killer"),
                                        (signal.SIGTERM, "killed by SIGTERM")])
def test_a_worker_killed_in_its_task_is_reported_with_its_signal(sig, words):
    """A worker that died in its task (the out-of-memory killer's SIGKILL, a SIGTERM of its own; signals that leave a
    core file are not tried) was reported as TVM's bare "Subprocess terminated": the message now names the signal,
    and keeps TVM's words, which the rules for interrupted runs look for (``export/stop.recordable``)."""
    pool = pools.worker_pool(max_workers=1, timeout=60)
    try:
        with pytest.raises(ChildProcessError) as got:
            pool.submit(eval, f"__import__('os').kill(__import__('os').getpid(), {int(sig)})").result()
        assert pool.submit(eval, "1 + 1").result() == 2  # the next task starts a new worker
    finally:
        pools.shutdown_pool(pool)
    assert str(got.value).startswith("Subprocess terminated (the worker was") and words in str(got.value)
