"""The tables of ``solver-cli knobs`` (the cost model's assumption knobs) and ``solver-cli gpus`` (the hardware
catalog with its sources)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from parplan.costmodel.spec.hardware import ALIASES, CATALOG


def _knob_value(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def knobs_table() -> Table:
    """The cost model's assumption knobs: default value, textbook preset value, source (``solver-cli knobs``)."""
    from parplan.costmodel.spec.assumptions import PRESETS, describe_knobs  # pydantic: only `knobs` needs it, not `gpus`

    textbook = PRESETS.get("textbook", {})
    table = Table(title="Assumption knobs: spec `assumptions:` takes `preset: default | textbook` and any "
                        "knob by name", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("knob · meaning and source")
    table.add_column("default", justify="right", no_wrap=True)
    table.add_column("textbook", justify="right", no_wrap=True)
    for name, default, description in describe_knobs():
        tb = _knob_value(textbook[name]) if name in textbook and textbook[name] != default else ""
        table.add_row(Text.assemble((name, "bold"), "\n  ", (description, "dim")), _knob_value(default), tb)
    table.caption = "textbook: blank where the preset keeps the default"
    table.caption_justify = "left"
    return table


def print_gpu_catalog(console: Console) -> None:
    """The hardware catalog (bandwidths per GPU and direction), with sources (``solver-cli gpus``)."""
    aliases: dict[str, list[str]] = {}
    for alias, target in ALIASES.items():
        aliases.setdefault(target, []).append(alias)
    table = Table(title="GPU catalog: `cluster.gpu` (numeric fields overridable under `cluster:`)",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0))
    for header, justify in (("gpu", "left"), ("HBM\n(GiB)", "right"), ("BF16\nTFLOP/s", "right"),
                            ("FP8\nTFLOP/s", "right"), ("NVLink\ndomain", "right"), ("NVLink\n(GB/s)", "right"),
                            ("network\n(GB/s)", "right"), ("α (µs)\nnode/net", "right")):
        table.add_column(header, justify=justify, no_wrap=True)
    for name, g in CATALOG.items():
        table.add_row(name, f"{g.memory_gib:g}", f"{g.peak_bf16_tflops:g}",
                      "-" if g.peak_fp8_tflops is None else f"{g.peak_fp8_tflops:g}", str(g.nvlink_domain_size),
                      f"{g.intra_node_bandwidth_gbps:g}", f"{g.inter_node_bandwidth_gbps:g}",
                      f"{g.intra_node_latency_us:g}/{g.inter_node_latency_us:g}")
    table.caption = ("TFLOP/s dense; GB/s = 1e9 B/s per GPU per direction; α: latency per message inside "
                     "the NVLink domain / across the network")
    table.caption_justify = "left"
    console.print(table)
    console.print(Text("Sources", style="bold"))
    for name, g in CATALOG.items():
        extra = f"nominal {g.memory_gb_nominal:g} GB"
        if aliases.get(name):
            extra += "; aliases " + ", ".join(aliases[name])
        console.print(Text.assemble((name, "bold"), f" ({extra})"))
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column()
        for source in g.sources:
            grid.add_row("  -", source)
        console.print(grid)
