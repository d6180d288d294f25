"""A jail for code that a model wrote: bubblewrap namespaces, rlimits, a cgroup where one can be made, one kill at the
deadline, a result channel the candidate cannot write.

`run_untrusted(child_code, payload, limits)` runs `child_code` (a Python script that reads `payload` as JSON
from stdin, runs the candidate and writes its outputs as one length-prefixed JSON frame on the file descriptor
named by its argv[1]) inside a bubblewrap jail:

- own network namespace (only a loopback no one listens on: nothing reachable, `import _socket` included),
  own PID, IPC, UTS and cgroup namespaces;
- a read-only view of /usr, /etc and the Python it runs, nothing else of the host (no /root, /home, /work,
  /run, /var: no keys, no config files, no Unix sockets); a fresh tmpfs as /tmp, the only writable place;
  /dev holds bubblewrap's few device nodes, read-only (no writable /dev/shm);
- run by root, the jail drops to a uid of its own (JAIL_UIDS, not nobody: RLIMIT_NPROC counts one uid's
  processes over the whole host, so it counts the jail's alone) before anything else runs; run by a user, it
  is that user in its own user namespace (where the kernel counts its processes apart) with no capabilities;
- seccomp: no new user namespaces, and none of io_uring, keyctl/add_key/request_key, bpf, perf_event_open,
  userfaultfd (EPERM);
- rlimits: CPU seconds, address space, processes, file size, open files, no core files; and totals for
  memory and processes where this process may make a cgroup (v2 with the memory and pids controllers
  delegated to it, or v1 memory and pids hierarchies it may write, as root): `JailCgroup`;
- the harness (the jail's first process, a child subreaper) ends the candidate at `wall_s` and kills every
  process left under it, detached `setsid` children included; the host's kill after a grace is the backstop:
  bwrap's process group and the namespace's init, so the kernel kills every process of the PID namespace
  (`--die-with-parent` does the same if this process dies first), and the cgroup, when there is one; a wait
  cut short (Ctrl-C, a task's timeout) kills the jail the same way.

Inside, the harness starts the candidate's interpreter as its child, reads the child's frame (at most
`MAX_FRAME_BYTES`) and writes the verdict - the child's exit status and its frame - to the result channel: a
file the host opened outside the jail's view, on a descriptor the child never gets (close-on-exec). The
harness makes itself non-dumpable, so the child (same uid) cannot reach the descriptor through
/proc/<pid>/fd or ptrace either. The candidate's stdout and stderr are diagnostics only.

Where bubblewrap is missing or cannot create its namespaces, `unavailable_reason()` says why (asked again on
each call until the jail starts); callers fail instead of running unconfined. `confine=False` (an explicit
opt-in for trusted local models) runs the same harness as a plain child with the rlimits, the cgroup where
there is one, and the harness's kill of everything under it, without namespaces.
"""

from __future__ import annotations

import json
import os
import secrets
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
# Uids a jail started by root runs as, one drawn per jail: used by no account, so RLIMIT_NPROC (counted per uid
# over the whole host) counts the jail's processes and nothing else, and the jail owns no file of the host.
JAIL_UIDS = range(1_900_000_000, 1_900_000_000 + (1 << 24))
MAX_FRAME_BYTES = 1 << 20  # the child's outputs frame
MAX_CHANNEL_BYTES = 2 << 20  # what the host reads of the result channel
OUTPUT_TAIL_BYTES = 4096  # what the host keeps of the candidate's stdout / stderr (diagnostics)
KILL_GRACE_S = 2.0  # after `wall_s`, how long the host leaves the harness to end the candidate before killing all


class SandboxUnavailable(RuntimeError):
    """The jail cannot start on this host; the message says why and what to do."""


