"""`tf-device-panel`: the command line over the same engine the window uses.

Exit codes: 0 success, 1 the job failed, 2 bad usage or invalid configuration; a run stopped by Ctrl+C, SIGTERM
or SIGHUP 130, 143 or 129 (128 + the signal's number, as shells and python report it); `run script` otherwise
exits with the script's own status.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn, TextIO, TypedDict

from tf_device_panel.core.catalogue import (
    JOBS,
    JobSpec,
    ParamError,
    ParamValues,
    get_job,
    path_problem,
)
from tf_device_panel.core.catalogue.cluster_layout import cluster_commands
from tf_device_panel.core.catalogue.fit_work import BATCH, BUILT_IN_MODELS, KERAS_SUFFIX, Work, keras_model_problem
from tf_device_panel.core.catalogue.script_checks import script_problem
from tf_device_panel.core.catalogue.share_params import SHARE_OPTIONS, VERIFY_BATCH, CommandOption
from tf_device_panel.core.cli.output import (
    RunPrinter,
    cluster_config_text,
    devices_text,
    error_text,
    jobs_text,
    problems_text,
    run_line,
    run_text,
    script_process_factory,
)
from tf_device_panel.core.client import machine, share
from tf_device_panel.core.client.history import INCOMPLETE, UNREADABLE, HistoryError, RunHistory
from tf_device_panel.core.client.run_manager import run_job_once
from tf_device_panel.core.client.run_memory import summary_peaks
from tf_device_panel.core.client.run_record import JobRun
from tf_device_panel.core.client.runtime import shell_status
from tf_device_panel.core.config import (
    ConfigError,
    DeviceConfig,
    Kind,
    ProfileError,
    load_profile,
    to_python_snippet,
    unchecked_gpus_warning,
)
from tf_device_panel.core.devices.gpus import tf_gpu_lines, tf_gpu_messages
from tf_device_panel.core.devices.nvml import GpuSnapshotJson
from tf_device_panel.core.devices.nvml import shared as shared_nvml
from tf_device_panel.core.logsetup import configure_logging
from tf_device_panel.core.text import clip, quote
from tf_device_panel.core.units import MIB, mib_text

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
DEFAULT_EXPORTER_PORT = 9848  # core.lab.exporter.DEFAULT_PORT; cli imports the exporter only when it runs


class UsageError(Exception):
    """Bad input from the user: printed as one clear message, exit code 2."""


class ConfigRejected(Exception):
    """TensorFlow refused the configuration when the runtime applied it (exit code 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        # argparse quotes a bad value whole, however large: shorten each quoted value, keep the rest
        raise UsageError(clip(re.sub(r"'([^']{60,})'", lambda m: quote(m.group(1)), message), 600))


def _emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def _print_lines(lines: Iterable[str], stream: TextIO | None = None) -> None:
    for line in lines:
        print(line, file=stream or sys.stdout)


def load_config(path: str | None) -> DeviceConfig:
    gpus = machine.nvml_gpu_inventory()
    config = (DeviceConfig() if path is None else load_profile(path)).checked(gpus)  # ConfigError naming each
    warning = unchecked_gpus_warning(config, machine.no_gpu_reason()) if gpus is None else None
    if warning is not None:
        print(f"warning: {warning}", file=sys.stderr)
    return config


# -- commands ------------------------------------------------------------------------------------
def _no_window(profile: str | None) -> int:
    raise UsageError("this entry point has no window; start it with `tf-device-panel` or `python -m tf_device_panel`")


def cmd_validate(args: argparse.Namespace) -> int:
    try:
        config = load_profile(args.file)
    except ProfileError as exc:
        # Every problem and every warning: a profile with problems still says which GPUs it could not check.
        unread = exc.config
        warning = (unchecked_gpus_warning(unread, machine.no_gpu_reason())
                   if unread is not None and machine.nvml_gpu_inventory() is None else None)
        _print_lines(problems_text(args.file, exc.problems, [warning] if warning else []))
        return EXIT_USAGE
    gpus = machine.nvml_gpu_inventory()
    problems = config.problems(gpus)
    warning = unchecked_gpus_warning(config, machine.no_gpu_reason()) if gpus is None else None
    if problems:
        _print_lines(problems_text(f"{args.file} on this machine", problems, [warning] if warning else []))
        return EXIT_USAGE
    if warning is not None:
        # A profile for another machine is legitimate, but "valid" alone would promise it runs here.
        print(f"{args.file}: valid as a profile, but its GPUs could not be checked — {config.summary()}")
        print(f"  - warning: {warning}")
        return EXIT_OK
    print(f"{args.file}: valid — {config.summary()}")
    return EXIT_OK


def cmd_snippet(args: argparse.Namespace) -> int:
    config = load_profile(args.config)  # required: an empty name is an error, not "no profile"
    sys.stdout.write(to_python_snippet(config))
    return EXIT_OK


def cmd_jobs(args: argparse.Namespace) -> int:
    if args.code:
        spec = get_job(args.code)
        sys.stdout.write(spec.code())
        return EXIT_OK
    if args.json:
        _emit_json([spec.to_json() for spec in JOBS.values()])
        return EXIT_OK
    _print_lines(jobs_text(JOBS.values()))
    return EXIT_OK


class NvmlInfo(TypedDict):
    """What `devices` says of NVML (under "nvml" in its --json)."""

    available: bool
    message: str
    driver_version: str | None
    cuda_driver_version: str | None
    gpus: list[GpuSnapshotJson]


def cmd_devices(args: argparse.Namespace) -> int:
    from tf_device_panel.core.client.runtime import ConfigurationRejected, TensorFlowMissing, describe_devices

    config = load_config(args.config)
    nvml = shared_nvml()
    nvml_info: NvmlInfo = {
        "available": nvml.init(), "message": nvml.message, "driver_version": nvml.driver_version(),
        "cuda_driver_version": nvml.cuda_driver_version(), "gpus": [g.to_json() for g in nvml.gpus()]}
    try:
        info, lines = describe_devices(config)
    except (TensorFlowMissing, ConfigurationRejected) as exc:
        # Printed as it is: which Python and how to install TensorFlow, or what TensorFlow refused and where.
        raise ConfigRejected(str(exc)) from None
    if args.json:
        _emit_json({**info.payload(), "nvml": nvml_info, "tf_gpu_messages": tf_gpu_lines(lines)})
        return EXIT_OK
    _print_lines(devices_text(info, config.summary(), nvml_info, tf_gpu_messages(lines)))
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    spec = get_job(args.job)
    texts: dict[str, str] = {}
    for item in args.param or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--param {quote(item)}: expected NAME=VALUE, e.g. --param device=/GPU:0")
        if name.strip() in texts:  # last-wins would run with a value the user may not have meant
            raise UsageError(f"--param {quote(name.strip())} is given twice ({quote(texts[name.strip()])} and "
                             f"{quote(value)}); give each parameter once")
        texts[name.strip()] = value
    script = spec.name == "script"
    if script:
        rejected = script_rejected(texts)
        if rejected is not None:
            return rejected
    params = spec.resolve(texts=texts)
    config = load_config(args.config)
    check_devices(spec, params, config)  # exit 2 now, not after TensorFlow has started
    # A closed stdout (`run … | head`) cancels the run, as it would end a bare `python file.py`.
    stop = threading.Event()
    printer = None
    if script and not args.json:
        # The script's stdout and stderr where a bare run puts them; the panel's own lines on stderr.
        printer = RunPrinter(args.verbose, sys.stderr, on_broken_pipe=stop.set, job_output=(sys.stdout, sys.stderr))
    elif not args.json:
        printer = RunPrinter(args.verbose, sys.stdout, on_broken_pipe=stop.set)
    elif args.verbose:
        printer = RunPrinter(True, sys.stderr)
    outcome = run_job_once(config, spec.name, params, on_event=printer, history=RunHistory(), cancel=stop,
                           process_factory=script_process_factory(sys.stdout, sys.stderr, script and not args.json))
    if printer is not None:
        printer.end_live_line()
    if outcome.error and outcome.error.type == "ConfigRejected":
        if args.json:
            _emit_json(outcome.to_json())
        else:
            print(f"error: {outcome.error.message}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        _emit_json(outcome.to_json())
    else:
        # A script's traceback is already on stderr, as its own run printed it (sys.excepthook).
        panel = sys.stderr if script else sys.stdout
        lines = run_text(outcome, printer.run_state if printer is not None else None)
        _print_lines(lines[:-1], panel)
        if outcome.error:
            _print_lines(error_text(outcome.error, args.verbose and not script, first_line=script), sys.stderr)
        _print_lines(lines[-1:], panel)
    if outcome.record_problem:
        # The run went on; only its record is short. One line, whatever the output mode.
        print(f"warning: this run's record is incomplete: {outcome.record_problem}", file=sys.stderr)
    signum = outcome.cancel.signal if outcome.cancel is not None else None
    if signum and outcome.status != "ok":
        return 128 + int(signum)  # stopped by Ctrl+C, SIGTERM or SIGHUP: 130, 143, 129, as shells and python say
    if script:
        if outcome.status == "cancelled":
            return EXIT_INTERRUPTED  # its stdout closed (`run … | head`): the run was cancelled
        if outcome.returncode is not None:
            return shell_status(outcome.returncode)  # the script's own status, as a bare run gives it
    return EXIT_OK if outcome.status == "ok" else EXIT_JOB_FAILED


def check_devices(spec: JobSpec, params: ParamValues, config: DeviceConfig) -> None:
    """The devices the job's parameters name must be where it uses them (ParamError, exit 2): the check the window
    and the run process make too (`JobSpec.check_devices`). NVML is asked only when a parameter names one."""
    if spec.names_devices(params):
        spec.check_devices(params, machine.run_devices(config))


def script_rejected(texts: dict[str, str]) -> int | None:
    """A script that cannot run at all (missing, a folder, unreadable, not in its encoding, a syntax error):
    one line naming the file and the line, exit 2 before TensorFlow starts, and a finalized run record."""
    path = texts.get("path", "")
    problem = script_problem(path) if path.strip() else None
    if problem is None:
        return None
    JobRun("script", dict(texts), DeviceConfig(), None, RunHistory()).fail("ScriptError", problem)
    print(f"error: {problem}", file=sys.stderr)
    return EXIT_USAGE


def cmd_doctor(args: argparse.Namespace) -> int:
    from tf_device_panel.core.client import doctor

    config = load_profile(args.config) if args.config is not None else None
    if not args.json:
        print("Examining this machine (TensorFlow is imported in a probe process; this takes a few seconds)…",
              file=sys.stderr)
    facts = doctor.gather(config)
    checks = doctor.diagnose(facts)
    if args.json:
        _emit_json({"checks": [c.to_json() for c in checks], "facts": facts.to_json(),
                    "exit_code": doctor.exit_code(checks)})
    elif args.markdown:
        sys.stdout.write(doctor.to_markdown(checks, facts))
    else:
        sys.stdout.write(doctor.to_text(checks, facts))
    return doctor.exit_code(checks)


def cmd_cluster_config(args: argparse.Namespace) -> int:
    try:
        tasks = cluster_commands(args.worker, args.ps or (), chief=args.chief, profile=args.config)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.ps and not args.chief:
        raise UsageError("a parameter-server cluster needs a coordinator: add --chief HOST:PORT")
    if args.config is not None:
        load_profile(args.config)  # a bad profile is named now, not on every machine later
    if args.json:
        _emit_json(tasks)
        return EXIT_OK
    _print_lines(cluster_config_text(tasks, bool(args.ps), args.config))
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    """The history, newest first, streamed: each run's summary is read, printed and let go before the next, so
    `runs --json --limit 10000` holds one run at a time."""
    history = RunHistory()
    runs = history.iter_summaries(limit=args.limit)
    printed = False
    if args.json:  # what json.dumps(list, indent=2) prints, one run at a time
        print("[", end="")
        for run in runs:
            if run.peaks is None and run.status not in (UNREADABLE, INCOMPLETE):  # recorded before runs kept them
                run.peaks = summary_peaks(history, run)
            text = json.dumps(run.to_json(), indent=2, default=str).replace("\n", "\n  ")
            print(("," if printed else "") + "\n  " + text, end="")
            printed = True
        print("\n]" if printed else "]")
        return EXIT_OK
    for run in runs:
        print(run_line(run))
        printed = True
    if not printed and args.limit != 0:
        print(f"no runs yet (history folder: {history.root})")
    return EXIT_OK


def _share_work(args: argparse.Namespace) -> Work:
    """The work each seat runs: the built-in cnn, --script with --args, or --model (dense, cnn or a .keras file),
    checked before anything starts."""
    model, script, script_args = args.model or "cnn", (args.script or "").strip(), args.args or ""
    if script_args and not script:
        raise share.ShareError("arguments are for a script; give the script too", "args")
    if script and args.model:
        raise share.ShareError("give a script or a model, not both", "model")
    if script:
        problem = path_problem(script)
        if problem:
            raise share.ShareError(problem, "script")
        if args.batch is not None and BATCH not in script_args:
            raise share.ShareError(f"the script's arguments have no {BATCH} for the batch to go in; write "
                                   f"{BATCH} where your script takes its batch size, or leave the batch out", "batch")
    elif model not in BUILT_IN_MODELS:
        problem = (path_problem(model) if model.lower().endswith(KERAS_SUFFIX) else
                   f"{quote(model)} is neither {' nor '.join(BUILT_IN_MODELS)} nor a saved Keras model (.keras)")
        problem = problem or keras_model_problem(model)
        if problem:
            raise share.ShareError(problem, "model")
    return Work(model, script, script_args)


def _share_error(exc: share.ShareError, json_out: bool) -> UsageError:
    """The command line's words for a share error: its option, then the message; with --json also the field and
    the message alone on stdout, for the window to say in its own words."""
    if json_out:
        _emit_json({"error": {"field": exc.field, "message": str(exc)}})
    options = {option.param.name for option in SHARE_OPTIONS}
    # "work" (what the seats run: --script or --model) is a field of the window's form, not an option.
    return UsageError(f"--{exc.field}: {exc}" if exc.field in options else f"{exc}")


def cmd_share(args: argparse.Namespace) -> int:
    try:
        return _share(args)
    except share.ShareError as exc:
        raise _share_error(exc, args.json) from None


def _share(args: argparse.Namespace) -> int:
    if args.seats is not None and args.max:
        raise share.ShareError("give a number of seats or ask for the most (--max), not both", "seats")
    if args.seats is None and not args.max:
        raise share.ShareError("give a number of seats, or ask for the most the device holds (--max)", "seats")
    seats = 0
    if args.seats is not None:
        try:
            seats = int(args.seats)
        except ValueError:
            raise share.ShareError(f"expected a whole number of seats, got {quote(args.seats)} (e.g. 3)") from None
    if args.batch is not None and not (args.verify or args.max):
        raise share.ShareError("the batch is what each seat's verifying run trains with; it needs --verify or --max "
                               "(writing profiles runs nothing)", "batch")
    batch = VERIFY_BATCH if args.batch is None else args.batch
    work = _share_work(args)
    base = DeviceConfig() if args.config is None else load_profile(args.config)
    gpus = machine.nvml_gpu_inventory()
    base.checked(gpus)
    out = share.check_out_dir(args.out, args.force)
    reason = machine.no_gpu_reason() if not gpus else ""
    most: share.MostSeats | None = None
    say = (lambda text: None) if args.json else (lambda text: print(text, flush=True))
    if args.max:
        most = share.find_most_seats(base, gpus, work, batch, no_gpu_reason=reason, said=say)
        plan = most.plan
        overhead = most.needs.overhead()
    else:
        plan = share.plan_seats(base, seats, gpus, no_gpu_reason=reason)
        if args.verify:  # one run of the work alone measures what each seat takes beyond its allocator
            say(f"measuring the work alone ({work.name}, batch {batch})…")
            overhead, needs = share.measure_overhead(base, gpus, work, batch, no_gpu_reason=reason)
            if overhead.gpu_reserve_mib is not None:
                plan = share.plan_seats(base, seats, gpus, no_gpu_reason=reason,
                                        reserved_mib=overhead.gpu_reserve_mib)
            share.check_host_memory(plan, overhead, needs.peak_mib if needs else None)
        else:
            overhead = share.assumed_overhead(plan.device, "the profiles are only written, nothing runs; verifying "
                                                           "the seats measures it")
    warnings = share.machine_warnings(plan, overhead)
    for warning in warnings if not args.json else ():
        print(f"warning: {warning}", file=sys.stderr)
    try:
        profiles = share.write_profiles(plan, out, force=args.force)
    except OSError as exc:
        raise share.ShareError(f"cannot write the profiles in {quote(str(out))}: {exc.strerror or exc}",
                               "out") from None
    report: share.ShareReport = {**plan.to_json(), "out": str(out), "work": work.name, "batch": batch,
                                 "warnings": warnings, "overhead": overhead.to_json(),
                                 "seats": [{"seat": i, "profile": str(p), "limit_bytes": plan.seat_mib * 1024 * 1024}
                                           for i, p in enumerate(profiles, start=1)]}
    count = share.seats_text(len(profiles))
    if not args.json:
        reserve = (f", less {plan.reserved_mib} MiB per seat for its CUDA context and headroom"
                   if plan.reserved_mib else "")
        print(f"{plan.device}: {plan.source}{reserve}: {count} of {plan.seat_mib} MiB")
        print(f"beyond each seat's allocator: {overhead.said}")
        for path in profiles:
            print(f"  wrote {share.shown_path(path)}")
        if args.verify and most is None:
            print(f"verifying: {count} side by side, each running {work.name} (batch {batch}) under its "
                  "profile…", flush=True)
    failed = False
    if most is not None:
        report["seats"] = [{**row, "profile": str(path)} for row, path in zip(most.rows, profiles, strict=True)]
        report["verified"] = True
        report["most"] = {"seats": len(profiles), "bound": most.bound, "above": most.above, "tried": most.tried,
                          "work_peak_mib": most.needs.peak_mib, "process_mib": most.needs.process_mib}
    elif args.verify:
        report["seats"] = share.verify_seats(plan, profiles, work=work, batch=batch)
        failed = any(row["status"] != "held" for row in report["seats"])
        report["verified"] = not failed
    if args.json:
        _emit_json(report)
        return EXIT_JOB_FAILED if failed else EXIT_OK
    if "verified" in report:
        for row in report["seats"]:
            peak = "—" if row["peak_bytes"] is None else mib_text(row["peak_bytes"] / MIB)
            process = row.get("process_peak_bytes")
            own = f", its processes {mib_text(process / MIB, 0)}" if process else ""
            line = f"  seat {row['seat']}: peak {peak} of {mib_text(row['limit_bytes'] / MIB, 0)}{own}: {row['status']}"
            print(line + (f" ({row['error']})" if row.get("error") else ""))
    if most is not None:
        print(f"the most seats for {work.name} (batch {batch}): {len(profiles)}, all held side by side; "
              f"{most.above} (first guess bounded by {most.bound})")
    elif args.verify:
        print("all seats held" if not failed else "a seat did not hold")
    return EXIT_JOB_FAILED if failed else EXIT_OK


def cmd_exporter(args: argparse.Namespace) -> int:
    import signal
    import threading

    from tf_device_panel.core.lab import exporter

    try:
        host, port = exporter.parse_listen(args.listen)
        exporter.install_test_nvml()
        server = exporter.Exporter(host, port, interval=exporter.check_interval(args.interval),
                                   certfile=args.certfile, keyfile=args.keyfile)
        server.start()
    except exporter.ExporterError as exc:
        raise UsageError(str(exc)) from None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # systemd stops the unit with SIGTERM
    print(f"serving {server.url} (read-only; Ctrl+C stops)", flush=True)
    try:
        # Short waits: SIGTERM may land on a request thread, and then the main thread runs its handler only when
        # its wait ends (a 1 s wait made a stop take up to a second more).
        while not stop.wait(0.1):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return EXIT_OK


def cmd_machines(args: argparse.Namespace) -> int:
    from tf_device_panel.core.lab import machines

    try:
        source = machines.make_source(args.prometheus, args.exporter)
    except machines.SourceError as exc:
        raise UsageError(str(exc)) from None
    try:
        found = source.fetch()
    except machines.SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_JOB_FAILED
    if args.json:
        _emit_json({"source": source.description, "machines": [m.to_json() for m in found]})
    else:
        _print_lines(machines.machines_text(found, source.description))
    return EXIT_OK


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, e.g. 1 or 0.5, got {text!r}") from None


def _count(text: str) -> int:
    """A whole number of 0 or more, for --limit."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def _add_options(parser: argparse.ArgumentParser, options: Sequence[CommandOption]) -> None:
    """A command's options from their declaration: a switch is a bare flag, any other option takes a value (read by
    its declared reading, whose refusal argparse says as the option's)."""
    for option in options:
        param = option.param
        if param.kind is Kind.TOGGLE:
            parser.add_argument(option.flag, action="store_true", help=param.help)
        elif option.read is not None:
            parser.add_argument(option.flag, metavar=option.metavar, help=param.help, required=option.required,
                                type=_argparse_type(option.read))
        else:
            parser.add_argument(option.flag, metavar=option.metavar, help=param.help, required=option.required)


def _argparse_type(read: Callable[[str], object]) -> Callable[[str], object]:
    def typed(text: str) -> object:
        try:
            return read(text)
        except ValueError as exc:  # argparse keeps a type's own words only from an ArgumentTypeError
            raise argparse.ArgumentTypeError(str(exc)) from None

    return typed


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tf-device-panel", description="See and configure the devices TensorFlow uses.")
    parser.add_argument("--verbose", "-v", action="store_true", help="show TensorFlow's log lines and tracebacks")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    p = sub.add_parser("gui", help="open the window (the default with no command)")
    p.add_argument("--config", metavar="FILE", help="device configuration profile to open")

    p = sub.add_parser("devices", help="physical and logical devices after the configuration")
    p.add_argument("--config", metavar="FILE", help="device configuration profile (JSON)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_devices)

    p = sub.add_parser("jobs", help="the jobs and their parameters")
    p.add_argument("--json", action="store_true")
    p.add_argument("--code", metavar="JOB", help="print the code a job runs")
    p.set_defaults(func=cmd_jobs)

    p = sub.add_parser("run", help="run a job in a fresh runtime, streaming placements")
    p.add_argument("job", help=f"one of: {', '.join(JOBS)}")
    p.add_argument("--config", metavar="FILE", help="device configuration profile (JSON)")
    p.add_argument("--param", "-p", action="append", metavar="NAME=VALUE", help="job parameter (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("snippet", help="the configuration as Python code for your own script")
    p.add_argument("--config", metavar="FILE", required=True)
    p.set_defaults(func=cmd_snippet)

    p = sub.add_parser("validate", help="every problem in a profile")
    p.add_argument("file")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("doctor", help="why TensorFlow does not see or use a GPU: checks, evidence, fixes")
    p.add_argument("--config", metavar="FILE", help="also check this device configuration profile")
    output = p.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="for scripts")
    output.add_argument("--markdown", action="store_true", help="for a bug report")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("cluster-config", help="TF_CONFIG and start command for each task of a real cluster")
    p.add_argument("--worker", action="append", required=True, metavar="HOST:PORT", help="a worker (repeatable)")
    p.add_argument("--ps", action="append", metavar="HOST:PORT", help="a parameter server (repeatable)")
    p.add_argument("--chief", metavar="HOST:PORT", help="the coordinator, for a parameter-server cluster")
    p.add_argument("--config", metavar="FILE", help="device configuration profile every task applies")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cluster_config)

    p = sub.add_parser("runs", help="past runs")
    p.add_argument("--json", action="store_true")
    p.add_argument("--limit", type=_count, default=50, help="list at most this many (newest first)")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("share", help="split a GPU (or the CPU's cap) into seats: one profile per seat, verified")
    _add_options(p, SHARE_OPTIONS)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_share)

    p = sub.add_parser("exporter", help="serve this machine's GPU, host and run metrics to Prometheus (/metrics)")
    p.add_argument("--listen", default=f"127.0.0.1:{DEFAULT_EXPORTER_PORT}", metavar="HOST:PORT",
                   help="address to listen on (default 127.0.0.1:9848: this machine only)")
    p.add_argument("--interval", type=_seconds, default=1.0, metavar="SECONDS", help="sampling period (default 1)")
    p.add_argument("--certfile", metavar="PEM", help="serve HTTPS with this certificate (with --keyfile)")
    p.add_argument("--keyfile", metavar="PEM", help="the certificate's private key")
    p.set_defaults(func=cmd_exporter)

    p = sub.add_parser("machines", help="the GPUs and hosts of many machines, from Prometheus or exporters")
    p.add_argument("--prometheus", metavar="URL", help="a Prometheus server, e.g. http://prometheus.lab:9090")
    p.add_argument("--exporter", action="append", metavar="URL",
                   help="an exporter to scrape directly, e.g. http://gpu01:9848 (repeatable)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_machines)
    for name in ("devices", "jobs", "run", "snippet", "validate", "runs", "cluster-config", "doctor", "exporter",
                 "machines", "share"):
        sub.choices[name].add_argument("--verbose", "-v", action="store_true", default=argparse.SUPPRESS,
                                       help="show TensorFlow's log lines and tracebacks")
    return parser


PARAM_OPTIONS = ("-p", "--param", "--para", "--par", "--pa", "--p")  # argparse takes a long option's prefixes


def take_params(argv: Sequence[str]) -> tuple[list[str], list[str]] | None:
    """`run`'s job parameters taken out of `argv` in one pass: (their NAME=VALUE texts in order, the rest).

    argparse looks for the next option among every option's position after each option it reads, so 100,000
    `-p` took minutes to parse (and its append copies the list each time). Only the plain spellings are taken
    (`-p V`, `-pV`, `-p=V`, `--param V`, `--param=V`); None, so that argparse reads everything as it always did,
    when the command is not `run`, a value is missing or `--` ends the options."""
    args = list(argv)
    start = 0
    while start < len(args) and args[start] in ("-v", "--verbose"):
        start += 1
    if start >= len(args) or args[start] != "run":
        return None
    params: list[str] = []
    rest = args[:start + 1]
    index = start + 1
    while index < len(args):
        token = args[index]
        if token == "--":
            return None  # what follows is positional: argparse's rules
        name, equals, value = token.partition("=")
        if token in PARAM_OPTIONS:
            if index + 1 >= len(args) or args[index + 1].startswith("-"):
                return None  # argparse says what is missing
            params.append(args[index + 1])
            index += 2
            continue
        if equals and name in PARAM_OPTIONS:
            params.append(value)
        elif token.startswith("-p"):  # "-pV": the value run on
            params.append(token[2:])
        else:  # anything else, "-vp V" too, is argparse's to read
            rest.append(token)
        index += 1
    return params, rest


def parse_command_line(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """argparse's reading of `argv`, with `run`'s parameters taken in one pass (linear in their number)."""
    taken = take_params(sys.argv[1:] if argv is None else argv)
    if taken is None:
        return parser.parse_args(argv)
    params, rest = taken
    args = parser.parse_args(rest)
    if getattr(args, "param", None):  # a spelling left to argparse: let it read them all, in their order
        return parser.parse_args(argv)
    if params:
        args.param = params
    return args


MAX_PARAM_PROBLEMS_SHOWN = 8


def param_error_text(exc: ParamError) -> str:
    """One line for the refused parameters: the first few problems and how many more (100,000 unknown names
    would otherwise make a 15 MB line)."""
    shown = "; ".join(f"{name}: {message}" for name, message in exc.problems[:MAX_PARAM_PROBLEMS_SHOWN])
    more = len(exc.problems) - MAX_PARAM_PROBLEMS_SHOWN
    return f"error: job {exc.job!r}: {shown}" + (f"; … and {more} more problems like these" if more > 0 else "")


def main(argv: Sequence[str] | None = None, open_window: Callable[[str | None], int] = _no_window) -> int:
    """Run one command; `open_window(profile)` opens the window (the launcher passes it, so core never imports gui)."""
    parser = build_parser()
    args: argparse.Namespace | None = None
    try:
        args = parse_command_line(parser, argv)
        configure_logging(verbose=getattr(args, "verbose", False))
        if args.command in (None, "gui"):
            return open_window(getattr(args, "config", None))
        return int(args.func(args))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ProfileError as exc:
        _print_lines(problems_text(f"error: invalid profile {exc.path}", exc.problems), sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        _print_lines(problems_text("error: invalid configuration", exc.problems), sys.stderr)
        return EXIT_USAGE
    except (ConfigRejected, HistoryError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ParamError as exc:
        print(param_error_text(exc), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED  # as a shell reports a command ended by Ctrl+C
    except Exception as exc:
        if getattr(args, "verbose", False):
            raise
        print(f"error: {type(exc).__name__}: {exc} (run with --verbose for details)", file=sys.stderr)
        return EXIT_JOB_FAILED


if __name__ == "__main__":
    sys.exit(main())  # the command line alone; `python -m tf_device_panel` also opens the window
