"""Hostile programs under bubblewrap: each tries one attack; none may escape.

Two kinds:
* ``RAW``: run directly in the sandbox; the check proves the attack had no effect (the secret is not in the
  output, the host file was not written, the host listener saw no connection, the run was stopped...).
* ``VERDICT``: submitted as a HumanEval+ answer (HumanEval/53, ``add``) through the env; the attack tries to
  fake a pass or break the harness, so the verdict must be a fail, and the host must be unharmed.
After every program: our process is alive, the canary files are unchanged, nothing new outside.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import uuid
from pathlib import Path

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.sandbox import BubblewrapSandbox, Limits, MiB
from tests.isolation import require_bubblewrap

gym.register_envs(lopd_envs)

@pytest.fixture(autouse=True)
def _needs_bubblewrap():
    """Loud skip without bubblewrap (a failure under CI=true): these tests are about its isolation."""
    require_bubblewrap()

REPO = Path(__file__).resolve().parents[1]
TOKEN = "lopd-canary-" + uuid.uuid4().hex
HOST_TMP = Path("/tmp") / f"lopd-hostile-{os.getpid()}"
HOME_CANARY = Path.home() / f".lopd-hostile-canary-{os.getpid()}"


@pytest.fixture(scope="module")
def host():
    """Secrets and targets on the host side, and a TCP listener on the host's loopback."""
    HOST_TMP.mkdir(exist_ok=True)
    (HOST_TMP / "secret.txt").write_text(TOKEN)
    HOME_CANARY.write_text(TOKEN)
    os.environ["LOPD_HOSTILE_SECRET"] = TOKEN
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    accepted: list = []
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except OSError:
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    info = {"port": listener.getsockname()[1], "accepted": accepted, "pid": os.getpid(),
            "sandbox": BubblewrapSandbox(Limits(timeout=4, memory=512 * MiB, output=1 * MiB))}
    yield info
    stop.set()
    thread.join(1)
    listener.close()
    os.environ.pop("LOPD_HOSTILE_SECRET", None)
    HOME_CANARY.unlink(missing_ok=True)
    for f in HOST_TMP.iterdir():
        f.unlink()
    HOST_TMP.rmdir()


def no_trace_outside():
    """Nothing an attack may have written exists on the host."""
    assert not (HOST_TMP / "pwned").exists()
    assert not (REPO / "pwned").exists()
    assert not Path("/tmp/pwned").exists()
    assert not (Path.home() / "pwned").exists()
    assert not Path("/usr/pwned").exists()
    assert (HOST_TMP / "secret.txt").read_text() == TOKEN and HOME_CANARY.read_text() == TOKEN


def not_in_output(r):
    return TOKEN not in r.stdout and TOKEN not in r.stderr


