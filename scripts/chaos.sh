#!/usr/bin/env bash
# The adversary's cases of issues 24 and 32, each bounded and followed by checks: a full disk, a damaged history,
# special files in the history, output without newlines, the exporter under load, hostile lab targets and slow
# clients, and SIGKILL of the CLI, the supervisor and the run process at random moments. After every case: no
# process of ours is left, and every run record is final, interrupted or marked incomplete (never "running").
# Loopback only; everything stops by itself (ROUNDS kills per target, default 3; each command under `timeout`).
#
#   scripts/chaos.sh [ROUNDS]
#
# Uses .venv (README's set-up). The full-disk case needs `unshare` (a 1 MB tmpfs in a private mount namespace)
# and is skipped without it. Exit status 0 when every check held, 1 at the first that did not.
set -euo pipefail
cd "$(dirname "$0")/.."
export CHAOS_ROUNDS=${1:-3}
export CHAOS_PYTHON=${PYTHON:-.venv/bin/python}
exec timeout 900 "$CHAOS_PYTHON" - <<'EOF'
import contextlib, json, os, random, shutil, signal, socket, subprocess, sys, tempfile, threading, time, urllib.request, uuid
from pathlib import Path

import psutil

PYTHON = os.environ["CHAOS_PYTHON"]
ROUNDS = int(os.environ["CHAOS_ROUNDS"])
MARK = f"tfdp-chaos-{uuid.uuid4().hex[:8]}"  # in the environment of everything a case starts, to find leftovers
work = Path(tempfile.mkdtemp(prefix="tfdp-chaos-"))
failures = []


def ours() -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter():
        try:
            if process.pid != os.getpid() and process.environ().get("CHAOS_MARK") == MARK:
                found.append(process)
        except (psutil.Error, OSError):
            continue  # gone, or another user's: not ours
    return found


def check(case: str, home: Path) -> None:
    deadline = time.monotonic() + 15  # what a case started is given this long to be gone
    while ours() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [f"{p.pid} {' '.join(p.cmdline())[:80]}" for p in ours()]
    listed = cli(home, "runs", "--json")
    statuses = [(r["run_id"], r["status"], r.get("incomplete")) for r in json.loads(listed.stdout or "[]")]
    running = [s for s in statuses if s[1] == "running"]
    ok = not left and not running and listed.returncode == 0
    print(f"{'ok  ' if ok else 'FAIL'} {case}: {len(statuses)} record(s) {sorted({s[1] for s in statuses})}"
          + (f"; left running: {left}" if left else "") + (f"; records still 'running': {running}" if running else ""))
    if not ok:
        failures.append(case)
        for process in ours():
            with contextlib.suppress(psutil.Error):  # already gone: nothing left to end
                process.kill()


def env(home: Path) -> dict[str, str]:
    return {**os.environ, "TF_DEVICE_PANEL_HOME": str(home), "CHAOS_MARK": MARK}


def cli(home: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYTHON, "-m", "tf_device_panel", *args], env=env(home), capture_output=True, text=True,
                          timeout=timeout)


def script(name: str, code: str) -> Path:
    path = work / name
    path.write_text(code)
    return path


FLOOD = script("flood.py", "import itertools\nfor i in itertools.count():\n    print('line', i, 'x' * 60)\n")

# 1. a full disk: the run goes on, the CLI exits with the script's status, the record is marked incomplete
if shutil.which("unshare") and subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"],
                                              capture_output=True).returncode == 0:
    home = work / "full"
    home.mkdir()
    lines = script("lines.py", "import sys\nfor i in range(40000):\n    print('line', i, 'x' * 60)\nsys.exit(3)\n")
    inner = (f"mount -t tmpfs -o size=1m tmpfs {home} && TF_DEVICE_PANEL_HOME={home} timeout 120 {PYTHON} -m "
             f"tf_device_panel run script -p path={lines} >/dev/null; echo exit=$?; TF_DEVICE_PANEL_HOME={home} "
             f"{PYTHON} -m tf_device_panel runs --json")
    started = time.monotonic()
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", inner],
                          env={**os.environ, "CHAOS_MARK": MARK}, capture_output=True, text=True, timeout=240)
    record = json.loads(done.stdout.split("\n", 1)[1] or "[{}]")[0]
    good = "exit=3" in done.stdout and "No space left" in str(record.get("incomplete")) and "Traceback" not in done.stderr
    print(f"{'ok  ' if good else 'FAIL'} full disk: {done.stdout.splitlines()[0]} in {time.monotonic() - started:.0f} s,"
          f" record {record.get('status')}, incomplete: {record.get('incomplete')}")
    if not good:
        failures.append("full disk")
