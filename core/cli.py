"""`tf-device-panel`: the command line over the same engine the window uses.

Exit codes: 0 success, 1 the job failed, 2 bad usage or invalid configuration.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from tf_device_panel.core import events
from tf_device_panel.core.cluster import cluster_commands, task_devices_text
from tf_device_panel.core.config import (
    ConfigError,
    DeviceConfig,
    GpuInfo,
    ProfileError,
    load_profile,
    to_python_snippet,
    unchecked_gpus_warning,
    validate,
)
from tf_device_panel.core.events import Event
from tf_device_panel.core.gpus import tf_gpu_lines, tf_gpu_messages
from tf_device_panel.core.history import RunHistory
from tf_device_panel.core.jobs import JOBS, ParamError, get_job
from tf_device_panel.core.nvml import shared as shared_nvml
from tf_device_panel.core.session import JobOutcome, run_job_once
from tf_device_panel.core.text import clip, quote

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE = 0, 1, 2


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


def nvml_gpu_inventory() -> list[GpuInfo] | None:
    """The GPUs NVML sees, for validation; None when unknown (no driver)."""
    nvml = shared_nvml()
    if not nvml.init():
        return None
    return [GpuInfo(g.index, g.name or "", g.memory_total_mib) for g in nvml.gpus()]


def no_gpu_reason() -> str:
    """Why this machine's GPUs cannot be checked, in NVML's words."""
    return f"NVML sees no GPU on this machine ({shared_nvml().message or 'no NVIDIA driver'})"


def load_config(path: str | None) -> DeviceConfig:
    config = DeviceConfig() if path is None else load_profile(path)
    gpus = nvml_gpu_inventory()
    problems = validate(config, gpus)
    if problems:
        raise ConfigError(problems)
    warning = unchecked_gpus_warning(config, no_gpu_reason()) if gpus is None else None
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
        print(f"{args.file}: {len(exc.problems)} problem(s)")
        for problem in exc.problems:
            print(f"  - {problem}")
        return EXIT_USAGE
    gpus = nvml_gpu_inventory()
    problems = validate(config, gpus)
    if problems:
        print(f"{args.file}: {len(problems)} problem(s) on this machine")
        for problem in problems:
            print(f"  - {problem}")
        return EXIT_USAGE
    warning = unchecked_gpus_warning(config, no_gpu_reason()) if gpus is None else None
    if warning is not None:
        # A profile for another machine is legitimate, but "valid" alone would promise it runs here.
        print(f"{args.file}: valid as a profile, but its GPUs could not be checked — {config.summary()}")
        print(f"  - warning: {warning}")
        return EXIT_OK
    print(f"{args.file}: valid — {config.summary()}")
    return EXIT_OK


def cmd_snippet(args: argparse.Namespace) -> int:
    config = load_profile(args.config) if args.config else DeviceConfig()
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
    for spec in JOBS.values():
        print(f"{spec.name:<16} {spec.title}\n           {spec.description}")
        for param in spec.params:
            extra = f" (one of: {', '.join(param.choices)})" if param.choices else ""
            print(f"           --param {param.name}=<{param.type}>  default {param.default!r}{extra}")
            print(f"               {param.help}")
        print()
    return EXIT_OK


def cmd_devices(args: argparse.Namespace) -> int:
    from tf_device_panel.core.runtime import RuntimeProcess, RuntimeUnavailable

    config = load_config(args.config)
    nvml = shared_nvml()
    nvml_info: dict[str, Any] = {
        "available": nvml.init(), "message": nvml.message, "driver_version": nvml.driver_version(),
        "cuda_driver_version": nvml.cuda_driver_version(), "gpus": [g.to_json() for g in nvml.gpus()]}
    runtime = RuntimeProcess(config)
    runtime.start()
    try:
        info = runtime.wait_ready()
    except RuntimeUnavailable as exc:
        if runtime.startup_error:
            raise ConfigRejected(str(exc)) from None
        raise
    finally:
        runtime.stop()
    if args.json:
        _emit_json({**info, "nvml": nvml_info, "tf_gpu_messages": tf_gpu_lines(runtime.recent_lines())})
        return EXIT_OK
    build = info.get("build", {})
    cuda = "no CUDA"
    if build.get("is_cuda_build"):
        cuda = f"CUDA {build.get('cuda_version')}, cuDNN {build.get('cudnn_version')}"
    print(f"TensorFlow {info['tf_version']} ({cuda} build), Python {info['python']}")
    print(f"Configuration: {config.summary()}")
    print("\nPhysical devices:")
    for device in info["physical"]:
        extra = ""
        if device["device_type"] == "GPU":
            extra = f"  {device.get('device_name', '')}  compute {device.get('compute_capability') or '?'}"
            extra += "" if device.get("visible") else "  (hidden by visible_gpus)"
        print(f"  {device['name']}{extra}")
    print("\nLogical devices (created by the runtime):")
    for device in info["logical"]:
        limit = f"  limit {device['memory_limit_mib']} MiB" if "memory_limit_mib" in device else ""
        print(f"  {device['short_name']:<8} {device['name']}{limit}")
    if not any(d["device_type"] == "GPU" for d in info["physical"]):
        print("\nTensorFlow sees no GPU.")
        for message in tf_gpu_messages(runtime.recent_lines())[-4:]:
            print(f"  TensorFlow said: {message}")
    print("\nNVML:", end=" ")
    if not nvml_info["available"]:
        print(nvml_info["message"] or "unavailable")
    else:
        print(f"driver {nvml_info['driver_version']} (CUDA {nvml_info['cuda_driver_version']})")
        for gpu in nvml_info["gpus"]:
            memory = "memory N/A"
            if gpu["memory_total_mib"]:
                memory = f"{gpu['memory_used_mib']}/{gpu['memory_total_mib']} MiB"
            print(f"  GPU {gpu['index']}: {gpu['name'] or 'N/A'}  {gpu['pci_bus_id'] or ''}  {memory}"
                  + (f"  ({gpu['error']})" if gpu["error"] else ""))
    return EXIT_OK


class _RunPrinter:
    """Streams a run to the terminal: progress, placements, fallbacks, the job's own output."""

    def __init__(self, verbose: bool, stream: Any):
        self.verbose = verbose
        self.out = stream
        self.last_message = ""

    def __call__(self, event: Event) -> None:
        data, out = event.data, self.out
        if event.type == events.READY:
            names = ", ".join(d["short_name"] for d in data["logical"])
            print(f"runtime ready: TensorFlow {data['tf_version']}, logical devices {names} "
                  f"[pid {data['pid']}]", file=out)
        elif event.type == events.PROGRESS and data.get("message") and data["message"] != self.last_message:
            self.last_message = data["message"]
            print(f"… {data['message']}", file=out)
        elif event.type == events.PLACEMENT:
            print(f"  placed {data['op_type']:<16} {data['op']:<28} → {data['short_device']}"
                  f"  ({data['mode']})", file=out)
        elif event.type == events.FALLBACK:
            print(f"  ⚠ soft-placement fallback: {data['op']} asked for {data['requested']}, "
                  f"ran on {data['actual_short']}", file=out)
        elif event.type == events.LOG:
            if data["kind"] == "output" or (self.verbose and data["kind"] != "placement"):
                print(f"  | {data['text']}", file=out)
        elif event.type == events.STARTUP_ERROR:
            print(f"TensorFlow rejected the configuration at {data['stage']}: {data['type']}: "
                  f"{data['message']}", file=out)
        elif event.type == events.RUNTIME_EXITED and not data.get("expected"):
            print(f"runtime {data['description']}", file=out)
            for line in data.get("last_lines", [])[-10:]:
                print(f"  last output | {line}", file=out)