# (name, what it tries, program, check(result, host) -> bool)
RAW = [
    ("read_env_secret", "print the host's environment variables",
     "import os\nprint(dict(os.environ))", lambda r, h: not_in_output(r) and "LOPD_HOSTILE_SECRET" not in r.stdout),
    ("read_home_file", "read a file in the host user's home",
     f"print(open({str(HOME_CANARY)!r}).read())", lambda r, h: not_in_output(r) and r.exit_code != 0),
    ("read_host_tmp", "read a file in the host's /tmp",
     f"print(open({str(HOST_TMP / 'secret.txt')!r}).read())", lambda r, h: not_in_output(r) and r.exit_code != 0),
    ("read_project_tree", "read the project's own files",
     f"print(open({str(REPO / 'pyproject.toml')!r}).read())", lambda r, h: "[project]" not in r.stdout),
    ("walk_filesystem", "search the whole visible file system for the canary",
     "import os\nfor d, _, fs in os.walk('/'):\n    [print(os.path.join(d, f)) for f in fs if 'canary' in f or 'secret' in f]",
     lambda r, h: not_in_output(r) and "lopd-hostile" not in r.stdout),
    ("read_etc_shadow", "read /etc/shadow and /etc/passwd",
     "for p in ('/etc/shadow', '/etc/passwd'):\n    try: print(open(p).read())\n    except OSError as e: print('no', e)",
     lambda r, h: "root:" not in r.stdout),
    ("read_root_dir", "list /root",
     "import os\nprint(os.listdir('/root'))", lambda r, h: r.exit_code != 0),
    ("proc_environ_of_pid1", "read other processes' environment through /proc",
     "import os\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n        try: print(open(f'/proc/{p}/environ','rb').read())\n        except OSError: pass",
     lambda r, h: not_in_output(r)),
    ("proc_list_host_processes", "list host processes through /proc",
     "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))",
     lambda r, h: str(h["pid"]) not in r.stdout.replace(",", " ").split() and len(eval(r.stdout)) <= 4),
    ("proc_cmdline_snoop", "read command lines of every visible process",
     "import os\nfor p in os.listdir('/proc'):\n    if p.isdigit(): print(open(f'/proc/{p}/cmdline','rb').read())",
     lambda r, h: "pytest" not in r.stdout),
    ("connect_host_loopback", "connect to a TCP server on the host's 127.0.0.1",
     "import socket\nport = __PORT__\ntry:\n    socket.create_connection(('127.0.0.1', port), timeout=1)\n    print('connected')\nexcept OSError as e: print('blocked', e)",
     lambda r, h: "connected" not in r.stdout and not h["accepted"]),
    ("connect_internet", "open a TCP connection to the internet",
     "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=1); print('connected')\nexcept OSError as e: print('blocked', e)",
     lambda r, h: "connected" not in r.stdout and "blocked" in r.stdout),
    ("dns_lookup", "resolve a host name",
     "import socket\ntry:\n    print(socket.gethostbyname('example.com'))\nexcept OSError as e: print('blocked', e)",
     lambda r, h: "blocked" in r.stdout),
    ("udp_send", "send a UDP datagram out",
     "import socket\ntry:\n    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n    s.sendto(b'x', ('8.8.8.8', 53)); print('sent')\nexcept OSError as e: print('blocked', e)",
     lambda r, h: "blocked" in r.stdout),
    ("write_host_tmp", "write a file into the host's /tmp",
     "open('/tmp/pwned', 'w').write('x')\nimport os\nprint(os.path.exists('/tmp/pwned'))",
     lambda r, h: True),  # the sandbox's own /tmp is private; no_trace_outside() checks the host
    ("write_project_tree", "write into the project directory",
     f"open({str(REPO / 'pwned')!r}, 'w').write('x')", lambda r, h: r.exit_code != 0),
    ("write_home", "write into the host home directory",
     f"open({str(Path.home() / 'pwned')!r}, 'w').write('x')", lambda r, h: r.exit_code != 0),
    ("write_working_dir", "modify its own program folder (mounted read-only)",
     "open('/sandbox/main.py', 'a').write('x')", lambda r, h: r.exit_code != 0),
    ("write_system", "write into /usr",
     "open('/usr/pwned', 'w').write('x')", lambda r, h: r.exit_code != 0),
    ("fill_tmp", "fill the disk through /tmp",
     "f = open('/tmp/big', 'wb')\nwhile True: f.write(b'x' * (1 << 20))", lambda r, h: r.exit_code != 0 and not r.timed_out),
    ("fork_bomb", "fork without limit",
     "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", lambda r, h: r.timed_out or r.exit_code != 0),
    ("thread_bomb", "start threads without limit",
     "import threading, time\nts = []\nwhile True: t = threading.Thread(target=time.sleep, args=(100,)); t.start(); ts.append(t)",
     lambda r, h: r.exit_code != 0),
    # bounded at 4 GiB (then it exits 0, and fails the check) so that a broken limit cannot take the host down;
    # its own 60 s timer (SLOW_ATTACKS): on a loaded machine touching 512 MiB took longer than the usual 4 s, and
    # the timer, not the memory limit, stopped it
    ("memory_bomb", "allocate memory without limit",
     "x = []\nfor _ in range(64): x.append(bytearray(64 << 20))", lambda r, h: r.oom),
    ("infinite_loop", "spin forever", "while True: pass", lambda r, h: r.timed_out),
    ("sleep_past_timeout", "sleep past the time limit", "import time\ntime.sleep(60)",
     lambda r, h: r.timed_out and r.wall_time < 8),
    ("output_flood", "flood stdout", "import sys\nwhile True: sys.stdout.write('A' * 100000)",
     lambda r, h: r.truncated and len(r.stdout) <= 1 * MiB),
    ("stderr_flood", "flood stderr", "import sys\nwhile True: sys.stderr.write('E' * 100000)",
     lambda r, h: r.truncated and len(r.stderr) <= 1 * MiB),
    ("kill_parent", "SIGKILL its parent process", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('done')",
     lambda r, h: True),
    ("kill_everything", "kill(-1, SIGKILL): every process it may signal", "import os, signal\nos.kill(-1, signal.SIGKILL)",
     lambda r, h: True),
    ("kill_host_pid", "SIGKILL the host test process by its pid", "import os\ntry:\n    os.kill(__PID__, 9); print('sent')\nexcept OSError as e: print('blocked', e)",
     lambda r, h: "blocked" in r.stdout),
    ("setuid_root", "become root", "import os\ntry:\n    os.setuid(0); print('root')\nexcept OSError as e: print('blocked', e)",
     lambda r, h: "blocked" in r.stdout),
    ("mount_host", "mount a file system", "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.mount(b'proc', b'/tmp', b'proc', 0, None), ctypes.get_errno())",
     lambda r, h: r.stdout.split()[:1] == ["-1"]),
    ("nested_userns", "create a nested user namespace to regain capabilities",
     "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.unshare(0x10000000), ctypes.get_errno())",
     lambda r, h: r.stdout.split()[:1] == ["-1"]),
    ("ptrace_host_process", "ptrace-attach to the host test process",
     "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.ptrace(16, __PID__, None, None), ctypes.get_errno())",
     lambda r, h: r.stdout.split()[:1] == ["-1"]),
    ("daemon_survives", "leave a double-forked daemon behind to act after the run",
     "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(3)\n        open('/tmp/pwned', 'w').write('late')\n        os._exit(0)\n    os._exit(0)\nprint('parent exits')",
     lambda r, h: r.ok),
    ("raise_rlimits", "raise its own hard resource limits",
     "import resource\ntry:\n    resource.setrlimit(resource.RLIMIT_AS, (-1, -1)); print('raised')\nexcept (ValueError, OSError) as e: print('blocked', e)",
     lambda r, h: "blocked" in r.stdout),
    ("device_access", "read raw devices",
     "import os\nprint(sorted(os.listdir('/dev')))\nfor d in ('/dev/mem', '/dev/sda', '/dev/vda', '/dev/kmsg'):\n    try: open(d, 'rb').read(1); print('read', d)\n    except OSError: pass",
     lambda r, h: "read /dev" not in r.stdout),
    ("tiocsti_inject", "inject keystrokes into the controlling terminal",
     "import fcntl, termios\ntry:\n    fcntl.ioctl(0, termios.TIOCSTI, b'x'); print('injected')\nexcept OSError as e: print('blocked', e)",
     lambda r, h: "injected" not in r.stdout),
]

