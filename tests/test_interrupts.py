"""Ctrl-C at any moment (issue 50): while jax imports, inside a callback that swallows the
KeyboardInterrupt, during a study on a process pool. Each is a real process sent SIGINT (the pool's
as a terminal sends it, to the whole process group): exit code 130, the one line
`perfmodel: interrupted` on stderr, no output file, no worker left. The verdicts do not time the
stop: a command the interrupt did not end runs to its end (exit 0, a file written) or until the
generous timeout."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfmodel import interrupt
from perfmodel.files import write_new

REPO = Path(__file__).resolve().parents[1]
PERFMODEL = Path(sys.executable).parent / "perfmodel"
LINE = "perfmodel: interrupted\n"
TIMEOUT_S = 240


def finish(proc: subprocess.Popen) -> tuple[str, str]:
    """stdout, stderr of a process sent SIGINT; a process still running after TIMEOUT_S is killed."""
    try:
        return proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"the command or a worker (holding its stderr) still runs {TIMEOUT_S} s after Ctrl-C: "
                    f"{stderr[-2000:]}")


def wait_for(path: Path, proc: subprocess.Popen) -> None:
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)


def test_ctrl_c_while_jax_imports(tmp_path):
    """Python's own handler raised the KeyboardInterrupt inside `import jax`: a 20-line traceback."""
    out = tmp_path / "p.json"
    proc = subprocess.Popen([sys.executable, "-X", "importtime", str(PERFMODEL), "evaluate", "--system", "h100-8",
                             "--model", "dlrm-small", "--save-plan", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            start_new_session=True)
    seen = []
    for line in proc.stderr:            # -X importtime: a line as each module is imported
        seen.append(line)
        if line.rstrip().endswith(" jax._src"):
            break
    proc.send_signal(signal.SIGINT)
    stdout, stderr = finish(proc)
    assert seen[-1].rstrip().endswith(" jax._src")     # jax has begun to load, it is not done
    rest = [line for line in stderr.splitlines(keepends=True) if not line.startswith("import time:")]
    assert proc.returncode == 130 and rest == [LINE] and stdout == ""
    assert not out.exists()


SWALLOWED = """
import sys, time
from pathlib import Path
from perfmodel import cli
from perfmodel.cli import evaluate
from perfmodel.files import write_new

class Slow:
    def __del__(self):       # Python swallows (prints and ignores) an exception raised here
        time.sleep(0.05)

def command(args):
    Path(sys.argv[-1] + ".ready").touch()
    end = time.monotonic() + 120
    while time.monotonic() < end:
        Slow()
    write_new(args.save_plan, "{}")
    return 0

evaluate._cmd_evaluate = command
sys.exit(cli.main())
"""


def test_ctrl_c_that_a_callback_swallows_still_ends_the_command(tmp_path):
    """A KeyboardInterrupt raised in JAX's garbage-collection callback was swallowed: the command ran
    to its end, wrote --save-plan and exited 0. Here it is raised in a __del__, which Python swallows
    the same way."""
    out = tmp_path / "p.json"
    argv = ["perfmodel", "evaluate", "--system", "h100-8", "--model", "dlrm-small", "--save-plan", str(out)]
    proc = subprocess.Popen([sys.executable, "-c", f"import sys; sys.argv = {argv!r}\n" + SWALLOWED],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            start_new_session=True)
    wait_for(Path(str(out) + ".ready"), proc)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = finish(proc)
    assert proc.returncode == 130 and stderr == LINE and stdout == ""
    assert not out.exists()


JOB = """
import os, time
from pathlib import Path

def job(folder, i):
    Path(folder, f"{i}.pid").write_text(str(os.getpid()))
    time.sleep(120)
"""

POOL = """
import sys
from perfmodel import cli
from perfmodel.analysis import executors
from perfmodel.cli import evaluate
import job

def command(args):
    executors.run(job.job, [(sys.argv[-1], 0), (sys.argv[-1], 1)], workers=2)
    return 0

evaluate._cmd_evaluate = command
sys.exit(cli.main())
"""


def test_ctrl_c_stops_a_pool_at_once_and_its_workers_print_nothing(tmp_path):
    """Each worker printed a KeyboardInterrupt traceback, and the pool waited for its jobs to end."""
    (tmp_path / "job.py").write_text(JOB)
    argv = ["perfmodel", "evaluate", "--system", "h100-8", "--model", "dlrm-small", "--chip", str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", f"import sys; sys.argv = {argv!r}\n" + POOL], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            start_new_session=True)
    for i in (0, 1):
        wait_for(tmp_path / f"{i}.pid", proc)
    os.killpg(proc.pid, signal.SIGINT)              # as a terminal's Ctrl-C: to every process of the group
    stdout, stderr = finish(proc)
    assert proc.returncode == 130 and stderr == LINE and stdout == ""
    pids = [int((tmp_path / f"{i}.pid").read_text()) for i in (0, 1)]
    end = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_no_result_is_written_after_a_swallowed_ctrl_c(tmp_path, monkeypatch):
    monkeypatch.setitem(interrupt._state, "pressed", True)
    with pytest.raises(KeyboardInterrupt):
        write_new(tmp_path / "out.csv", "a,b\n")
    assert list(tmp_path.iterdir()) == []


IMPORT = """
import signal, sys, threading
sys.argv = ["perfmodel", "evaluate"]          # as the command line's process looks
before = signal.getsignal(signal.SIGINT), sys.unraisablehook
import perfmodel as pm
pm.evaluate, pm.search                        # the whole public API loaded
after = signal.getsignal(signal.SIGINT), sys.unraisablehook
threads = sorted(t.name for t in threading.enumerate() if t.name.startswith("perfmodel"))
print(before == after, after[0] is signal.default_int_handler, signal.set_wakeup_fd(-1), threads)
"""


def test_importing_perfmodel_installs_nothing():
    """Importing the library read sys.argv and, in a process that looked like the command line,
    replaced Python's Ctrl-C handler, its unraisable hook and its wakeup fd, and started a thread:
    a library import now installs nothing (the command line's entry point does)."""
    done = subprocess.run([sys.executable, "-c", IMPORT], capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "True True -1 []\n"


MASK_JOB = """
import signal

def job():
    return signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
"""

MASKS = """
from perfmodel import interrupt
from perfmodel.analysis import executors
import maskjob
library = executors.run(maskjob.job, [(), ()], workers=2)
interrupt.install()                       # as main() does for the command line
command = executors.run(maskjob.job, [(), ()], workers=2)
print(library, command)
"""


def test_a_commands_workers_block_ctrl_c_and_a_librarys_do_not(tmp_path):
    """Workers no longer learn from their own sys.argv that they serve the command line: the command
    starts them with SIGINT blocked (they keep it through exec); a program's own pool keeps Ctrl-C."""
    (tmp_path / "maskjob.py").write_text(MASK_JOB)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", MASKS], capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO,
                          env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[False, False] [True, True]\n"