def _format_result(outcome: JobOutcome) -> list[str]:
    result = outcome.result
    lines: list[str] = []
    if not isinstance(result, dict):
        return [f"result: {result!r}"] if result is not None else []
    if "matrix" in result:
        rows = result["matrix"]
        width = max(len(f"{v:g}") for row in rows for v in row)
        lines.append("result:")
        lines += ["  [" + " ".join(f"{v:>{width}g}" for v in row) + "]" for row in rows]
        lines.append(f"  on {result.get('device')}")
        for device, actual in (result.get("replicas") or {}).items():
            lines.append(f"  replica MatMul on {device} → ran on {actual}")
    if result.get("kind") == "training":
        unit = "step" if result.get("loop") == "custom" else "epoch"
        lines.append(f"result: {result['replicas_in_sync']} replicas in sync over {', '.join(result['devices'])}"
                     + (f" ({result['model']} model, {result['parameters']} parameters)" if "parameters" in result
                        else ""))
        lines.append(f"  global batch {result['global_batch_size']} ({result['batch_per_replica']} per replica)")
        lines += [f"  {unit} {i}: loss {v:.6f}" for i, v in enumerate(result["loss"], 1)]
        if result.get("strategy"):
            lines.append(f"  {result['strategy']}, cross-device ops {result.get('cross_device_ops') or 'none'}, "
                         f"learning rate {result['learning_rate']:g} ({result['learning_rate_rule']})"
                         + (f", input {result['input']}" if result.get("input") else ""))
        if result.get("evaluate"):
            lines.append("  evaluate: " + ", ".join(f"{k} {v:.6f}" for k, v in result["evaluate"].items()))
        lines += [f"  note: {note}" for note in result.get("notes", [])]
    if result.get("kind") == "script":
        lines.append(f"result: {' '.join(result['argv'])} finished (exit 0)")
    if result.get("kind") == "memory":
        lines.append(f"result: memory on {result['short_device']}, {result['step_mib']} MiB per step")
        for row in result["rows"]:
            figures = (f"TF current {row['current_mib']:.0f} MiB, peak {row['peak_mib']:.0f} MiB"
                       if row["current_mib"] is not None else f"process RSS {row['rss_mib']:.0f} MiB")
            lines.append(f"  step {row['step']:>3} {row['label']:<9} held {row['allocated_mib']:>6} MiB  {figures}")
        lines += [f"  note: {note}" for note in result.get("notes", [])]
    if result.get("kind") == "table":
        lines.append(f"result: {result.get('title', '')}")
        columns = result["columns"]
        cells = [[_cell(row.get(c), row) for c in columns] for row in result["rows"]]
        widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
        lines += ["  " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
        lines += [f"  note: {note}" for note in result.get("notes", [])]
    if result.get("kind") == "cluster":
        lines.append(f"result: {result['strategy']} with {result['workers']} workers on "
                     + "; ".join(f"{k} {', '.join(v)}" for k, v in result["addresses"].items()))
        if result.get("isolation"):
            lines.append(f"  isolation: {result['isolation']}")
        if result.get("device_config"):
            lines.append(f"  devices: {result['device_config']['note']}")
        lines += [f"  {task} devices: {names}" for task, names in task_devices_text(result).items()]
        for name, where in (result.get("variables") or {}).items():
            lines.append(f"  variable {name} lives on {where}")
        if "losses" in result:
            lines.append(f"  losses agree across workers: {'yes' if result['losses_agree'] else 'NO'}")
        if "steps_per_s" in result:
            lines.append(f"  {result['steps']} steps, {result['steps_per_s']:.1f} steps/s")
        loss = result.get("loss") or []
        if loss:
            lines.append(f"  loss: {loss[0]:.6f} → {loss[-1]:.6f} over {len(loss)} steps")
    return lines


def _cell(value: Any, row: dict[str, Any]) -> str:
    if value is None:
        return "unsupported" if row.get("unsupported") is not None else "—"
    if isinstance(value, float):
        return f"{value:.4g}" if value < 1 else f"{value:.1f}"
    return str(value)


def _placement_summary(outcome: JobOutcome) -> list[str]:
    if not outcome.placement_counts:
        return []
    per_device: Counter[str] = Counter()
    for (_, device), count in outcome.placement_counts.items():
        per_device[device] += count
    summary = ", ".join(f"{device}: {count}" for device, count in sorted(per_device.items()))
    return [f"placements: {sum(per_device.values())} ({summary})"]


def cmd_run(args: argparse.Namespace) -> int:
    spec = get_job(args.job)
    texts: dict[str, str] = {}
    for item in args.param or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--param {quote(item)}: expected NAME=VALUE, e.g. --param device=/GPU:0")
        texts[name.strip()] = value
    params = spec.resolve(texts=texts)
    config = load_config(args.config)
    printer = None if args.json else _RunPrinter(args.verbose, sys.stdout)
    if args.json and args.verbose:
        printer = _RunPrinter(True, sys.stderr)
    outcome = run_job_once(config, spec.name, params, on_event=printer, history=RunHistory())
    if outcome.error and outcome.error.get("type") == "ConfigRejected":
        if args.json:
            _emit_json(outcome.to_json())
        else:
            print(f"error: {outcome.error['message']}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        _emit_json(outcome.to_json())
    else:
        for line in _format_result(outcome) + _placement_summary(outcome):
            print(line)
        if outcome.error:
            print(f"error: {outcome.error['type']}: {outcome.error['message']}", file=sys.stderr)
            if args.verbose and outcome.error.get("traceback"):
                print(outcome.error["traceback"], file=sys.stderr)
        duration = f" in {outcome.duration_s:.2f} s" if outcome.duration_s is not None else ""
        print(f"status: {outcome.status}{duration} — run {outcome.run_id}")
    return EXIT_OK if outcome.status == "ok" else EXIT_JOB_FAILED


def cmd_doctor(args: argparse.Namespace) -> int:
    from tf_device_panel.core import doctor

    config = load_profile(args.config) if args.config else None
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
    if args.config:
        load_profile(args.config)  # a bad profile is named now, not on every machine later
    if args.json:
        _emit_json(tasks)
        return EXIT_OK
    kind = "ParameterServerStrategy" if args.ps else "MultiWorkerMirroredStrategy"
    print(f"# {kind} cluster of {len(tasks)} tasks. On each machine, from a checkout of this project with its")
    print("# virtualenv active, start the task for that machine's address (servers first, then the rest):")
    for task in tasks:
        print(f"\n# {task['task']} on {task['address']}")
        print(task["command"])
    print("\n# Each task's port must be reachable from every other task (open it in the firewall).")
    if args.config:
        print(f"# Every task applies the device configuration in {args.config}: copy it to that path on each "
              "machine.")
    return EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    runs = RunHistory().summaries(limit=args.limit)
    if args.json:
        _emit_json(runs)
        return EXIT_OK
    if not runs:
        print(f"no runs yet (history folder: {RunHistory().root})")
    for run in runs:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.get("started", 0)))
        duration = f"{run['duration_s']:.2f} s" if isinstance(run.get("duration_s"), (int, float)) else ""
        error = (run.get("error") or {}).get("message", "")
        print(f"{run['run_id']:<40} {started}  {run.get('status', '?'):<11} {duration:>9}  {error[:60]}")
    return EXIT_OK


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
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(func=cmd_runs)
    for name in ("devices", "jobs", "run", "snippet", "validate", "runs", "cluster-config", "doctor"):
        sub.choices[name].add_argument("--verbose", "-v", action="store_true", default=argparse.SUPPRESS,
                                       help="show TensorFlow's log lines and tracebacks")
    return parser


def main(argv: Sequence[str] | None = None, open_window: Callable[[str | None], int] = _no_window) -> int:
    """Run one command; `open_window(profile)` opens the window (the launcher passes it, so core never imports gui)."""
    parser = build_parser()
    args: argparse.Namespace | None = None
    try:
        args = parser.parse_args(argv)
        if args.command in (None, "gui"):
            return open_window(getattr(args, "config", None))
        return int(args.func(args))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ProfileError as exc:
        print(f"error: invalid profile {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        print("error: invalid configuration:\n" + "\n".join(f"  - {p}" for p in exc.problems), file=sys.stderr)
        return EXIT_USAGE
    except ConfigRejected as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ParamError as exc:
        print(f"error: job {exc.job!r}: " + "; ".join(f"{n}: {m}" for n, m in exc.problems), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_JOB_FAILED
    except Exception as exc:
        if getattr(args, "verbose", False):
            raise
        print(f"error: {type(exc).__name__}: {exc} (run with --verbose for details)", file=sys.stderr)
        return EXIT_JOB_FAILED


if __name__ == "__main__":
    sys.exit(main())  # the command line alone; `python -m tf_device_panel` also opens the window