else:
    print("skip full disk: `unshare` cannot make a private mount namespace here")

# 2. a damaged history beside a good run: every reader lists both
home = work / "damaged"
cli(home, "run", "script", "-p", f"path={script('ok.py', 'print(1)')}")
for name, content in [("a", b'{"client_pid": "abc"}'), ("b", b"\xff\xfe"), ("c", b"[1,2,3]"), ("d", b"null"),
                      ("e", b'{"job": "x", "status": "running", "started": 1, "client_pid": 1.5}')]:
    folder = home / "runs" / f"20000101-000000-{name}"
    folder.mkdir(parents=True)
    (folder / "run.json").write_bytes(content)
    (folder / "events.jsonl").write_bytes(bytes(random.randrange(256) for _ in range(300)))
listed = cli(home, "runs", "--json")
statuses = sorted(r["status"] for r in json.loads(listed.stdout or "[]"))
good = listed.returncode == 0 and statuses == ["ok"] + ["unreadable"] * 5 and cli(home, "runs").returncode == 0
print(f"{'ok  ' if good else 'FAIL'} damaged history: {statuses}")
if not good:
    failures.append("damaged history")

# 2b. (issue 32) a FIFO, a device and a folder where a record's files should be: `runs` answers at once
home = work / "special"
cli(home, "run", "script", "-p", f"path={script('ok2.py', 'print(1)')}")
for name, make in [("fifo", lambda p: os.mkfifo(p)), ("device", lambda p: p.symlink_to("/dev/zero")),
                   ("folder", lambda p: p.mkdir())]:
    folder = home / "runs" / f"20000101-000000-special-{name}"
    folder.mkdir(parents=True)
    make(folder / "run.json")
started = time.monotonic()
try:
    listed = cli(home, "runs", "--json", timeout=30)
    statuses = sorted(r["status"] for r in json.loads(listed.stdout or "[]"))
except subprocess.TimeoutExpired:
    statuses = ["hung"]
good = statuses == ["ok"] + ["unreadable"] * 3
print(f"{'ok  ' if good else 'FAIL'} special files in the history: {statuses} in {time.monotonic() - started:.1f} s")
if not good:
    failures.append("special files in the history")

# 2c. (issue 32) 32,000 and 100,000 GPU indices: validate and snippet answer in seconds, in a line of sane length
for count in (32_000, 100_000):
    profile = work / f"gpus-{count}.json"
    profile.write_text(json.dumps({"version": 1, "visible_gpus": list(range(count))}))
    for command in (["validate", str(profile)], ["snippet", "--config", str(profile)]):
        started = time.monotonic()
        try:
            done = cli(work / "gpus", *command, timeout=60)
            took, code = time.monotonic() - started, done.returncode
            longest = max(map(len, done.stdout.splitlines() or [""])) if command[0] == "validate" else 0
        except subprocess.TimeoutExpired:
            took, code, longest = 60.0, None, 0
        good = code == 0 and took < 20 and longest < 1000
        print(f"{'ok  ' if good else 'FAIL'} {count} GPUs, {command[0]}: exit {code} in {took:.1f} s"
              + (f", longest line {longest} characters" if command[0] == "validate" else ""))
        if not good:
            failures.append(f"{count} GPUs {command[0]}")

# 2d. (issue 32) job parameters: a repeated name, a device the profile lacks, 10,000 sizes: exit 2 at once
for args in (["fit", "-p", "epochs=1", "-p", "epochs=2"], ["fit", "-p", "devices=/GPU:99"],
             ["benchmark", "-p", "sizes=" + ",".join(["8"] * 10_000)]):
    home = work / "params"
    started = time.monotonic()
    done = cli(home, "run", *args, timeout=60)
    good = done.returncode == 2 and time.monotonic() - started < 20 and not (home / "runs").exists()
    print(f"{'ok  ' if good else 'FAIL'} run {args[0]} {args[1]} {args[2][:30]}: exit {done.returncode} in "
          f"{time.monotonic() - started:.1f} s: {done.stderr.strip()[:100]}")
    if not good:
        failures.append(f"parameters {args[2][:20]}")