# programs submitted as answers to HumanEval/53 (add(x, y) -> x + y); each must be judged a failure
VERDICT = [
    # module-level attacks are written as assignments the entry point uses, so the sanitiser keeps them
    ("exit0_at_import", "sys.exit(0) before the tests run",
     "import sys\n_boom = sys.exit(0)\ndef add(x, y):\n    _boom\n    return 0"),
    ("os_exit_at_import", "os._exit(0) before the tests run",
     "import os\n_boom = os._exit(0)\ndef add(x, y):\n    _boom\n    return 0"),
    ("exit0_in_call", "sys.exit(0) inside the function", "import sys\ndef add(x, y):\n    sys.exit(0)\n    return x + y"),
    ("kill_self", "SIGKILL itself during the tests",
     "import signal\ndef add(x, y):\n    signal.raise_signal(signal.SIGKILL)\n    return x + y"),
    ("always_equal", "return an object whose __eq__ always says yes",
     "class Yes:\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\ndef add(x, y):\n    return Yes()"),
    ("int_subclass_eq", "return an int subclass that equals everything",
     "class I(int):\n    def __eq__(self, o): return True\n    __hash__ = int.__hash__\ndef add(x, y):\n    return I(0)"),
    ("fake_stdout_records", "print fake harness result lines on stdout",
     "def add(x, y):\n    for i in range(200):\n        print('{\"g\":\"base\",\"i\":%d,\"v\":%d,\"t\":0}' % (i, x + y))\n    return -1"),
    ("fake_fd_records", "write fake 'all passed' records into every open descriptor",
     "import os\ndef add(x, y):\n    for fd in range(3, 64):\n        try: os.write(fd, b'{\"g\":\"base\",\"end\":1}\\n{\"g\":\"plus\",\"end\":1}\\n')\n        except OSError: pass\n    return -1"),
    ("close_all_fds", "close every descriptor so no result can be reported",
     "import os\n_c = os.closerange(0, 256)\ndef add(x, y):\n    _c\n    return x + y + 1"),
    ("patch_json", "monkeypatch json.dumps used by the harness",
     "import json\n_p = setattr(json, 'dumps', lambda *a, **k: '{\"g\":\"base\",\"i\":0,\"v\":0}')\n"
     "def add(x, y):\n    _p\n    return -1"),
    ("inspect_frames", "look for expected outputs in the harness's frames",
     "import sys\ndef add(x, y):\n    f = sys._getframe(1)\n    while f:\n        for k, v in f.f_locals.items():\n            if 'expect' in k: return v\n        f = f.f_back\n    return -1"),
    ("gc_scan", "scan every live object for the expected outputs",
     "import gc\ndef add(x, y):\n    for o in gc.get_objects():\n        if isinstance(o, dict) and 'plus' in o and 'base' in o: return o\n    return -1"),
    ("disable_alarm_and_spin", "cancel the per-test timer, then loop forever",
     "import signal\ndef add(x, y):\n    signal.setitimer(signal.ITIMER_REAL, 0)\n    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
     "    while True: pass\n    return x + y"),
    ("keyboard_interrupt", "raise KeyboardInterrupt out of the function", "def add(x, y):\n    raise KeyboardInterrupt"),
    ("recursion_bomb", "recurse without limit", "import sys\nsys.setrecursionlimit(10**9)\ndef add(x, y):\n    return add(x, y)"),
    ("memory_bomb_in_call", "exhaust memory during a test",
     "def add(x, y):\n    b = []\n    while True: b.append(bytearray(1 << 26))\n    return x + y"),
    ("print_flood_in_call", "flood the captured output during a test",
     "def add(x, y):\n    while True: print('x' * 100000)\n    return x + y"),
    ("sleep_in_call", "sleep past the time limit", "import time\ndef add(x, y):\n    time.sleep(30)\n    return x + y"),
    ("fork_in_call", "fork a child that reports instead of the parent",
     "import os\ndef add(x, y):\n    pid = os.fork() if os.fork else 0\n    return x + y + 1"),
    ("builtins_tamper", "replace builtins used by the harness",
     "import builtins\n_t = (setattr(builtins, 'isinstance', lambda *a: True), setattr(builtins, 'len', lambda *a: 0))\n"
     "def add(x, y):\n    _t\n    return -1"),
]


