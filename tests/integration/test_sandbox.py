"""The jail for model-written code (tasks.quality.sandbox), unit by unit: who the candidate is, what it may use, what it
cannot reach, and what happens where the jail cannot start. Real bubblewrap, real processes."""

from __future__ import annotations

import json
import os

import pytest

from tasks.quality import sandbox
from tasks.quality.sandbox import Limits, run_untrusted
from tasks.quality.suites.code import run_tests

# A child that writes what `probe` (Python source of one expression) evaluates to as its frame.
CHILD = r"""
import ctypes, json, os, resource, struct, sys
out = int(sys.argv[1])
value = eval(sys.stdin.read())
body = json.dumps(value).encode()
os.write(out, struct.pack(">Q", len(body)) + body)
"""


def probe(expr: str, confine: bool = True, **limits) -> object:
    out = run_untrusted(CHILD, expr, Limits(**{"wall_s": 20.0, **limits}), confine=confine)
    assert out.verdict is not None and out.verdict["problem"] is None, (out.verdict, out.stderr)
    return out.verdict["frame"]


def test_candidate_runs_as_a_uid_of_its_own_without_capabilities():
    status = probe(
        "[l.split()[1] for l in open('/proc/self/status') if l.startswith(('Uid:', 'CapEff:', 'NoNewPrivs:'))]"
    )
    if os.geteuid() == 0:  # a uid no account uses, drawn per jail
        assert int(status[0]) in sandbox.JAIL_UIDS and status[1:] == ["0000000000000000", "1"]
    else:
        assert status == [str(os.geteuid()), "0000000000000000", "1"]


def test_rlimits_are_set_in_the_jail():
    got = probe(
        "[resource.getrlimit(getattr(resource, n)) for n in "
        "('RLIMIT_CPU', 'RLIMIT_AS', 'RLIMIT_NPROC', 'RLIMIT_FSIZE', 'RLIMIT_NOFILE', 'RLIMIT_CORE')]",
        cpu_s=3,
        memory_mb=256,
        processes=8,
        file_size_mb=2,
        open_files=32,
    )
    mib = 1 << 20
    assert got == [[3, 4], [256 * mib] * 2, [8, 8], [2 * mib] * 2, [32, 32], [0, 0]]


def test_tmp_is_the_only_writable_place_and_its_size_is_bounded():
    script = (
        "for p in /tmp/a /etc/a /usr/a /a /proc/a /dev/a /dev/shm/a; do (echo x > $p) 2>/dev/null && echo $p; done; "
        "head -c 3000000 /dev/zero > /tmp/big 2>/dev/null || echo full"
    )
    expr = f"__import__('subprocess').run(['/bin/sh', '-c', {script!r}], capture_output=True, text=True).stdout.split()"
    assert probe(expr, tmpfs_mb=2, file_size_mb=8) == ["/tmp/a", "full"]


def test_no_network_not_even_through_the_raw_socket_module():
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    try:
        err = probe(
            f"(lambda s: (s.settimeout(2), s.connect_ex(('127.0.0.1', {port})))[1])(__import__('_socket').socket())"
        )
    finally:
        srv.close()
    assert err == 111  # ECONNREFUSED: the jail's own loopback, where nothing listens


def test_no_new_user_namespaces_in_the_jail():
    assert probe("[ctypes.CDLL(None, use_errno=True).unshare(0x10000000), ctypes.get_errno()]") == [-1, 1]  # EPERM


def test_the_harness_holding_the_verdict_channel_cannot_be_reached_through_proc():
    expr = (
        "(lambda p: (os.listdir(p), 'readable')[1] if os.access(p, os.R_OK) else 'denied')(f'/proc/{os.getppid()}/fd')"
    )
    assert probe(expr) == "denied"


def test_jail_that_cannot_create_namespaces_names_the_reason(tmp_path, monkeypatch):
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace, likely because the kernel "
        "does not allow non-privileged user namespaces.' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(sandbox, "BWRAP", str(fake))
    monkeypatch.setattr(sandbox, "_available", {})
    reason = sandbox.unavailable_reason()
    assert reason.startswith(
        "bwrap cannot create the jail: bwrap: No permissions to creating new namespace, likely "
        "because the kernel does not allow non-privileged user namespaces."
    )
    with pytest.raises(sandbox.SandboxUnavailable, match="^code sandbox: bwrap cannot create the jail"):
        run_tests("def f(x):\n    return x\n", "f", [((1,), 1)])


def test_unconfined_mode_still_scores_outside_and_kills_at_the_timeout():
    assert run_tests("def f(x):\n    return x + 1\n", "f", [((1,), 2), ((5,), 6)], sandbox="none") == (2, None)
    assert run_tests("def f(x):\n    while True:\n        pass\n", "f", [((1,), 2)], timeout_s=1, sandbox="none") == (
        0,
        "timeout after 1 s",
    )


def test_outputs_of_other_types_than_plain_json_compare_unequal():
    tests = [((1,), [1, 2])]
    assert run_tests("def f(x):\n    return (1, 2)\n", "f", tests) == (0, None)  # a tuple is not the list
    assert run_tests("def f(x):\n    return [1, 2]\n", "f", tests) == (1, None)


def test_seccomp_filter_is_none_where_syscall_numbers_are_unknown():
    assert sandbox.seccomp_filter("riscv64") is None
    assert len(sandbox.seccomp_filter("x86_64")) == len(sandbox.seccomp_filter("aarch64")) == 22 * 8


def test_verdict_is_json_from_the_harness():
    out = run_untrusted(CHILD, "1/0", Limits(wall_s=20.0))  # the child dies before its frame
    assert out.verdict["exit"] == 1 and out.verdict["frame"] is None and "ZeroDivisionError" in out.stderr
    assert json.loads(json.dumps(out.verdict)) == out.verdict
