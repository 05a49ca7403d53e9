"""The program that runs INSIDE the sandbox for one EnvScaler episode (standard library only), sent after
:data:`lopd_envs.sandbox.session.CHANNEL` (``read_frame``/``write_frame``) and never imported by the host.

It holds the episode's one environment instance and answers ``create``, ``call``, ``snapshot`` and ``check``
requests as EnvScaler's runner does. Checks are isolated from each other and from the worker (issue 24): each
runs in a forked child under its own deadline (``shared``: one child on one state object, as the reference),
after every other process of the sandbox is killed and ``/tmp`` and ``/dev/shm`` are emptied. That clearing is
done only as the init of its own PID namespace (bubblewrap), where a check can also neither signal, trace nor
read the worker; outside one (the process backend) ``kill(-1)`` would reach the host's processes. The host
trusts no reply: it enforces its own deadlines and budgets.
"""
# pyright: reportUndefinedVariable=false
# (read_frame, write_frame and channel_fds come from the channel prelude this program is sent after)
import builtins
import collections  # noqa: F401 - preloaded: generated environment classes import these
import copy
import datetime  # noqa: F401
import json
import os
import re  # noqa: F401
import select
import signal
import stat
import time
import traceback
import types
import typing  # noqa: F401
import uuid  # noqa: F401

MAX_ERROR = 20000
#: The init of its own PID namespace (bubblewrap), where clearing the sandbox between checks is safe.
OWN_NAMESPACE = os.getpid() == 1
PRIVATE_FOLDERS = ("/tmp", "/dev/shm")
CLEAR_PATIENCE = 2.0  # seconds to kill and reap what is left before a check (SIGKILL: normally < 1 ms)


def _state(instance):
    return copy.deepcopy({k: v for k, v in vars(instance).items() if not (k.startswith("__") and k.endswith("__"))})


def _jsonable(value, depth=0):
    if depth > 40:
        return repr(value)[:200]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    return repr(value)


def _error_text(prefix=""):
    text = prefix + traceback.format_exc()
    return text if len(text) <= MAX_ERROR else text[:MAX_ERROR] + "\n...[truncated]"


