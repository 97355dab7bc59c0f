"""File → Share a GPU…: the window's configuration split into seats by the `share` command (a real child
process), each seat's limit, peak and status shown; the command's own error shown when it refuses."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
from tf_device_panel.core.config import DeviceConfig, load_profile
from tf_device_panel.gui.dialogs.share_dialog import SEAT_COLUMNS, ShareDialog
from tf_device_panel.gui.shell.main_window import MainWindow

MIB = 1024 * 1024


def _open_from_the_menu(window: MainWindow, config: DeviceConfig) -> ShareDialog:
    window.config_panel.set_config(config)
    (action,) = [a for menu in window.menuBar().actions() if menu.menu() is not None
                 for a in menu.menu().actions() if a.text().replace("&", "") == "Share a GPU…"]
    action.trigger()
    (dialog,) = [d for d in window.findChildren(ShareDialog) if d.isVisible()]
    return dialog


def test_the_dialog_writes_three_cpu_seats_and_shows_each_peak_within_its_limit(qtbot, window, tmp_path) -> None:
    # visible_gpus [] keeps the split on the CPU's cap on a machine with a GPU too.
    dialog = _open_from_the_menu(window, DeviceConfig(visible_gpus=(), cpu_memory_limit_mib=192,
                                                      log_placement=False))
    out = tmp_path / "class"
    dialog.chosen.setChecked(True)
    dialog.seats.setValue(3)
    dialog.out.setText(str(out))
    assert dialog.verify.isChecked() and dialog.share_button.text() == "Write profiles"
    dialog.share_button.click()
    qtbot.waitUntil(lambda: dialog.report is not None, timeout=600_000)
    assert dialog.table.rowCount() == 3
    status = SEAT_COLUMNS.index("Status")
    assert [dialog.table.item(r, status).text() for r in range(3)] == ["held"] * 3
    for seat in dialog.report["seats"]:
        assert 0 < seat["peak_bytes"] <= seat["limit_bytes"] == 64 * MIB
    assert dialog.table.item(0, SEAT_COLUMNS.index("Limit")).text() == "64.0 MiB"
    assert "All seats held" in dialog.status.text()
    # What each seat takes beyond its cap, measured by the work's run alone first, in the window's words.
    assert "\nBeyond each seat's allocator: measured by one run of cnn (batch 32) alone: " in dialog.status.text()
    assert "--" not in dialog.status.text()
    assert [load_profile(out / f"seat-{i}.json").cpu_memory_limit_mib for i in (1, 2, 3)] == [64] * 3
    dialog.close()


def test_the_dialog_shows_the_commands_refusal(qtbot, window, tmp_path) -> None:
    dialog = _open_from_the_menu(window, DeviceConfig(visible_gpus=()))  # no GPU, no CPU cap
    dialog.out.setText(str(tmp_path / "class"))
    dialog.chosen.setChecked(True)
    dialog.verify.setChecked(False)
    dialog.share_button.click()
    qtbot.waitUntil(lambda: dialog.process is None and "cpu_memory_limit_mib" in dialog.status.text(),
                    timeout=60_000)
    # In the window's words: the field at fault, no command-line option.
    assert dialog.status.text().startswith("This configuration: the base profile hides the GPUs")
    assert "--" not in dialog.status.text() and "error:" not in dialog.status.text()
    assert dialog.table.rowCount() == 0 and not (tmp_path / "class").exists()
    dialog.close()


def test_closing_the_dialog_while_it_verifies_stops_every_seat(qtbot, window, tmp_path) -> None:
    import psutil

    dialog = _open_from_the_menu(window, DeviceConfig(visible_gpus=(), cpu_memory_limit_mib=192,
                                                      log_placement=False))
    dialog.out.setText(str(tmp_path / "class"))
    dialog.chosen.setChecked(True)
    dialog.share_button.click()
    assert dialog.process is not None
    command = psutil.Process(int(dialog.process.processId()))
    seats: list[psutil.Process] = []

    def under_way() -> bool:
        seats[:] = command.children(recursive=True)
        return len(seats) >= 6  # three seats' command lines and their runtimes

    qtbot.waitUntil(under_way, timeout=120_000)
    dialog.close()
    assert dialog.process is None

    def running(seat: psutil.Process) -> bool:
        try:
            return seat.is_running() and seat.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    assert not running(command)  # stopped by the close, not left to finish its seats
    qtbot.waitUntil(lambda: not any(running(seat) for seat in seats), timeout=30_000)


def test_the_dialog_asks_for_the_work_and_refuses_in_its_own_words(qtbot, window, tmp_path) -> None:
    dialog = _open_from_the_menu(window, DeviceConfig(visible_gpus=(), cpu_memory_limit_mib=128))
    dialog.out.setText(str(tmp_path / "class"))
    assert dialog.most.isChecked() and dialog.share_button.text() == "Find how many"
    dialog.work.setCurrentIndex(2)  # a saved Keras model
    assert dialog.work_file.isVisibleTo(dialog) and not dialog.script_args.isVisibleTo(dialog)
    dialog.share_button.click()
    assert dialog.process is None and dialog.status.text() == "Choose the saved Keras model each seat runs."
    not_a_model = tmp_path / "notes.keras"
    not_a_model.write_text("not a zip")
    dialog.work_file.setText(str(not_a_model))
    dialog.share_button.click()
    qtbot.waitUntil(lambda: dialog.process is None and dialog.status.text().startswith("Keras model: "),
                    timeout=60_000)
    assert "not a saved Keras model" in dialog.status.text() and "--" not in dialog.status.text()
    dialog.work.setCurrentIndex(1)  # a script whose arguments do not take the batch: it runs as it is
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    dialog.work_file.setText(str(script))
    dialog.script_args.setText("--epochs 1")
    assert not [arg for arg in dialog.work_args() or [] if arg.startswith("--batch")]
    dialog.script_args.setText("--batch-size {batch}")
    assert dialog.work_args()[-2:] == ["--args=--batch-size {batch}", "--batch=32"]
    dialog.close()


@pytest.mark.slow
def test_the_dialog_answers_how_many_seats_hold_the_cnn(qtbot, window, tmp_path) -> None:
    dialog = _open_from_the_menu(window, DeviceConfig(visible_gpus=(), cpu_memory_limit_mib=128,
                                                      log_placement=False))
    window.resize(1280, 720)
    dialog.out.setText(str(tmp_path / "class"))
    dialog.batch.setValue(16)
    dialog.share_button.click()
    qtbot.waitUntil(lambda: dialog.report is not None or (dialog.process is None and dialog.status.text()),
                    timeout=900_000)
    assert dialog.report is not None, dialog.status.text()
    count = dialog.report["most"]["seats"]
    assert dialog.status.text().startswith(f"{count} seat") and "can share this machine for cnn" in dialog.status.text()
    status = SEAT_COLUMNS.index("Status")
    assert [dialog.table.item(r, status).text() for r in range(count)] == ["held"] * count
    dialog.close()


def test_the_dialogs_fields_and_the_commands_options_are_one_declaration(qtbot, window, tmp_path) -> None:
    from tf_device_panel.core import cli
    from tf_device_panel.core.catalogue.share_params import SHARE_OPTIONS, share_option

    dialog = _open_from_the_menu(window, DeviceConfig(visible_gpus=(), cpu_memory_limit_mib=128))
    batch, seats = share_option("batch").param, share_option("seats").param
    assert (dialog.batch.minimum(), dialog.batch.maximum(), dialog.batch.value()) == (
        batch.minimum, batch.maximum, batch.default)
    assert (dialog.seats.minimum(), dialog.seats.maximum(), dialog.seats.value()) == (
        seats.minimum, seats.maximum, seats.default)
    assert dialog.verify.text() == share_option("verify").param.label and dialog.verify.isChecked()
    assert dialog.most.text() == share_option("max").param.label and dialog.chosen.text() == "This many:"
    assert set(dialog.editors) == {option.name for option in SHARE_OPTIONS} - {"config"} | {"work"}
    # What the dialog starts is what the command line reads back: each field its option's value.
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    dialog.work.setCurrentIndex(1)
    dialog.work_file.setText(f"  {script}  ")
    dialog.script_args.setText("--epochs 1 --batch-size {batch}")
    dialog.batch.setValue(64)
    dialog.chosen.setChecked(True)
    dialog.seats.setValue(4)
    dialog.out.setText(str(tmp_path / "class"))
    dialog.force.setChecked(True)
    args = dialog.share_args()
    assert args is not None
    parsed = cli.build_parser().parse_args(args)
    assert (parsed.seats, parsed.max, parsed.verify, parsed.force, parsed.json) == ("4", False, True, True, True)
    assert (parsed.script, parsed.args, parsed.model, parsed.batch) == (str(script), dialog.script_args.text(),
                                                                        None, 64)
    assert parsed.out == str(tmp_path / "class") and load_profile(parsed.config).cpu_memory_limit_mib == 128
    # Script arguments that are one dash-led word reach the command as its value, not as an option of their own.
    dialog.script_args.setText("--fast")
    args = dialog.share_args()
    assert args is not None and cli.build_parser().parse_args(args).args == "--fast"
    dialog.most.setChecked(True)
    parsed = cli.build_parser().parse_args(dialog.share_args())
    assert (parsed.seats, parsed.max, parsed.verify) == (None, True, False)
    dialog.close()
