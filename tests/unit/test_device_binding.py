"""Device binding by the visible devices Ray set and torch's device count (pure)."""

from __future__ import annotations

import pytest

from fleetval.run.rank import DeviceBindingError, device_index, hip_visibility


def test_ray_narrowed_visible_devices_bind_index_of_the_assigned_gpu():
    assert device_index("3", [3], 1) == 0
    assert device_index("2,3", [3], 2) == 1  # two GPUs visible (e.g. shared actor), ours second


def test_unnarrowed_visibility_binds_the_physical_id():
    assert device_index(None, [5], 8) == 5
    assert device_index("", [0], 1) == 0


def test_assigned_gpu_hidden_from_the_process_is_refused():
    with pytest.raises(
        DeviceBindingError, match="Ray assigned GPU 4, but the visible devices are 0,1"
    ):
        device_index("0,1", [4], 2)


def test_index_beyond_device_count_is_refused_with_the_numbers():
    with pytest.raises(DeviceBindingError, match="device index 5, but torch sees 4 device"):
        device_index(None, [5], 4)


def test_no_gpu_assigned_is_refused():
    with pytest.raises(DeviceBindingError, match="assigned none"):
        device_index("0", [], 1)


def test_rocm_lone_rocr_moves_to_hip() -> None:
    """Ray < 2.45 narrowed ROCm actors with ROCR only: the actor reads one variable, HIP."""
    env = {"ROCR_VISIBLE_DEVICES": "2,3"}
    hip_visibility(env, rocm=True)
    assert env == {"HIP_VISIBLE_DEVICES": "2,3"}
    assert device_index(env["HIP_VISIBLE_DEVICES"], [3], 2) == 1


def test_rocm_visibility_left_alone() -> None:
    """HIP already set (Ray >= 2.45, or both by hand), CUDA builds, and UUIDs are not touched."""
    for env, rocm in (
        ({"HIP_VISIBLE_DEVICES": "1"}, True),
        ({"HIP_VISIBLE_DEVICES": "0", "ROCR_VISIBLE_DEVICES": "4,5"}, True),
        ({"ROCR_VISIBLE_DEVICES": "2"}, False),
        ({"ROCR_VISIBLE_DEVICES": "GPU-4f2c1d"}, True),
        ({}, True),
    ):
        before = dict(env)
        hip_visibility(env, rocm=rocm)
        assert env == before
