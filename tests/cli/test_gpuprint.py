"""`ablate gpu-check`'s tables (`ablate.cli.gpuprint`): every figure a run measured is printed."""

from __future__ import annotations

from rich.console import Console

from ablate.cli.gpuprint import tables
from ablate.gpus.busy import Busy
from ablate.gpus.figures import Figures, Memory, Steady, Throughput, TrialRun


def test_tables_print_every_figure() -> None:
    h200 = "cuda:0 NVIDIA H200 pci 00000000:3B:00.0"
    figures = Figures(
        "NVIDIA H100",
        20.0,
        [
            TrialRun("bf16", "fedcba9876543210", "softmax", 3, h200, "done", Steady(24.5, 2400.0), 3 * 2**29),
            TrialRun("fp32", "0123456789abcdef", "csan", 3, None, "done", Steady(12.25, 900.0), None),
            TrialRun("fp32", "5555555555aaaa", "softmax", 3, h200, "done", Steady(30.0, 900.0), 1, ("0123456789abc",)),
        ],
        [Throughput("softmax", "bf16", 2400.0, 2500.0)],
        [
            Busy("bf16", "00000000:3B:00.0", 1, 0.412, 50),
            Busy("packed", "00000000:3B:00.0", 6, 0.93, 40),
            Busy("fp32", "00000000:5E:00.0", 1, None, 0, "NVML NVMLError_NotSupported: Not Supported"),
        ],
        [Memory("abcdef0123456789", "csan", 2 * 2**30, 2**30)],
    )
    console = Console(record=True, width=400)
    for table in tables(figures):
        console.print(table)
    text = console.export_text()
    for shown in ("NVIDIA H100", "2400", "2500", "0.96", "0.41", "0.93", "NVMLError_NotSupported: Not Supported",
                  "abcdef0123", "2.00", "1.00", "0.50", h200, "fedcba9876", "24.5", "1.50", "not recorded", "12.2",
                  "00000000:5E:00.0"):  # fmt: skip
        assert shown in text, shown
    assert text.count("under 20 s: faster than estimated") == 1  # the fp32 trial's 12.25 s, not the bf16's 24.5
    assert text.count("shared its GPU with 0123456789") == 1