class Episode:
    def __init__(self):
        self.instance = None
        self.initial = None

    def create(self, req):
        module = types.ModuleType("dynamic_env")
        try:
            exec(compile(req["code"], "<env_class_code>", "exec"), module.__dict__)
        except BaseException:  # noqa: BLE001 - SystemExit from env code must not end the worker
            return {"ok": False, "error": _error_text("env class code failed: ")}
        cls = getattr(module, req["class_name"], None)
        if cls is None:
            return {"ok": False, "error": f"Class '{req['class_name']}' not found in provided env_class_code."}
        # One copy, handed to the constructor and then set attribute by attribute, as the reference does: a
        # class that keeps a view of its config (``self.init_config = init_config``) shares its objects with
        # the attributes, so what a tool changes shows in both (two copies made them drift apart).
        config = copy.deepcopy(req.get("init_config"))
        try:
            try:
                instance = cls(config) if config and isinstance(config, dict) else cls({})
            except TypeError:
                instance = cls()
            if config and isinstance(config, dict):
                for key, value in config.items():
                    setattr(instance, key, value)
            self.instance = instance
            self.initial = _state(instance)
        except BaseException:  # noqa: BLE001 - a constructor's exception (SystemExit too) is the reply, not the worker's end
            return {"ok": False, "error": _error_text("environment construction failed: ")}
        return {"ok": True}

    def call(self, req):
        name, names = req["name"], req.get("names")
        if self.instance is None or not isinstance(name, str):
            return {"ok": False, "invalid": True}
        if (names is not None and name not in names) or not hasattr(self.instance, name):
            return {"ok": False, "invalid": True}
        try:
            result = getattr(self.instance, name)(**req.get("arguments", {}))
            text = f"{result}"
            failed = isinstance(result, dict) and result.get("success") is False
        except BaseException:  # noqa: BLE001 - a tool's exception (SystemExit too) is EnvScaler's "Error: <Exception>" observation
            return {"ok": False, "error": _error_text("Error: <Exception>\n")}
        limit = int(req.get("max_chars", 100000))
        if len(text) > limit:
            text = text[:limit] + f"...[truncated {len(text) - limit} chars]"
        return {"ok": True, "result": text, "failed": failed}

    def snapshot(self, req):
        state = self.initial if req.get("which") == "initial" else _state(self.instance)
        return {"ok": True, "state": _jsonable(state)}

    def check(self, req):
        """Verdicts of every check against each requested state (``"final"`` or ``"initial"``), one list per
        state: one check at a time, each in a forked child with its own deadline, in a cleared sandbox."""
        if self.instance is None:
            return {"ok": False, "error": "no environment"}
        states = {"final": _state(self.instance), "initial": self.initial}
        timeout = float(req.get("timeout", 5.0))
        verdicts = []
        for name in req["states"]:
            if req.get("shared") is True:
                verdicts += self._shared_checks(req["funcs"], states[name], timeout)
                continue
            for source in req["funcs"]:
                _clear_sandbox()
                started = self._start_check(source, states[name])
                verdicts.append(started if isinstance(started, dict)
                                else self._collect(started, time.monotonic() + timeout, timeout))
        _clear_sandbox()
        n = len(req["funcs"])
        return {"ok": True, "results": [verdicts[i * n:(i + 1) * n] for i in range(len(req["states"]))]}

    def _start_check(self, source, final):
        try:
            pid, fd = _fork_with_pipe()
        except OSError as exc:
            return {"passed": False, "error": f"could not start the check: {exc}"}
        if pid == 0:  # the child: run one check, report one verdict, never return
            verdict = {"passed": False, "error": "could not start the check"}
            try:
                _enter_check_child()
                verdict = _run_check(source, self.initial, copy.deepcopy(final))
            finally:
                try:
                    os.write(fd, json.dumps(verdict).encode()[:8000])
                finally:
                    os._exit(0)
        return pid, fd

    def _shared_checks(self, funcs, final, timeout):
        """Official grading: the checks one after another on ONE final-state object, as the reference's
        ``calculate_reward`` hands the same ``final_state`` to every ``check_func`` (a check that changes it
        changes what the later ones see). They run in one forked child, which clears the sandbox between
        them as the worker does between isolated checks, and reports a start mark and then a verdict per
        check, each under its own deadline. A check that hangs, crashes that child or writes a malformed
        verdict fails, and the checks after it go on in a new child from an untouched copy of the state."""
        verdicts = []
        while len(verdicts) < len(funcs):
            _clear_sandbox()
            rest = funcs[len(verdicts):]
            try:
                pid, fd = _fork_with_pipe()
            except OSError as exc:
                return verdicts + [{"passed": False, "error": f"could not start the check: {exc}"}] * len(rest)
            if pid == 0:
                try:
                    _enter_check_child()
                    for k, source in enumerate(rest):
                        if k:
                            _clear_sandbox()  # what the previous check left running or wrote is gone
                        os.write(fd, b'{"start": true}\n')
                        verdict = _run_check(source, self.initial, final)
                        os.write(fd, json.dumps(verdict).encode()[:8000] + b"\n")
                finally:
                    os._exit(0)
            got, error = self._collect_shared(pid, fd, len(rest), timeout)
            verdicts += got
            if error is not None:
                verdicts.append({"passed": False, "error": error})
        _clear_sandbox()
        return verdicts

    @staticmethod
    def _collect_shared(pid, read_fd, count, timeout):
        """The verdicts a shared child reports (each line: a start mark, then the verdict), and why the next
        one did not come (``None`` once all ``count`` came). Orphans the child's clearing kills are handed to
        this worker (the init): they are reaped while waiting, so they stop counting against the process cap."""
        verdicts, buffer, started, error, reaped = [], b"", False, None, False
        deadline = time.monotonic() + timeout
        try:
            while len(verdicts) < count and error is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    error = f"check timed out after {timeout:g} s"
                    break
                ready = select.select([read_fd], [], [], min(remaining, 0.005))[0]
                reaped = _reap_orphans(pid) or reaped
                if not ready:
                    continue
                chunk = os.read(read_fd, 8192)
                if not chunk:
                    error = "check crashed without a verdict"
                    break
                buffer += chunk
                while b"\n" in buffer and len(verdicts) < count and error is None:
                    line, buffer = buffer.split(b"\n", 1)
                    parsed = _parse_line(line)
                    if not started:
                        started = parsed == {"start": True}
                        error = None if started else "check wrote a malformed verdict"
                    elif parsed is None or "start" in parsed:
                        error = "check wrote a malformed verdict"
                    else:
                        verdicts.append(_verdict(parsed))
                        started = False
                    deadline = time.monotonic() + timeout
                if len(buffer) > 8192:
                    error = "check wrote a malformed verdict"
        finally:
            _end_child(pid, read_fd, reaped)
        return verdicts, error

    @staticmethod
    def _collect(child, deadline, timeout):
        pid, read_fd = child
        data = b""
        try:
            while len(data) < 8192:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not select.select([read_fd], [], [], remaining)[0]:
                    break
                chunk = os.read(read_fd, 8192)
                if not chunk:
                    break
                data += chunk
        finally:
            _end_child(pid, read_fd)
        try:  # the check's own process wrote this: anything but a verdict object fails that check alone
            verdict = json.loads(data)
            if isinstance(verdict, dict):
                return _verdict(verdict)
        except (ValueError, RecursionError):
            pass
        if time.monotonic() >= deadline:
            return {"passed": False, "error": f"check timed out after {timeout:g} s"}
        return {"passed": False, "error": "check crashed without a verdict"}


def _fork_with_pipe():
    """``os.fork()`` with a pipe from the child to the parent: ``(0, write end)`` in the child, ``(pid, read
    end)`` in the parent, each having closed the end it does not use. Where the fork fails, the pipe is
    closed again and the ``OSError`` raised."""
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        raise
    if pid == 0:
        os.close(read_fd)
        return 0, write_fd
    os.close(write_fd)
    return pid, read_fd


