from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tf_device_panel.core.config import (
    DeviceConfig,
    GpuInfo,
    ProfileError,
    load_profile,
    parse_config,
    save_profile,
    validate,
)


def problems_for(data: object, gpus: list[GpuInfo] | None = None) -> list[str]:
    config, problems = parse_config(data)
    if config is not None and gpus is not None:
        problems += validate(config, gpus)
    return [str(p) for p in problems]


def fields(data: object, gpus: list[GpuInfo] | None = None) -> set[str]:
    return {p.split(":")[0] for p in problems_for(data, gpus)}


def test_full_example_from_the_issue_is_valid() -> None:
    data = {"version": 1, "visible_gpus": [0, 1], "memory_growth": False, "virtual_gpus": {"0": [2048, 2048]},
            "cpu_devices": 1, "soft_placement": True, "log_placement": True, "gpu_allocator": "default"}
    config, problems = parse_config(data)
    assert problems == []
    assert config is not None and config.to_json() == data


def test_only_version_is_required() -> None:
    assert problems_for({"version": 1}) == []
    assert fields({}) == {"version"}


def test_every_problem_is_reported_at_once() -> None:
    data = {"version": 2, "colour": "red", "memory_growth": "yes", "cpu_devices": 0, "gpu_allocator": "bfc",
            "visible_gpus": "0", "soft_placement": 1}
    assert fields(data) == {"version", "colour", "memory_growth", "cpu_devices", "gpu_allocator",
                            "visible_gpus", "soft_placement"}


def test_messages_name_the_field_the_value_and_what_to_do() -> None:
    (message,) = problems_for({"version": 1, "colour": 1})
    assert message.startswith("colour: unknown key") and "known keys are" in message
    (message,) = problems_for({"version": 1, "cpu_devices": 100000})
    assert "100000" in message and "at most 64" in message


@pytest.mark.parametrize("value", [True, 1.5, "2", None, [2]])
def test_cpu_devices_must_be_an_integer(value: object) -> None:
    assert "cpu_devices" in fields({"version": 1, "cpu_devices": value})


def test_memory_growth_with_virtual_gpus_is_rejected() -> None:
    problems = problems_for({"version": 1, "memory_growth": True, "virtual_gpus": {"0": [1024]}})
    assert any(p.startswith("memory_growth:") and "virtual" in p for p in problems)


@pytest.mark.parametrize("limits", [[0], [-5], [1024, None], [], "1024", [1.5]])
def test_virtual_gpu_needs_positive_limits(limits: object) -> None:
    assert fields({"version": 1, "virtual_gpus": {"0": limits}}) == {"virtual_gpus['0']"}


def test_virtual_gpu_key_must_be_an_index() -> None:
    assert fields({"version": 1, "virtual_gpus": {"first": [1024]}}) == {"virtual_gpus['first']"}


def test_virtual_gpu_for_hidden_gpu() -> None:
    problems = problems_for({"version": 1, "visible_gpus": [1], "virtual_gpus": {"0": [1024]}})
    assert problems == ["virtual_gpus['0']: GPU 0 is not visible — add 0 to visible_gpus or remove its split"]


def test_visible_gpu_indices_are_checked_against_the_machine() -> None:
    gpus = [GpuInfo(0, "A100", 40960)]
    problems = problems_for({"version": 1, "visible_gpus": [0, 3]}, gpus)
    assert problems == ["visible_gpus: GPU 3 does not exist on this machine — available GPU indices: 0"]
    assert problems_for({"version": 1, "visible_gpus": [0]}, []) != []
    assert problems_for({"version": 1, "visible_gpus": []}, []) == []


def test_virtual_limits_over_total_memory() -> None:
    gpus = [GpuInfo(0, "T4", 15360)]
    (problem,) = problems_for({"version": 1, "virtual_gpus": {"0": [8192, 8192]}}, gpus)
    assert "16384 MiB" in problem and "15360 MiB" in problem
    assert problems_for({"version": 1, "virtual_gpus": {"0": [7680, 7680]}}, gpus) == []
    assert fields({"version": 1, "virtual_gpus": {"2": [1024]}}, gpus) == {"virtual_gpus['2']"}


def test_duplicate_and_negative_gpu_indices() -> None:
    assert fields({"version": 1, "visible_gpus": [0, 0]}) == {"visible_gpus"}
    assert fields({"version": 1, "visible_gpus": [-1]}) == {"visible_gpus"}


def test_not_an_object() -> None:
    assert fields([1, 2]) == {"(profile)"}


@pytest.mark.parametrize("content, expected", [
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe\x00garbage", "cannot be read"),
    (b'{"version": 1, "cpu_devices": -1}', "cpu_devices"),
    (b"", "not valid JSON"),
])
def test_bad_profile_files_raise_clear_errors_and_are_untouched(tmp_path: Path, content: bytes,
                                                                expected: str) -> None:
    path = tmp_path / "profile.json"
    path.write_bytes(content)
    with pytest.raises(ProfileError) as info:
        load_profile(path)
    assert expected in str(info.value)
    assert path.read_bytes() == content


def test_missing_folder_and_unreadable_profiles(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="no such file"):
        load_profile(tmp_path / "missing.json")
    with pytest.raises(ProfileError, match="folder"):
        load_profile(tmp_path)
    locked = tmp_path / "locked.json"
    locked.write_text('{"version": 1}')
    locked.chmod(0)
    if os.geteuid() != 0:  # root reads anything
        with pytest.raises(ProfileError, match="cannot be read"):
            load_profile(locked)


def test_save_never_overwrites_a_malformed_profile(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    path.write_text("{broken")
    with pytest.raises(ProfileError, match="left untouched"):
        save_profile(DeviceConfig(), path)
    assert path.read_text() == "{broken"


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    config = DeviceConfig(visible_gpus=(0,), virtual_gpus={0: (1024, 2048)}, cpu_devices=3,
                          soft_placement=False, gpu_allocator="cuda_malloc_async")
    path = tmp_path / "sub" / "profile.json"
    save_profile(config, path)
    assert load_profile(path) == config
    save_profile(config.with_changes(cpu_devices=2), path)  # replacing a valid profile is fine
    assert load_profile(path).cpu_devices == 2
    assert [p.name for p in path.parent.iterdir()] == ["profile.json"]


def test_environment_for_allocator() -> None:
    assert DeviceConfig(gpu_allocator="cuda_malloc_async").environment()["TF_GPU_ALLOCATOR"] == "cuda_malloc_async"
    assert "TF_GPU_ALLOCATOR" not in DeviceConfig().environment()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10**6) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
profile_like = st.dictionaries(
    st.sampled_from(["version", "visible_gpus", "memory_growth", "virtual_gpus", "cpu_devices",
                     "soft_placement", "log_placement", "gpu_allocator", "other"]),
    json_values, max_size=8)


@settings(max_examples=300, deadline=None)
@given(profile_like)
def test_parsing_never_crashes_and_valid_configs_round_trip(data: dict) -> None:
    config, problems = parse_config(data)
    assert all(p.field and p.message for p in problems)
    if not problems:
        assert config is not None
        assert parse_config(json.loads(json.dumps(config.to_json()))) == (config, [])
