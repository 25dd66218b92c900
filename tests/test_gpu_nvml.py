"""ocrwatch.engines.gpu: the card and each process's share of it, asked of NVML (a stand-in)."""

from __future__ import annotations

import pytest
from fake_nvml import FakeNvml, install

from ocrwatch.engines import gpu


def test_the_card_its_memory_and_the_processes_on_it(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml(total_mib=16376, used_mib=6000, compute={101: 4000, 102: 500},
                    graphics={103: 1200})
    install(monkeypatch, nvml)
    (card,) = gpu.gpus()  # type: ignore[misc]
    assert (card.name, card.driver, card.total_mb, card.free_mb) == (
        "NVIDIA GeForce RTX 4080", "580.95.05", 16376, 10376)
    assert gpu.card_memory_mib() == 16376 and gpu.used_mib() == 6000
    assert gpu.processes_mib([101, 102]) == 4500 and gpu.processes_mib([999]) == 0
    # Others: everything used less ocrwatch's own processes, the compositor's included,
    # and what no process list shows (6000 - 4000 - 500 - 1200 = 300 MiB).
    assert gpu.others_mib([101, 102]) == 1500
    assert gpu.others_mib([]) == 6000


def test_a_process_whose_memory_the_driver_cannot_tell_counts_among_the_others(
        monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeNvml(used_mib=3000, compute={101: 1000, 555: None}))
    assert gpu.others_mib([101]) == 2000


def test_cuda_visible_devices_picks_the_card(monkeypatch: pytest.MonkeyPatch) -> None:
    class TwoCards(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            return 2

        def nvmlDeviceGetName(self, handle: int) -> str:
            return f"card {handle}"

    install(monkeypatch, TwoCards())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpu.gpu_name() == "card 1"


def test_no_driver_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, None)
    assert "did not answer" in str(gpu.gpus())
    assert gpu.card_memory_mib() is None and gpu.used_mib() is None
    assert gpu.processes_mib([1]) is None and gpu.others_mib([]) is None