@dataclass(frozen=True)
class Limits:
    """What one jailed run may use."""

    wall_s: float = 5.0  # the harness ends the candidate after this long (seconds); the host kills all a grace later
    cpu_s: int = 5  # RLIMIT_CPU of each process (seconds): SIGXCPU, then SIGKILL a second later
    memory_mb: int = 512  # RLIMIT_AS of each process (MiB)
    processes: int = 16  # RLIMIT_NPROC (processes of the jail's uid); the cgroup's pids.max, bubblewrap's own added
    file_size_mb: int = 8  # RLIMIT_FSIZE (MiB): any file written, stdout and stderr included
    tmpfs_mb: int = 16  # size of the writable /tmp (MiB)
    open_files: int = 64  # RLIMIT_NOFILE
    memory_total_mb: int = 512  # the cgroup's memory limit: all the jail's processes and its /tmp together (MiB)


@dataclass
class Outcome:
    """What came back from a jailed run. `verdict` is the harness's, never the candidate's output."""

    # {"exit": child's exit status or None, "frame": its outputs (JSON) or None, "problem": str|None,
    #  "timed_out": the harness ended it at wall_s, "killed": processes the harness killed at the end}
    verdict: dict | None
    returncode: int | None  # of the jail (bwrap passes its harness's on)
    timed_out: bool  # the host had to kill the jail (the harness did not end in wall_s + KILL_GRACE_S)
    stdout: str  # last bytes of the candidate's stdout: diagnostics only
    stderr: str  # last bytes of its stderr: diagnostics only
    killed: list[tuple[int, str]] = field(
        default_factory=list
    )  # host PID, command line: the jail's processes at the kill
    survivors: list[int] = field(
        default_factory=list
    )  # of the jail's processes, still alive after it (must stay empty)
    cgroup: str | None = None  # the cgroup that held the totals ('v2', 'v1'), None where none could be made
    oom_killed: bool = False  # the cgroup's memory limit killed a process of the jail


# The jail's first process. Reads its settings from stdin, becomes a child subreaper (orphans of the candidate,
# detached setsid ones included, become its children), drops privileges, becomes non-dumpable, sets the rlimits,
# starts the candidate's interpreter, reads one frame from it until the deadline, kills every process left under
# it and writes the verdict on the channel.
_HARNESS = r"""
import ctypes, json, os, select, signal, struct, subprocess, sys, time
cfg = json.loads(sys.stdin.buffer.read())
deadline = time.monotonic() + cfg["wall_s"]
chan = cfg["channel_fd"]
os.set_inheritable(chan, False)
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    raise SystemExit("harness: cannot become a child subreaper")
if cfg["drop"]:
    uid, gid = cfg["drop"]
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0: no /proc/<pid>/fd, no ptrace
    raise SystemExit("harness: cannot make itself non-dumpable")
import resource
for name, soft, hard in cfg["rlimits"]:
    resource.setrlimit(getattr(resource, name), (soft, hard))
r_out, w_out = os.pipe()
child = subprocess.Popen([sys.executable, "-I", "-S", "-c", cfg["child_code"], str(w_out)], stdin=subprocess.PIPE,
                         pass_fds=(w_out,), close_fds=True, cwd=cfg["cwd"], env=cfg["env"])
os.close(w_out)
problem, frame, timed_out = None, None, False
try:
    child.stdin.write(cfg["payload"].encode())
    child.stdin.close()
except OSError:
    pass
def read_exactly(n):
    buf = b""
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([r_out], [], [], left)[0]:
            raise TimeoutError
        chunk = os.read(r_out, min(n - len(buf), 1 << 16))
        if not chunk:
            return None
        buf += chunk
    return buf
try:
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
except TimeoutError:
    timed_out = True
status = None
if not timed_out:
    # The frame is in: the child may still run (a thread, a sleeping fork) and is killed below. No frame: wait for
    # its end until the deadline.
    got = frame is not None or problem is not None
    try:
        status = child.wait(timeout=0.5 if got else max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = not got
def descendants():
    kids = {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                kids.setdefault(int(open(f"/proc/{e}/stat").read().rsplit(")", 1)[1].split()[1]), []).append(int(e))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [os.getpid()]
    while todo:
        for pid in kids.get(todo.pop(), ()):
            out.append(pid)
            todo.append(pid)
    return out
killed = set()
for _ in range(500):  # each round kills what is there; what a dying process forked is there next round
    left = descendants()
    if not left:
        break
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        except OSError:
            pass
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break
    time.sleep(0.005)
killed.discard(child.pid)
os.write(chan, json.dumps({"exit": status, "frame": frame, "problem": problem, "timed_out": timed_out,
                           "killed": len(killed)}).encode())
os.close(chan)
"""


