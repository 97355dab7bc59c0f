"""`run -p` is read in one pass (issue 43, item 5): argparse looked for the next option among every option's
position after each `-p`, so 10,000 parameters took 1.9 s, 40,000 took 22 s and 100,000 over two minutes to be
told "given twice"."""

from __future__ import annotations

import time

import pytest
from tf_device_panel.core import cli
from tf_device_panel.core.cli import build_parser, parse_command_line, take_params

N = 100_000


def many(count: int) -> list[str]:
    argv = ["run", "fit"]
    for index in range(count):
        argv += ["-p", f"x{index}=1"]
    return argv


def test_100000_parameters_are_read_without_argparse_walking_them(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    parser = build_parser()
    real = parser.parse_args
    monkeypatch.setattr(parser, "parse_args", lambda argv=None: seen.append(len(argv or [])) or real(argv))
    args = parse_command_line(parser, many(N))
    assert len(args.param) == N and args.param[-1] == f"x{N - 1}=1"
    assert seen == [2]  # argparse read "run fit" only: the parameters were taken in one pass


def test_given_twice_among_100000_is_said_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    assert cli.main([*many(N), "-p", "x0=2"]) == 2
    # Linear, a fraction of a second; quadratic, over two minutes (the bound leaves room for a loaded machine).
    assert time.monotonic() - started < 20
    assert capsys.readouterr().err == "error: --param 'x0' is given twice ('1' and '2'); give each parameter once\n"


def test_100000_unknown_parameters_are_summarised_in_one_short_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(many(N)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 2000, err[:3000]
    assert "'x0': unknown parameter for job 'fit'" in err and err.endswith(f"… and {N - 8} more problems like these\n")


@pytest.mark.parametrize("argv", [
    ["run", "fit", "-p", "epochs=1", "--json", "-pbatch_per_replica=2", "-p=samples=3"],
    ["-v", "run", "-p", "epochs=1", "fit", "--param", "samples=4", "--param=model=cnn", "--par", "data=numpy"],
    ["run", "fit", "--config", "p.json", "-vp", "epochs=1", "-p", "samples=2"],  # run together: argparse's
    ["run", "script", "-p", "path=a.py", "-p", "args=--lr 0.1 -p 3", "--", "-p"],
    ["run", "fit", "-p", "epochs=1", "-p"],
    ["run", "fit", "-p", "-v"],
    ["devices", "--json"],
])
def test_every_spelling_reads_as_argparse_reads_it(argv: list[str]) -> None:
    parser = build_parser()
    try:
        expected = vars(parser.parse_args(argv))
    except cli.UsageError as exc:
        with pytest.raises(cli.UsageError, match=str(exc)[:40].replace("(", r"\(").replace(")", r"\)")):
            parse_command_line(build_parser(), argv)
        return
    assert vars(parse_command_line(build_parser(), argv)) == expected


def test_only_run_has_its_parameters_taken() -> None:
    assert take_params(["devices", "--json"]) is None
    assert take_params(["-v", "run", "fit", "-p", "a=1"]) == (["a=1"], ["-v", "run", "fit"])
    assert take_params(["run", "fit", "-p"]) is None  # a value missing: argparse says so
