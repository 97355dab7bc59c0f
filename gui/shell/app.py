"""Start the window, or say plainly why Qt cannot start and point to the command line."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

CLI_HINT = "Meanwhile the command line works: tf-device-panel devices | run JOB | doctor | --help"


def debian_package(soname: str) -> str:
    """'libxcb-icccm.so.4' -> 'libxcb-icccm4', 'libxkbcommon-x11.so.0' -> 'libxkbcommon-x11-0' (Debian's rule)."""
    match = re.match(r"^(lib[\w+.-]+?)\.so\.(\d+)", soname)
    if not match:
        return soname
    name, major = match.group(1).lower(), match.group(2)
    return f"{name}-{major}" if name[-1].isdigit() else f"{name}{major}"


def missing_xcb_libraries() -> list[str]:
    """Shared libraries Qt's X11 plugin needs that this system lacks (via ldd, without loading Qt)."""
    spec = importlib.util.find_spec("PySide6")
    ldd = shutil.which("ldd")
    if spec is None or not spec.submodule_search_locations or ldd is None:
        return []
    qt = Path(next(iter(spec.submodule_search_locations))) / "Qt"
    candidates = [qt / "plugins" / "platforms" / "libqxcb.so", *sorted((qt / "lib").glob("libQt6XcbQpa.so*"))[:1]]
    missing: list[str] = []
    for library in candidates:
        if not library.is_file():
            continue
        try:
            output = subprocess.run([ldd, str(library)], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        for line in output.splitlines():
            if "=> not found" in line:
                name = line.split("=>")[0].strip()
                if name not in missing:
                    missing.append(name)
    return missing


DISPLAY_WAIT_S = 2.0  # how long an X server may take to accept a connection before it counts as not answering
# How long the refusal check's child may take: a Python's start on a busy 2-core machine took over 2 s (a CI
# run's check timed out, claimed no refusal, and Qt aborted); only a server that never replies waits this long.
X_CHECK_WAIT_S = 15.0


def command_path() -> str:
    """The full path of the command that was run, as a person would type it again."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "tf-device-panel"
    if os.path.basename(argv0) in ("__main__.py", "-c", "-m") or argv0.endswith(".py"):
        found = shutil.which("tf-device-panel")
        return found or f"{sys.executable} -m tf_device_panel"
    return os.path.abspath(argv0) if os.sep in argv0 else (shutil.which(argv0) or argv0)


def x_display_answers(display: str, timeout: float = DISPLAY_WAIT_S) -> bool:
    """Whether an X server accepts connections at `display` (":99", ":0.0", "host:10", "unix:1"), by the
    socket Xlib would use. Qt aborts the whole process (SIGABRT, exit 134) when it cannot connect."""
    match = re.match(r"^(?P<host>[^:]*):(?P<number>\d+)(?:\.\d+)?$", display)
    if match is None:
        return False
    host, number = match.group("host"), int(match.group("number"))
    if host in ("", "unix"):
        path = f"/tmp/.X11-unix/X{number}"
        addresses: list[tuple[int, object]] = [(socket.AF_UNIX, "\0" + path), (socket.AF_UNIX, path)]
    else:
        addresses = [(family, address) for family, _, _, _, address
                     in _resolve(host.removeprefix("tcp/"), 6000 + number)]
    for family, address in addresses:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as connection:
                connection.settimeout(timeout)
                connection.connect(address)  # type: ignore[arg-type]
                return True
        except OSError:
            continue
    return False


_X_SETUP_CHECK = """
import ctypes, sys
try:
    xcb = ctypes.CDLL("libxcb.so.1")  # by its soname: find_library would start ldconfig and gcc, seconds when busy
except OSError:
    sys.exit(0)
xcb.xcb_connect.restype = ctypes.c_void_p
xcb.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
xcb.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
connection = xcb.xcb_connect(sys.argv[1].encode(), None)
sys.exit(3 if xcb.xcb_connection_has_error(connection) else 0)
"""


def x_display_refuses(display: str, timeout: float = X_CHECK_WAIT_S) -> bool:
    """Whether the X server at `display`, which answers, refuses this process (no authorization: XAUTHORITY unset
    or without a key for it, another user's display). Asked through libxcb, as Qt's platform plugin asks, in a
    short child process (libxcb prints its own complaint on stderr, and a server that never replies must not
    hang the start): an X server that answered and then refused made Qt abort (exit 134) with a hint about
    xcb-cursor0. Without libxcb (Qt's plugin could not load either: `missing_xcb_libraries` says so) or with no
    reply within `timeout`, it does not claim a refusal."""
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", _X_SETUP_CHECK, display], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 3


def _resolve(host: str, port: int) -> list[tuple[int, int, int, str, object]]:
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)  # type: ignore[return-value]
    except OSError:
        return []


def display_problem() -> str | None:
    """Why Qt would fail to open a window here, checked before Qt aborts the process itself: one line."""
    platform = os.environ.get("QT_QPA_PLATFORM", "")
    if platform in ("offscreen", "minimal", "vnc") or sys.platform != "linux":
        return None
    command = command_path()
    virtual = f"or on a virtual display: xvfb-run -a {command}. Meanwhile the command line works: " \
              f"{command} devices | run JOB | doctor | --help"
    display = os.environ.get("DISPLAY", "")
    if not display and not os.environ.get("WAYLAND_DISPLAY"):
        return ("no display found (neither DISPLAY nor WAYLAND_DISPLAY is set), so the window cannot open; "
                "over SSH use `ssh -X`, " + virtual)
    if platform in ("", "xcb") and display and not os.environ.get("WAYLAND_DISPLAY") \
            and not x_display_answers(display):
        return (f"the display DISPLAY={display} does not answer (no X server listens there: an ssh session "
                "without -X, a stopped Xvfb, a tmux session outliving its login), so the window cannot open; "
                "connect with `ssh -X`, " + virtual)
    if platform in ("", "xcb") and display and not os.environ.get("WAYLAND_DISPLAY") and x_display_refuses(display):
        xauthority = os.environ.get("XAUTHORITY")
        cookie = f"XAUTHORITY={xauthority} holds no key it accepts" if xauthority else "XAUTHORITY is not set"
        return (f"the X server at DISPLAY={display} answers but refuses this connection ({cookie}: another "
                "user's display, a session entered with sudo or su), so the window cannot open; run the panel as "
                "the display's owner, point XAUTHORITY at that user's ~/.Xauthority, "
                "or let this user in from that session with `xhost +SI:localuser:$USER`, " + virtual)
    if platform in ("", "xcb") and not os.environ.get("WAYLAND_DISPLAY"):
        missing = missing_xcb_libraries()
        if missing:
            packages = " ".join(debian_package(name) for name in missing)
            return (f"Qt's X11 platform plugin needs system libraries that are not installed: {', '.join(missing)}.\n"
                    f"Install them with: sudo apt-get install {packages}\n"
                    "(Fedora: sudo dnf install xcb-util-cursor xcb-util-wm xcb-util-keysyms xcb-util-image "
                    "xcb-util-renderutil libxkbcommon-x11)\n" + CLI_HINT)
    return None


def main(profile: str | None = None) -> int:
    problem = display_problem()
    if problem:
        print(f"tf-device-panel: {problem}", file=sys.stderr)
        return 2
    try:
        from PySide6.QtCore import QTimer
        from PySide6.QtWidgets import QApplication
    except ImportError as exc:
        print(f"tf-device-panel: the window needs PySide6, which failed to load ({exc}).\n"
              "Reinstall with: pip install -e .   — " + CLI_HINT, file=sys.stderr)
        return 2
    from tf_device_panel.gui.shell.main_window import APPLICATION, ORGANIZATION, MainWindow

    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication(sys.argv[:1])
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    app.setApplicationDisplayName("TF Device Panel")
    window = MainWindow(profile)
    window.show()
    # Ctrl+C in the terminal, or a polite kill, closes the window properly (the job and runtime stop,
    # the layout is saved). Python runs signal handlers only between bytecodes, so a timer wakes it.
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda *_: window.close())
    wake = QTimer()
    wake.timeout.connect(lambda: None)
    wake.start(250)
    return int(app.exec())