def _tail(path: Path) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - OUTPUT_TAIL_BYTES))
        return f.read().decode(errors="replace")


def _rlimits(limits: Limits, confine: bool) -> list[tuple[str, int, int]]:
    mib = 1 << 20
    out = [
        ("RLIMIT_CPU", limits.cpu_s, limits.cpu_s + 1),
        ("RLIMIT_AS", limits.memory_mb * mib, limits.memory_mb * mib),
        ("RLIMIT_FSIZE", limits.file_size_mb * mib, limits.file_size_mb * mib),
        ("RLIMIT_NOFILE", limits.open_files, limits.open_files),
        ("RLIMIT_CORE", 0, 0),
    ]
    if confine:
        # Counted per uid (per user namespace) over the whole host: in the jail that uid is the jail's own (root
        # draws one from JAIL_UIDS; a user's jail has its own user namespace). Outside a jail it would count the
        # user's every process, so unconfined runs go without it (the cgroup's pids.max, where there is one).
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
        # No user namespace: the harness needs CAP_SETUID/SETGID (and nothing else) to drop to the jail's uid.
        argv += [
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--cap-drop",
            "ALL",
            "--cap-add",
            "CAP_SETUID",
            "--cap-add",
            "CAP_SETGID",
        ]
    else:
        argv += ["--unshare-all", "--unshare-user", "--disable-userns"]
    argv += [
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        "--ro-bind",
        "/usr",
        "/usr",
        "--ro-bind",
        "/etc",
        "/etc",
    ]
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
    # /dev: bubblewrap's few nodes (null, zero, full, random, urandom, tty) on a tmpfs made read-only, so neither
    # /dev nor /dev/shm holds a byte the candidate writes; the nodes themselves still work.
    argv += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--remount-ro",
        "/dev",
        "--perms",
        "01777",
        "--size",
        str(limits.tmpfs_mb << 20),
        "--tmpfs",
        "/tmp",
        "--chdir",
        "/tmp",
        "--remount-ro",
        "/",
        "--info-fd",
        str(info_fd),
    ]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    return argv + ["--", exe, "-I", "-S", "-c", _HARNESS]


# seccomp (classic BPF): no new user namespaces (unshare/clone with CLONE_NEWUSER: EPERM; clone3, whose flags a
# filter cannot read: ENOSYS, and libc falls back to clone), no other syscall ABI (x32, i386) to get round it,
# and EPERM for kernel interfaces a function never needs and that keep turning up in kernel exploits: io_uring,
# the kernel keyrings, bpf, perf_event_open, userfaultfd (Docker's default profile refuses them too).
DENIED_SYSCALLS = (
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
)
_SYSCALLS = {
    "x86_64": {
        "arch": 0xC000003E,
        "unshare": 272,
        "clone": 56,
        "clone3": 435,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "keyctl": 250,
        "add_key": 248,
        "request_key": 249,
        "bpf": 321,
        "perf_event_open": 298,
        "userfaultfd": 323,
    },
    "aarch64": {
        "arch": 0xC00000B7,
        "unshare": 97,
        "clone": 220,
        "clone3": 435,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "keyctl": 219,
        "add_key": 217,
        "request_key": 218,
        "bpf": 280,
        "perf_event_open": 241,
        "userfaultfd": 282,
    },
}
CLONE_NEWUSER = 0x10000000


