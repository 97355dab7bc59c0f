"""The messages between the panel and its zygote (`core.client.zygote`, `core.runproc.zygote`), as JSON on a
SOCK_SEQPACKET socket, fds alongside (SCM_RIGHTS)."""

from __future__ import annotations

from typing import TypedDict


class SpawnRequest(TypedDict):
    """Fork a run's supervisor. Sent with fds [status pipe, then one per `targets` entry]: the child gets each
    as that number (stdout, stderr, then the pipes its arguments name)."""

    argv: list[str]    # the supervisor's arguments: --module MODULE ARGS...
    env: dict[str, str]
    cwd: str
    targets: list[int]


class ZygoteReply(TypedDict, total=False):
    """The zygote's hello (`ok`, `pid` or `error`), or its answer to a request (`pid` with a pidfd, or `error`)."""

    ok: bool
    pid: int
    error: str
