"""A jail for code that a model wrote: bubblewrap namespaces, rlimits, one kill at the deadline, a result channel
the candidate cannot write.

`run_untrusted(child_code, payload, limits)` runs `child_code` (a Python script that reads `payload` as JSON
from stdin, runs the candidate and writes its outputs as one length-prefixed JSON frame on the file descriptor
named by its argv[1]) inside a bubblewrap jail:

- own network namespace (only a loopback no one listens on: nothing reachable, `import _socket` included),
  own PID, IPC, UTS and cgroup namespaces;
- a read-only view of /usr, /etc and the Python it runs, nothing else of the host (no /root, /home, /work,
  /run, /var: no keys, no config files, no Unix sockets); a fresh tmpfs as /tmp, the only writable place;
- run by root, the jail drops to nobody (65534) before anything else runs; run by a user, it is that user in
  its own user namespace with no capabilities, and further user namespaces disabled;
- rlimits: CPU seconds, address space, processes, file size, open files, no core files;
- the host waits `wall_s`, then kills bwrap's process group and the namespace's init: the kernel then kills
  every process of the PID namespace, detached `setsid` children included (`--die-with-parent` does the
  same if this process dies first); a wait cut short (Ctrl-C, a task's timeout) kills the jail the same way.

Inside, a small harness (the jail's first process) starts the candidate's interpreter as its child, reads the
child's frame (at most `MAX_FRAME_BYTES`) and writes the verdict - the child's exit status and its frame - to
the result channel: a file the host opened outside the jail's view, on a descriptor the child never gets
(close-on-exec). The harness makes itself non-dumpable, so the child (same uid) cannot reach the
descriptor through /proc/<pid>/fd or ptrace either. The candidate's stdout and stderr are diagnostics only.

Where bubblewrap is missing or cannot create its namespaces, `unavailable_reason()` says why; callers fail
instead of running unconfined. `confine=False` (an explicit opt-in for trusted local models) runs the same
harness as a plain child with the rlimits and a process-group kill, without namespaces.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BWRAP = "bwrap"  # looked up on PATH; tests point it elsewhere
NOBODY = (65534, 65534)  # uid, gid the jail drops to when started by root
MAX_FRAME_BYTES = 1 << 20  # the child's outputs frame
MAX_CHANNEL_BYTES = 2 << 20  # what the host reads of the result channel
OUTPUT_TAIL_BYTES = 4096  # what the host keeps of the candidate's stdout / stderr (diagnostics)


class SandboxUnavailable(RuntimeError):
    """The jail cannot start on this host; the message says why and what to do."""


@dataclass(frozen=True)
class Limits:
    """What one jailed run may use."""

    wall_s: float = 5.0  # the host kills the jail after this long (seconds)
    cpu_s: int = 5  # RLIMIT_CPU of each process (seconds): SIGXCPU, then SIGKILL a second later
    memory_mb: int = 512  # RLIMIT_AS (MiB)
    processes: int = 16  # RLIMIT_NPROC (processes of the jail's uid)
    file_size_mb: int = 8  # RLIMIT_FSIZE (MiB): any file written, stdout and stderr included
    tmpfs_mb: int = 16  # size of the writable /tmp (MiB)
    open_files: int = 64  # RLIMIT_NOFILE


@dataclass
class Outcome:
    """What came back from a jailed run. `verdict` is the harness's, never the candidate's output."""

    verdict: dict | None  # {"exit": child's exit status, "frame": its outputs (JSON) or None, "problem": str|None}
    returncode: int | None  # of the jail (bwrap passes its harness's on)
    timed_out: bool
    stdout: str  # last bytes of the candidate's stdout: diagnostics only
    stderr: str  # last bytes of its stderr: diagnostics only
    killed: list[tuple[int, str]] = field(default_factory=list)  # host PID, command line: the jail's processes at the kill
    survivors: list[int] = field(default_factory=list)  # of `killed`, still alive after it (must stay empty)


# The jail's first process. Reads its settings from stdin, drops privileges, becomes non-dumpable, sets the
# rlimits, starts the candidate's interpreter, reads one frame from it and writes the verdict on the channel.
_HARNESS = r'''
import json, os, struct, subprocess, sys
cfg = json.loads(sys.stdin.buffer.read())
chan = cfg["channel_fd"]
os.set_inheritable(chan, False)
if cfg["drop"]:
    uid, gid = cfg["drop"]
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
import ctypes
if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0: no /proc/<pid>/fd, no ptrace
    raise SystemExit("harness: cannot make itself non-dumpable")
import resource
for name, soft, hard in cfg["rlimits"]:
    resource.setrlimit(getattr(resource, name), (soft, hard))
r_out, w_out = os.pipe()
child = subprocess.Popen([sys.executable, "-I", "-S", "-c", cfg["child_code"], str(w_out)], stdin=subprocess.PIPE,
                         pass_fds=(w_out,), close_fds=True, cwd=cfg["cwd"], env=cfg["env"])
os.close(w_out)
problem, frame = None, None
try:
    child.stdin.write(cfg["payload"].encode())
    child.stdin.close()
except OSError:
    pass
def read_exactly(n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(r_out, min(n - len(buf), 1 << 16))
        if not chunk:
            return None
        buf += chunk
    return buf
head = read_exactly(8)
if head is not None:
    (size,) = struct.unpack(">Q", head)
    if size > cfg["max_frame"]:
        problem = f"outputs frame of {size} bytes is over the {cfg['max_frame']}-byte limit"
    else:
        body = read_exactly(size)
        try:
            frame = json.loads(body) if body is not None else None
            if body is None:
                problem = "outputs frame cut short"
        except ValueError:
            problem = "outputs frame is not JSON"
if frame is not None or problem is not None:
    try:  # the frame is in: the child may still run (a thread, a sleeping fork); it dies with the jail
        status = child.wait(timeout=0.5)
    except subprocess.TimeoutExpired:
        status = None
else:
    status = child.wait()
os.write(chan, json.dumps({"exit": status, "frame": frame, "problem": problem}).encode())
os.close(chan)
'''


def _tail(path: Path) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - OUTPUT_TAIL_BYTES))
        return f.read().decode(errors="replace")


def _rlimits(limits: Limits, confine: bool) -> list[tuple[str, int, int]]:
    mib = 1 << 20
    out = [("RLIMIT_CPU", limits.cpu_s, limits.cpu_s + 1), ("RLIMIT_AS", limits.memory_mb * mib, limits.memory_mb * mib),
           ("RLIMIT_FSIZE", limits.file_size_mb * mib, limits.file_size_mb * mib),
           ("RLIMIT_NOFILE", limits.open_files, limits.open_files), ("RLIMIT_CORE", 0, 0)]
    if confine:
        # Counted per uid over the whole host: in the jail that is nobody (or the user's own namespace); outside a
        # jail it would count the user's every process, so unconfined runs go without it.
        out.append(("RLIMIT_NPROC", limits.processes, limits.processes))
    return out


def _python() -> tuple[str, list[str]]:
    """The interpreter to run in the jail (the real file behind this venv's python) and the folders it needs."""
    exe = os.path.realpath(sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    need = {prefix, os.path.dirname(exe)}
    return exe, sorted(p for p in need if p != "/usr" and not p.startswith("/usr/"))


def jail_argv(info_fd: int, seccomp_fd: int | None, limits: Limits, as_root: bool) -> list[str]:
    """bwrap's command line for the harness (without the interpreter's own arguments)."""
    exe, extra = _python()
    argv = [shutil.which(BWRAP) or BWRAP]
    if as_root:
        # No user namespace: the harness needs CAP_SETUID/SETGID (and nothing else) to drop to nobody.
        argv += ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
                 "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        argv += ["--unshare-all", "--unshare-user", "--disable-userns"]
    argv += ["--die-with-parent", "--new-session", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
             "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    for path in extra:
        parents = list(reversed(Path(path).parents))[1:]  # '/' excluded
        for parent in parents:
            argv += ["--perms", "0755", "--dir", str(parent)]
        argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev",
             "--perms", "01777", "--size", str(limits.tmpfs_mb << 20), "--tmpfs", "/tmp", "--chdir", "/tmp",
             "--remount-ro", "/", "--info-fd", str(info_fd)]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    return argv + ["--", exe, "-I", "-S", "-c", _HARNESS]
    return argv


# seccomp (classic BPF): no new user namespaces (unshare/clone with CLONE_NEWUSER: EPERM; clone3, whose flags a
# filter cannot read: ENOSYS, and libc falls back to clone), and no other syscall ABI (x32, i386) to get round it.
_SYSCALLS = {"x86_64": (0xC000003E, 272, 56, 435), "aarch64": (0xC00000B7, 97, 220, 435)}  # arch, unshare, clone, clone3
CLONE_NEWUSER = 0x10000000


def seccomp_filter(machine: str | None = None) -> bytes | None:
    """The BPF program bwrap loads with --seccomp, or None on an architecture without syscall numbers here."""
    numbers = _SYSCALLS.get(machine or os.uname().machine)
    if numbers is None:
        return None
    arch, unshare, clone, clone3 = numbers
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    prog = [(ld, 0, 0, 4),                 # 0: arch
            (jeq, 1, 0, arch),             # 1: native ABI -> 3
            (ret, 0, 0, enosys),           # 2: any other ABI
            (ld, 0, 0, 0),                 # 3: syscall number
            (jge, 6, 0, 0x40000000),       # 4: x32 numbers -> 11
            (jeq, 6, 0, clone3),           # 5: -> 12
            (jeq, 1, 0, unshare),          # 6: -> 8
            (jeq, 0, 2, clone),            # 7: -> 8, else -> 10
            (ld, 0, 0, 16),                # 8: flags (args[0], low 32 bits)
            (jset, 1, 0, CLONE_NEWUSER),   # 9: -> 11
            (ret, 0, 0, allow),            # 10
            (ret, 0, 0, eperm),            # 11
            (ret, 0, 0, enosys)]           # 12
    return b"".join(struct.pack("<HBBI", *ins) for ins in prog)


def _pidns_members(ns_inode: int) -> list[tuple[int, str]]:
    """Host PIDs (and command lines) of the processes in the PID namespace `ns_inode`."""
    want = f"pid:[{ns_inode}]"
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != want:
                continue
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        out.append((int(entry), cmd[:200]))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _read_info(fd: int, timeout_s: float) -> dict:
    """bwrap's --info-fd JSON (child-pid, pid-namespace, ...); {} when bwrap closed it without writing."""
    import select

    buf = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
        try:
            return json.loads(buf)
        except ValueError:
            continue
    return {}


def run_untrusted(child_code: str, payload: str, limits: Limits = Limits(), confine: bool = True) -> Outcome:
    """Run `child_code` on `payload` in the jail (or, `confine=False`, as a plain limited child); see the module doc."""
    as_root = os.geteuid() == 0
    with tempfile.TemporaryDirectory(prefix="tradeoff-jail-") as tmp:
        work = Path(tmp)
        (work / "cwd").mkdir()
        chan_path, out_path, err_path, in_path = (work / n for n in ("verdict", "stdout", "stderr", "stdin"))
        chan = os.open(chan_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        cfg = {"channel_fd": chan, "drop": list(NOBODY) if confine and as_root else None,
               "rlimits": _rlimits(limits, confine), "child_code": child_code, "payload": payload,
               "max_frame": MAX_FRAME_BYTES, "cwd": "/tmp" if confine else str(work / "cwd"),
               "env": {"PATH": "/usr/bin:/bin"}}
        in_path.write_text(json.dumps(cfg))
        info_r, info_w = os.pipe() if confine else (-1, -1)
        bpf = seccomp_filter() if confine else None
        sec_r = -1
        if bpf is not None:
            sec_r, sec_w = os.pipe()
            os.write(sec_w, bpf)
            os.close(sec_w)
        try:
            with open(in_path, "rb") as stdin, open(out_path, "wb") as stdout, open(err_path, "wb") as stderr:
                if confine:
                    argv = jail_argv(info_w, sec_r if sec_r >= 0 else None, limits, as_root)
                    fds = (chan, info_w) + ((sec_r,) if sec_r >= 0 else ())
                    proc = subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=stderr, pass_fds=fds,
                                            start_new_session=True, cwd="/", env={"PATH": "/usr/bin:/bin"})
                    os.close(info_w)
                    info_w = -1
                    info = _read_info(info_r, min(10.0, limits.wall_s + 5.0))
                else:
                    exe, _ = _python()
                    proc = subprocess.Popen([exe, "-I", "-S", "-c", _HARNESS], stdin=stdin, stdout=stdout,
                                            stderr=stderr, pass_fds=(chan,), start_new_session=True,
                                            cwd=work / "cwd", env={"PATH": "/usr/bin:/bin"})
                    info = {}
                os.close(chan)
                chan = -1
                timed_out, killed, survivors = False, [], []
                try:
                    proc.wait(timeout=limits.wall_s)
                except subprocess.TimeoutExpired:
                    timed_out = True
                    killed, survivors = _kill(proc, info)
                except BaseException:  # Ctrl-C, a stop signal, a task's timeout: the jail ends with the wait
                    _kill(proc, info)
                    raise
        finally:
            for fd in (chan, info_r, info_w, sec_r):
                if fd >= 0:
                    os.close(fd)
        raw = chan_path.read_bytes()[:MAX_CHANNEL_BYTES]
        try:
            verdict = json.loads(raw) if raw else None
        except ValueError:
            verdict = None
        return Outcome(verdict if isinstance(verdict, dict) else None, proc.returncode, timed_out,
                       _tail(out_path), _tail(err_path), killed, survivors)


def _kill(proc: subprocess.Popen, info: dict) -> tuple[list[tuple[int, str]], list[int]]:
    """Kill the jail as a whole: bwrap's process group and the PID namespace's init (the kernel then kills every
    process in the namespace). Returns the namespace's processes seen at the kill and those still alive after."""
    ns = info.get("pid-namespace")
    members = _pidns_members(ns) if ns else []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    init = info.get("child-pid")
    if init:
        try:
            os.kill(int(init), signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    deadline = time.monotonic() + 5.0
    survivors = [pid for pid, _ in members if _alive(pid)]
    while survivors and time.monotonic() < deadline:
        time.sleep(0.05)
        survivors = [pid for pid in survivors if _alive(pid)]
    for pid in survivors:  # not expected (the namespace is gone); never leave one running
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return members, survivors


_PROBE = r'''
import json, os, struct, sys
body = json.dumps({"ok": True}).encode()
os.write(int(sys.argv[1]), struct.pack(">Q", len(body)) + body)
'''
_available: dict[tuple[str | None, int], str | None] = {}


def unavailable_reason() -> str | None:
    """None when the jail starts on this host, else one line: why, and what to do. Checked once per process."""
    path = shutil.which(BWRAP)
    key = (path, os.geteuid())
    if key in _available:
        return _available[key]
    if path is None:
        reason = "bubblewrap (bwrap) is not installed; apt-get install bubblewrap"
    else:
        try:
            out = run_untrusted(_PROBE, "{}", Limits(wall_s=30.0, cpu_s=10))
        except OSError as err:
            out, reason = None, f"bwrap cannot start ({type(err).__name__}: {err})"
        if out is not None:
            ok = out.verdict is not None and out.verdict.get("frame") == {"ok": True}
            last = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1][:200]
            reason = None if ok else (f"bwrap cannot create the jail ({last}); it needs user namespaces "
                                      f"(sysctl kernel.unprivileged_userns_clone=1) or root")
    _available[key] = reason
    return reason


def frame(obj: object) -> bytes:
    """One length-prefixed JSON frame, as the child writes its outputs (for children written in Python)."""
    body = json.dumps(obj).encode()
    return struct.pack(">Q", len(body)) + body