# 2e. (issue 32) exit codes of a stopped run: Ctrl+C 130, SIGTERM 143, SIGHUP 129, and who stopped it on record
TICK = script("tick.py", "import time\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.05)\n")
for signum, wanted in ((signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)):
    for job in (["script", "-p", f"path={TICK}"], ["fit", "-p", "epochs=10000"]):
        home = work / f"stop-{signum.name}-{job[0]}"
        process = subprocess.Popen([PYTHON, "-m", "tf_device_panel", "run", *job], env=env(home),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert process.stdout is not None
        started = time.monotonic()
        for line in process.stdout:  # its first line of output: the job is running
            if "tick" in line or "epoch" in line.lower() or time.monotonic() - started > 120:
                break
        process.send_signal(signum)
        try:
            _, err = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
        record = json.loads(cli(home, "runs", "--json").stdout or "[{}]")[0]
        by = (record.get("cancel") or {}).get("by", "")
        good = process.returncode == wanted and signum.name in by and "Traceback" not in err
        print(f"{'ok  ' if good else 'FAIL'} {signum.name} to run {job[0]}: exit {process.returncode} (want {wanted}),"
              f" record {record.get('status')}, stopped by: {by}")
        if not good:
            failures.append(f"{signum.name} run {job[0]}")
        check(f"{signum.name} run {job[0]}", home)

# 2f. (issue 32) Ctrl+C in the command line's first half second: no traceback
tracebacks = []
for delay in (0.15, 0.2, 0.3, 0.4, 0.5, 0.6):
    home = work / "early"
    process = subprocess.Popen([PYTHON, "-m", "tf_device_panel", "run", "matmul"], env=env(home),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)  # the moment is the case: a signal at this age of the process
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    if "Traceback" in err:
        tracebacks.append(f"{delay} s")
good = not tracebacks
print(f"{'ok  ' if good else 'FAIL'} early Ctrl+C: tracebacks at {tracebacks or 'none of 0.15-0.6 s'}")
if not good:
    failures.append("early Ctrl+C")
check("early Ctrl+C", work / "early")

# 2g. (issue 32) a disk full before the run starts: the record is `incomplete`, not `unreadable`; the history
# is private (0700 folders, 0600 files)
if shutil.which("unshare") and subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"],
                                              capture_output=True).returncode == 0:
    disk = work / "full-before"
    disk.mkdir()
    inner = (f"mount -t tmpfs -o size=1m tmpfs {disk} && (head -c 2000000 /dev/zero > {disk}/fill 2>/dev/null; "
             f"true) && TF_DEVICE_PANEL_HOME={disk}/home timeout 120 {PYTHON} -m tf_device_panel run script "
             f"-p path={script('hello.py', 'print(1)')} >/dev/null 2>&1; TF_DEVICE_PANEL_HOME={disk}/home "
             f"{PYTHON} -m tf_device_panel runs --json")
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", inner],
                          env={**os.environ, "CHAOS_MARK": MARK}, capture_output=True, text=True, timeout=240)
    record = json.loads(done.stdout or "[{}]")[0]
    good = record.get("status") == "incomplete"
    print(f"{'ok  ' if good else 'FAIL'} disk full before the run: record {record.get('status')}: "
          f"{record.get('incomplete')}")
    if not good:
        failures.append("disk full before the run")
home = work / "damaged"  # made by case 2 through a run
modes = {oct(p.stat().st_mode & 0o777) for p in (home / "runs").rglob("*")
         if not p.relative_to(home / "runs").parts[0].startswith("2000")}  # not the damaged ones made above
good = modes <= {"0o700", "0o600"} and oct((home / "runs").stat().st_mode & 0o777) == "0o700"
print(f"{'ok  ' if good else 'FAIL'} a private history: modes {sorted(modes)}")
if not good:
    failures.append("private history")