def _program(code: str, host) -> str:
    return code.replace("__PORT__", str(host["port"])).replace("__PID__", str(host["pid"]))


#: attacks whose limit under test is not the timer: run with a timer long enough for a loaded machine
SLOW_ATTACKS = {"memory_bomb": 60}


@pytest.mark.parametrize("name,tries,code,check", RAW, ids=[r[0] for r in RAW])
def test_raw_attack_is_contained(host, name, tries, code, check):
    sandbox = host["sandbox"]
    if name in SLOW_ATTACKS:
        sandbox = BubblewrapSandbox(Limits(timeout=SLOW_ATTACKS[name], memory=512 * MiB, output=1 * MiB))
    r = sandbox.run(_program(code, host))
    print(f"{name}: tries to {tries} -> {r.status()} exit={r.exit_code} out={r.stdout[:120]!r}")
    assert r.error is None, r.error
    assert check(r, host), (tries, r)
    no_trace_outside()


@pytest.fixture(scope="module")
def add_env():
    # evalplus's own per-task cap is 60 s per group; 3 s keeps the hanging attacks quick here
    env = gym.make("lopd/HumanEvalPlus-v0", sandbox="bubblewrap", timeout_per_task=3)
    env.reset(options={"task_id": "HumanEval/53"})
    return env


@pytest.mark.parametrize("name,tries,code", VERDICT, ids=[v[0] for v in VERDICT])
def test_attack_on_the_verdict_fails(host, add_env, name, tries, code):
    add_env.reset(options={"task_id": "HumanEval/53"})
    _, reward, terminated, _, info = add_env.step(f"```python\n{code}\n```")
    score = info["score"]
    print(f"{name}: tries to {tries} -> base={score.get('base_status')} plus={score.get('plus_status')} "
          f"{score.get('base', {}).get('reason', '')}")
    assert terminated and reward == 0.0 and score["passed"] is False, score
    no_trace_outside()


def test_the_honest_answer_passes(add_env):
    add_env.reset(options={"task_id": "HumanEval/53"})
    _, reward, *_ = add_env.step("```python\ndef add(x: int, y: int):\n    return x + y\n```")
    assert reward == 1.0


def test_no_daemon_outlives_its_run(host):
    marker = "lopd-daemon-" + uuid.uuid4().hex
    code = ("import os, sys\nif os.fork() == 0:\n    os.setsid()\n"
            f"    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(30)', {marker!r}])\n"
            "print('x')")
    r = host["sandbox"].run(code)
    assert r.ok
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert marker not in ps  # the PID namespace took the sleeper down with the run


def test_suite_size():
    assert len(RAW) + len(VERDICT) >= 40