def seccomp_filter(machine: str | None = None) -> bytes | None:
    """The BPF program bwrap loads with --seccomp, or None on an architecture without syscall numbers here."""
    nr = _SYSCALLS.get(machine or os.uname().machine)
    if nr is None:
        return None
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    # (label, code, k, jump if true, jump if false): jumps name a later label, None is the next instruction
    prog = [
        (None, ld, 4, None, None),  # arch
        (None, jeq, nr["arch"], None, "enosys"),  # any other ABI
        (None, ld, 0, None, None),  # syscall number
        (None, jge, 0x40000000, "eperm", None),  # x32 numbers
        (None, jeq, nr["clone3"], "enosys", None),
        (None, jeq, nr["unshare"], "flags", None),
        (None, jeq, nr["clone"], "flags", None),
        *[(None, jeq, nr[name], "eperm", None) for name in DENIED_SYSCALLS],
        (None, ret, allow, None, None),
        ("flags", ld, 16, None, None),  # args[0], low 32 bits
        (None, jset, CLONE_NEWUSER, "eperm", None),
        (None, ret, allow, None, None),
        ("eperm", ret, eperm, None, None),
        ("enosys", ret, enosys, None, None),
    ]
    at = {label: i for i, (label, *_) in enumerate(prog) if label}
    rel = lambda i, target: 0 if target is None else at[target] - i - 1
    return b"".join(
        struct.pack("<HBBI", code, rel(i, jt), rel(i, jf), k) for i, (_, code, k, jt, jf) in enumerate(prog)
    )


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


# ---------------------------------------------------------------- the cgroup: totals and one kill

CGROUP_PREFIX = "tradeoff-jail-"