def _end_child(pid, read_fd, reaped=False):
    """Done with a check child: its pipe closed, the child killed and reaped (unless the worker reaped it
    already, as an orphan's init does while waiting)."""
    os.close(read_fd)
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    if not reaped:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _verdict(reported):
    """A verdict object as a check child reported it, kept to what the host reads: passed only when ``True``,
    the error as text of at most 1,000 characters."""
    error = reported.get("error")
    return {"passed": reported.get("passed") is True, "error": None if error is None else str(error)[:1000]}


def _enter_check_child():
    """In a check's forked child: first to go on memory, no channel, stdin and stdout on /dev/null."""
    _first_to_go()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in channel_fds():  # noqa: F821 - defined by the channel prelude
        os.close(fd)
    os.dup2(null, 0)
    os.dup2(null, 1)


def _run_check(source, initial, final):
    """One ``check_func`` against ``final`` (a fresh ``initial_state`` copy as its global), as the reference's
    ``run_check_function``: only the bool ``True`` passes; a raise or a non-bool fails with its reason."""
    try:
        namespace = {"__builtins__": builtins, "initial_state": copy.deepcopy(initial)}
        exec(compile(source, "<check_func>", "exec"), namespace)
        if "check_func" not in namespace:
            return {"passed": False, "error": "Function 'check_func' not found."}
        result = namespace["check_func"](final)
        if isinstance(result, bool):
            return {"passed": result is True, "error": None}
        return {"passed": False, "error": "Function did not return a boolean."}
    except BaseException as exc:  # noqa: BLE001 - a raising check fails with its reason, as run_check_function
        return {"passed": False, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}


def _parse_line(line):
    try:
        parsed = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _reap_orphans(child):
    """Reap every exited child (orphans handed to the init included); True when ``child`` was among them."""
    found = False
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return found
        if pid == 0:
            return found
        found = found or pid == child


def _first_to_go():
    """In a check's child: be the first process the kernel kills when the sandbox runs out of memory (raising
    one's own ``oom_score_adj`` needs no privilege; lowering it again does), so the worker survives it."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def _clear_sandbox():
    """Kill and reap every other process of the sandbox, then empty its private folders (only as the init of
    a PID namespace of our own: ``kill(-1)`` from there reaches exactly the namespace). Bounded: a process
    racing the kill is caught by the next round, for at most ``CLEAR_PATIENCE`` seconds."""
    if not OWN_NAMESPACE:
        return
    stop = time.monotonic() + CLEAR_PATIENCE
    while time.monotonic() < stop:
        try:
            os.kill(-1, signal.SIGKILL)  # everyone but us; zombies count until they are reaped
        except OSError:  # ProcessLookupError included: no one else is left
            break
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(0.001)  # a dying parent's children are about to be handed to us
    for folder in PRIVATE_FOLDERS:
        _empty(folder)


def _empty(folder):
    """Remove everything in ``folder``, whatever permissions the sandbox uid gave its own files (iterative:
    a check may leave a chain of folders deeper than the recursion limit)."""
    stack, folders = [folder], []
    while stack:
        current = stack.pop()
        try:
            names = os.listdir(current)
        except OSError:
            continue
        for name in names:
            path = os.path.join(current, name)
            try:
                if stat.S_ISDIR(os.lstat(path).st_mode):
                    os.chmod(path, 0o700)
                    stack.append(path)
                    folders.append(path)
                else:
                    os.unlink(path)
            except OSError:
                pass
    for path in reversed(folders):
        try:
            os.rmdir(path)
        except OSError:
            pass


def _not_dumpable():
    """PR_SET_DUMPABLE 0: other processes of the sandbox uid (a forked check) can neither ptrace this
    worker nor open its file descriptors through /proc, so they cannot write on its channel."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except Exception:  # noqa: BLE001 - no ctypes here: the host's request ids still stop replayed frames
        pass


def main():
    _not_dumpable()
    episode = Episode()
    ops = {"create": episode.create, "call": episode.call, "snapshot": episode.snapshot, "check": episode.check}
    while True:
        frame = read_frame()  # noqa: F821 - defined by the channel prelude
        if frame is None:
            return
        request_id = None
        try:
            req = json.loads(frame)
            request_id = req.get("_id")
            reply = ops[req["op"]](req)
        except BaseException:  # noqa: BLE001 - a broken request or a hostile value's __str__
            reply = {"ok": False, "error": _error_text("worker error: ")}
        reply["_id"] = request_id
        try:
            payload = json.dumps(reply, ensure_ascii=False).encode("utf-8", "replace")
        except BaseException:  # noqa: BLE001 - a reply that cannot be encoded must still get an answer
            payload = json.dumps({"ok": False, "error": "unencodable reply"}).encode()
        write_frame(payload)  # noqa: F821
        _reap_orphans(None)  # exited children, and the orphans an init inherits


if __name__ == "__main__":  # run as the session program; importing this file does nothing
    main()