# 3. 200 MB without a newline
home = work / "one-line"
one_line = script("one_line.py", "import sys\nfor _ in range(3200):\n    sys.stdout.write('x' * 65536)\n")
process = subprocess.Popen([PYTHON, "-m", "tf_device_panel", "run", "script", "-p", f"path={one_line}"],
                           env=env(home), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
peak, started = 0, time.monotonic()
while process.poll() is None and time.monotonic() - started < 120:
    try:
        peak = max(peak, psutil.Process(process.pid).memory_info().rss)
    except psutil.Error:
        break
    time.sleep(0.05)
good = process.poll() == 0 and peak < 150 * 2**20
print(f"{'ok  ' if good else 'FAIL'} 200 MB in one line: exit {process.poll()} in {time.monotonic() - started:.1f} s, "
      f"CLI peak {peak / 2**20:.0f} MB")
if not good:
    failures.append("200 MB in one line")
    process.kill()
check("200 MB in one line", home)

# 4. the exporter under load: 200 simultaneous scrapes and 20 idle clients, on 127.0.0.1
home = work / "exporter"
with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
exporter = subprocess.Popen([PYTHON, "-m", "tf_device_panel", "exporter", "--listen", f"127.0.0.1:{port}"],
                            env=env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
assert exporter.stdout is not None
exporter.stdout.readline()  # "serving …": it listens
idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(20)]
barrier, answered, slowest = threading.Barrier(200), [], [0.0]


def scrape() -> None:
    barrier.wait()
    began = time.perf_counter()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            answered.append(response.status)
    except OSError:  # unanswered: counted by its absence from `answered`; its wait still counts as slowest
        pass
    slowest[0] = max(slowest[0], time.perf_counter() - began)


threads = [threading.Thread(target=scrape) for _ in range(200)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
for client in idle:
    client.close()
exporter.send_signal(signal.SIGTERM)
_, err = exporter.communicate(timeout=30)
good = answered.count(200) == 200 and "Traceback" not in err
print(f"{'ok  ' if good else 'FAIL'} exporter: {answered.count(200)}/200 scrapes answered, slowest {slowest[0]:.2f} s, "
      f"{err.count('Traceback')} tracebacks")
if not good:
    failures.append("exporter")
check("exporter", home)

# 4b. issue 32: hostile lab targets for `machines` (1 GiB, a byte every 2 s in the headers, a Prometheus whose
# queries trickle, wrong JSON types), then 1,000 slow clients against the exporter; all on 127.0.0.1
def hostile(behave) -> tuple[socket.socket, threading.Event]:
    """A target answering every connection with `behave(conn, stop)` on a thread of its own, until `stop`."""
    listener, stop = socket.create_server(("127.0.0.1", 0)), threading.Event()
    listener.settimeout(0.2)

    def serve(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(5)
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(4096) or b"\r\n\r\n"
            behave(conn, stop)

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                threading.Thread(target=serve, args=(listener.accept()[0],), daemon=True).start()
        listener.close()

    threading.Thread(target=accept, daemon=True).start()
    return listener, stop


def gigabyte(conn: socket.socket, stop: threading.Event) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
    for _ in range(1024):
        if stop.is_set():
            return
        conn.sendall(b"x" * 2**20)


def trickle(head: bytes, body: bytes = b""):
    def behave(conn: socket.socket, stop: threading.Event) -> None:
        conn.sendall(head)
        for byte in body[:60]:  # a byte every 2 s, two minutes at most
            if stop.wait(2.0):
                return
            conn.sendall(bytes([byte]))
    return behave


def wrong_types(conn: socket.socket, stop: threading.Event) -> None:
    body = b'{"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": 5}]}}'
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


empty = b'{"status": "success", "data": {"resultType": "vector", "result": []}}'
for case, behave, flag, limit, expect in (
        ("machines: 1 GiB target", gigabyte, "--exporter", 15, "larger than the 8 MiB allowed"),
        ("machines: headers a byte every 2 s", trickle(b"HTTP/1.1 200 OK\r\n", b"X-Slow: " + b"y" * 60),
         "--exporter", 10, "no complete answer within 5 s"),
        ("machines: Prometheus answers a byte every 2 s",
         trickle(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(empty), empty), "--prometheus", 15,
         "no complete answer within 10 s"),
        ("machines: Prometheus with wrong JSON types", wrong_types, "--prometheus", 10,
         "data.result[0].value should be")):
    listener, stop = hostile(behave)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    process = subprocess.Popen([PYTHON, "-m", "tf_device_panel", "machines", flag, url], env=env(work / "lab"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    began, peak = time.monotonic(), 0
    while process.poll() is None and time.monotonic() - began < 60:
        with contextlib.suppress(OSError, ValueError, IndexError):  # IndexError: exited, no VmHWM any more
            peak = max(peak, int(Path(f"/proc/{process.pid}/status").read_text().split("VmHWM:")[1].split()[0]))
        time.sleep(0.02)
    if process.poll() is None:
        process.kill()
    out, err = process.communicate()
    stop.set()
    took = time.monotonic() - began
    good = expect in out + err and took < limit and peak < 200 * 1024 and "Traceback" not in err
    print(f"{'ok  ' if good else 'FAIL'} {case}: exit {process.returncode} in {took:.1f} s, VmHWM {peak / 1024:.0f} MB: "
          f"{(out + err).strip().splitlines()[-1][-90:]}")
    if not good:
        failures.append(case)

home = work / "slowloris"
exporter = subprocess.Popen([PYTHON, "-m", "tf_device_panel", "exporter", "--listen", "127.0.0.1:0"], env=env(home),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
assert exporter.stdout is not None
port = int(exporter.stdout.readline().split()[1].rsplit(":", 1)[1].split("/")[0])
slow = []
for _ in range(1000):
    client = socket.socket()
    client.setblocking(False)
    client.connect_ex(("127.0.0.1", port))
    slow.append(client)
time.sleep(1.0)
for client in slow:
    with contextlib.suppress(OSError):
        client.send(b"G")  # the start of a request, never finished
threads = psutil.Process(exporter.pid).num_threads()
with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics?name[]=tfdp_build_info", timeout=30) as response:
    filtered = response.read().decode()
began = time.monotonic()
exporter.send_signal(signal.SIGTERM)
_, err = exporter.communicate(timeout=30)
stopped = time.monotonic() - began
for client in slow:
    client.close()
good = threads <= 72 and stopped < 2 and "tfdp_build_info{" in filtered and "Traceback" not in err
print(f"{'ok  ' if good else 'FAIL'} exporter, 1,000 slow clients: {threads} threads, a filtered scrape answered, "
      f"SIGTERM exit {exporter.returncode} in {stopped:.2f} s")
if not good:
    failures.append("exporter slow clients")
check("exporter slow clients", home)


# 5. SIGKILL of the CLI, the supervisor or the run process at a random moment of a flood
def targets(cli_process: psutil.Process) -> dict[str, psutil.Process]:
    """The CLI, its supervisor (its child) and the run process (the supervisor's child: a fork, same cmdline)."""
    found = {"cli": cli_process}
    for child in cli_process.children():
        if "core.runproc.supervisor" in " ".join(child.cmdline()):
            found["supervisor"] = child
            for grandchild in child.children():
                found["run process"] = grandchild
    return found


for target in ("cli", "supervisor", "run process"):
    for round_ in range(ROUNDS):
        home = work / f"kill-{target.replace(' ', '-')}-{round_}"
        process = subprocess.Popen([PYTHON, "-m", "tf_device_panel", "run", "script", "-p", f"path={FLOOD}"],
                                   env=env(home), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started = time.monotonic()
        victim = None
        while victim is None and time.monotonic() - started < 120 and process.poll() is None:
            victim = targets(psutil.Process(process.pid)).get(target)
            time.sleep(0.1)
        time.sleep(random.uniform(0.0, 3.0))
        if victim is None:
            failures.append(f"SIGKILL {target}: never found it")
        else:
            with contextlib.suppress(psutil.Error):  # it ended on its own first
                victim.kill()
        try:
            code = process.wait(timeout=30) if target != "cli" else process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
            process.kill()
            process.wait()
            failures.append(f"SIGKILL {target}: the CLI did not end")
        print(f"     SIGKILL {target} round {round_ + 1}: CLI exit {code}")
        check(f"SIGKILL {target} round {round_ + 1}", home)

shutil.rmtree(work, ignore_errors=True)
print(f"chaos: {'every check held' if not failures else 'FAILED: ' + ', '.join(failures)}")
sys.exit(1 if failures else 0)
EOF