def _cgroup_mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount point, root of the mount in its hierarchy, fs type, super options) of the cgroup file systems."""
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if len(f) >= 5 and len(r) >= 3 and r[0] in ("cgroup", "cgroup2"):
            out.append((f[4].replace("\\040", " "), f[3], r[0], set(r[2].split(","))))
    return out


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per hierarchy: '' for the v2 one, else each v1 controller's name."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        hid, ctrls, path = line.split(":", 2)
        for key in [""] if hid == "0" else [c for c in ctrls.split(",") if c]:
            out[key] = path
    return out


def _in_mount(point: str, root: str, path: str) -> Path:
    rel = path[len(root) :] if root != "/" and path.startswith(root) else path
    return Path(point) / rel.lstrip("/")


def _cgroup_parents() -> tuple[str, list[Path]] | None:
    """Where this process may make a jail's cgroup: ('v2', [a cgroup of ours or above with memory and pids
    delegated]) or ('v1', [under our memory cgroup, under our pids cgroup]); None where it may not."""
    mounts, own = _cgroup_mounts(), _own_cgroups()
    for point, root, fstype, _ in mounts:
        if fstype != "cgroup2" or "" not in own:
            continue
        d = _in_mount(point, root, own[""])
        while d.is_relative_to(point):
            try:
                enabled = set((d / "cgroup.subtree_control").read_text().split())
            except OSError:
                enabled = set()
            if {"memory", "pids"} <= enabled and os.access(d, os.W_OK) and os.access(d / "cgroup.procs", os.W_OK):
                return "v2", [d]
            if d == Path(point):
                break
            d = d.parent
    parents = []
    for ctrl in ("memory", "pids"):
        found = [(p, r) for p, r, t, opts in mounts if t == "cgroup" and ctrl in opts]
        if not found or ctrl not in own:
            return None
        d = _in_mount(*found[0], own[ctrl])
        if not os.access(d, os.W_OK) or not os.access(d / "cgroup.procs", os.W_OK):
            return None
        parents.append(d)
    return "v1", parents


def _write(path: Path, value: object) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)


@dataclass
class JailCgroup:
    """One jailed run's cgroup: totals for memory (processes and /tmp together, no swap) and processes, one kill."""

    kind: str  # 'v2' or 'v1'
    dirs: list[Path]  # v2: the cgroup; v1: the memory one and the pids one

    @classmethod
    def make(cls, memory_mb: int, processes: int) -> "JailCgroup | None":
        """A new cgroup with the limits set, or None where this process may not make one (then rlimits alone)."""
        found = _cgroup_parents()
        if found is None:
            return None
        kind, parents = found
        name = f"{CGROUP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        made = cls(kind, [])
        try:
            for parent in parents:
                _remove_stale(parent, kind)
                (parent / name).mkdir()
                made.dirs.append(parent / name)
            memory = made.dirs[0]
            if kind == "v2":
                _write(memory / "memory.max", memory_mb << 20)
                if (memory / "memory.swap.max").exists():
                    _write(memory / "memory.swap.max", 0)
            else:
                _write(memory / "memory.limit_in_bytes", memory_mb << 20)
                if (memory / "memory.memsw.limit_in_bytes").exists():
                    _write(memory / "memory.memsw.limit_in_bytes", memory_mb << 20)
            _write(made.dirs[-1] / "pids.max", processes)
        except OSError:
            made.remove()
            return None
        return made

    def enter(self) -> None:
        """Move the calling process into the cgroup (a Popen preexec_fn: the jail starts inside it)."""
        for d in self.dirs:
            _write(d / "cgroup.procs", 0)

    def procs(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs:
            try:
                out |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                pass
        return out

    def kill(self) -> list[int]:
        """SIGKILL every process in the cgroup (cgroup.kill where the kernel has it); those still there after 5 s."""
        if self.kind == "v2" and (self.dirs[0] / "cgroup.kill").exists():
            try:
                _write(self.dirs[0] / "cgroup.kill", 1)
            except OSError:
                pass
        deadline = time.monotonic() + 5.0
        left = self.procs()
        while left and time.monotonic() < deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)
            left = self.procs()
        return sorted(left)

    def oom_killed(self) -> bool:
        """Whether the memory limit killed a process of the cgroup."""
        name = "memory.events" if self.kind == "v2" else "memory.oom_control"
        try:
            fields = dict(line.split() for line in (self.dirs[0] / name).read_text().splitlines() if " " in line)
        except (OSError, ValueError):
            return False
        return int(fields.get("oom_kill", "0")) > 0

    def remove(self) -> None:
        for d in reversed(self.dirs):
            for _ in range(50):  # a process killed a moment ago may still be leaving
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _remove_stale(parent: Path, kind: str) -> None:
    """Remove the jail cgroups a process that is gone (killed before its clean-up) left under `parent`."""
    for d in parent.glob(f"{CGROUP_PREFIX}*"):
        owner = d.name[len(CGROUP_PREFIX) :].split("-")[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            stale = JailCgroup(kind, [d])
            stale.kill()
            stale.remove()


# ---------------------------------------------------------------- one jailed run

_CGROUP_REFUSED: list[str] = []  # the jail could not enter a cgroup made here: none is tried again in this process


def run_untrusted(child_code: str, payload: str, limits: Limits = Limits(), confine: bool = True) -> Outcome:
    """Run `child_code` on `payload` in the jail (or, `confine=False`, as a plain limited child); see the module doc."""
    as_root = os.geteuid() == 0
    # bwrap's own two processes (the outer one and the namespace's init) count in pids.max too.
    cgroup = (
        None if _CGROUP_REFUSED else JailCgroup.make(limits.memory_total_mb, limits.processes + (2 if confine else 0))
    )
    try:
        return _run(child_code, payload, limits, confine, as_root, cgroup)
    except subprocess.SubprocessError as err:  # the child could not move into the cgroup (its preexec_fn failed)
        if cgroup is None:
            raise
        _CGROUP_REFUSED.append(str(err))
        return run_untrusted(child_code, payload, limits, confine)  # rlimits alone, as on a host without cgroups
    finally:
        if cgroup is not None:
            cgroup.kill()
            cgroup.remove()


def _run(
    child_code: str, payload: str, limits: Limits, confine: bool, as_root: bool, cgroup: JailCgroup | None
) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="tradeoff-jail-") as tmp:
        work = Path(tmp)
        (work / "cwd").mkdir()
        chan_path, out_path, err_path, in_path = (work / n for n in ("verdict", "stdout", "stderr", "stdin"))
        chan = os.open(chan_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        in_path.write_text(json.dumps(_harness_config(chan, child_code, payload, limits, confine, as_root, work)))
        info_r, info_w = os.pipe() if confine else (-1, -1)
        bpf = seccomp_filter() if confine else None
        sec_r = -1
        if bpf is not None:
            sec_r, sec_w = os.pipe()
            os.write(sec_w, bpf)
            os.close(sec_w)
        try:
            with open(in_path, "rb") as stdin, open(out_path, "wb") as stdout, open(err_path, "wb") as stderr:
                streams = (stdin, stdout, stderr)
                proc = _spawn(streams, chan, info_w, sec_r, limits, confine, as_root, work, cgroup)
                info: dict = {}
                if confine:
                    os.close(info_w)
                    info_w = -1
                    info = _read_info(info_r, min(10.0, limits.wall_s + 5.0))
                os.close(chan)
                chan = -1
                timed_out, killed, survivors = _wait(proc, info, limits)
        finally:
            for fd in (chan, info_r, info_w, sec_r):
                if fd >= 0:
                    os.close(fd)
        verdict = _verdict(chan_path)
        if cgroup is not None:
            survivors = sorted(set(survivors) | set(cgroup.kill()))
        return Outcome(
            verdict,
            proc.returncode,
            timed_out,
            _tail(out_path),
            _tail(err_path),
            killed,
            survivors,
            cgroup.kind if cgroup is not None else None,
            cgroup is not None and cgroup.oom_killed(),
        )


def _harness_config(
    chan: int, child_code: str, payload: str, limits: Limits, confine: bool, as_root: bool, work: Path
) -> dict:
    """What the harness reads on its stdin: the verdict channel, the uid it drops to, its limits, the code."""
    uid = JAIL_UIDS[secrets.randbelow(len(JAIL_UIDS))]
    return {
        "channel_fd": chan,
        "drop": [uid, uid] if confine and as_root else None,
        "wall_s": limits.wall_s,
        "rlimits": _rlimits(limits, confine),
        "child_code": child_code,
        "payload": payload,
        "max_frame": MAX_FRAME_BYTES,
        "cwd": "/tmp" if confine else str(work / "cwd"),
        "env": {"PATH": "/usr/bin:/bin"},
    }


def _spawn(
    streams: tuple,
    chan: int,
    info_w: int,
    sec_r: int,
    limits: Limits,
    confine: bool,
    as_root: bool,
    work: Path,
    cgroup: JailCgroup | None,
) -> subprocess.Popen:
    """Start the harness: inside bwrap (`confine`), or as a plain limited child; in the cgroup when there is one."""
    stdin, stdout, stderr = streams
    enter = cgroup.enter if cgroup is not None else None
    if confine:
        return subprocess.Popen(
            jail_argv(info_w, sec_r if sec_r >= 0 else None, limits, as_root),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            pass_fds=(chan, info_w) + ((sec_r,) if sec_r >= 0 else ()),
            start_new_session=True,
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
            preexec_fn=enter,
        )
    exe, _ = _python()
    return subprocess.Popen(
        [exe, "-I", "-S", "-c", _HARNESS],
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        pass_fds=(chan,),
        start_new_session=True,
        cwd=work / "cwd",
        env={"PATH": "/usr/bin:/bin"},
        preexec_fn=enter,
    )


def _wait(proc: subprocess.Popen, info: dict, limits: Limits) -> tuple[bool, list, list]:
    """Wait for the jail's end: (timed out, the processes the host killed, the ones that outlived the jail)."""
    # Members of the jail's PID namespace, seen while it runs: the host checks them after its end.
    ns = info.get("pid-namespace")
    members = _pidns_members(ns) if ns else []
    timed_out, killed = False, []
    try:
        proc.wait(timeout=limits.wall_s + KILL_GRACE_S)
    except subprocess.TimeoutExpired:  # the harness did not end it: the host kills the jail as a whole
        timed_out = True
        killed = _kill(proc, info)
        members += killed
    except BaseException:  # Ctrl-C, a stop signal, a task's timeout: the jail ends with the wait
        _kill(proc, info)
        raise
    return timed_out, killed, _reap_survivors([pid for pid, _ in members])


def _verdict(chan_path: Path) -> dict | None:
    """The harness's verdict from its channel file (capped); None when missing or not a JSON object."""
    raw = chan_path.read_bytes()[:MAX_CHANNEL_BYTES]
    try:
        verdict = json.loads(raw) if raw else None
    except ValueError:
        return None
    return verdict if isinstance(verdict, dict) else None


def _kill(proc: subprocess.Popen, info: dict) -> list[tuple[int, str]]:
    """Kill the jail as a whole: bwrap's process group and the PID namespace's init (the kernel then kills every
    process in the namespace). Returns the namespace's processes seen at the kill."""
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
    return members


def _reap_survivors(pids: list[int]) -> list[int]:
    """Of the jail's processes, those alive 5 s after its end (not expected: the namespace is gone); killed anyway."""
    deadline = time.monotonic() + 5.0
    survivors = [pid for pid in pids if _alive(pid)]
    while survivors and time.monotonic() < deadline:
        time.sleep(0.05)
        survivors = [pid for pid in survivors if _alive(pid)]
    for pid in survivors:  # never leave one running
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return survivors


_PROBE = r"""
import json, os, struct, sys
body = json.dumps({"ok": True}).encode()
os.write(int(sys.argv[1]), struct.pack(">Q", len(body)) + body)
"""
_available: dict[tuple[str | None, int], None] = {}  # where the jail started: asked once; a failure is asked again


def _userns_cause() -> str | None:
    """Why this kernel refuses an unprivileged user namespace, read from its settings; None when none says so."""
    checks = (
        ("/proc/sys/user/max_user_namespaces", "0", "user namespaces are off (sysctl user.max_user_namespaces=0)"),
        (
            "/proc/sys/kernel/unprivileged_userns_clone",
            "0",
            "unprivileged user namespaces are off (sysctl kernel.unprivileged_userns_clone=0)",
        ),
        (
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            "1",
            "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1): "
            "give bwrap an AppArmor profile that allows userns, or set it to 0",
        ),
    )
    for path, value, why in checks:
        try:
            if Path(path).read_text().strip() == value:
                return why
        except OSError:
            continue
    return None


def unavailable_reason() -> str | None:
    """None when the jail starts on this host, else one line: why (bwrap's own words, and the kernel setting that
    explains them where one does), and what to do. A success is remembered; a failure is tried again next time."""
    path = shutil.which(BWRAP)
    key = (path, os.geteuid())
    if key in _available:
        return None
    if path is None:
        return "bubblewrap (bwrap) is not installed; apt-get install bubblewrap"
    try:
        out = run_untrusted(_PROBE, "{}", Limits(wall_s=30.0, cpu_s=10))
    except (OSError, subprocess.SubprocessError) as err:
        return f"bwrap cannot start ({type(err).__name__}: {err})"
    if out.verdict is not None and out.verdict.get("frame") == {"ok": True}:
        _available[key] = None
        return None
    last = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1][:200]
    cause = None if os.geteuid() == 0 else _userns_cause()
    return f"bwrap cannot create the jail: {last}" + (f"; {cause}" if cause else "")


def frame(obj: object) -> bytes:
    """One length-prefixed JSON frame, as the child writes its outputs (for children written in Python)."""
    body = json.dumps(obj).encode()
    return struct.pack(">Q", len(body)) + body
