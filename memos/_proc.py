"""The whole machine's CPU time from /proc/stat: what the local encoder reads to see how busy
other processes keep the cores (`memos.sentence_encoder`), and what `memos bench serve` reports
as the share of the cores busy during a load. Standard library only, so a load process that
imports it loads nothing else."""

from __future__ import annotations

__all__ = ["machine_ticks"]


def machine_ticks() -> tuple[int, int] | None:
    """The whole machine's CPU ticks so far, (busy, all), from /proc/stat (None where there is
    none): busy is every tick but idle and iowait, on every core, whoever spent it."""
    try:
        with open("/proc/stat", "rb") as handle:
            fields = handle.readline().split()
        # cpu user nice system idle iowait irq softirq steal ...
        ticks = [int(x) for x in fields[1:9]]
    except (OSError, ValueError):
        return None
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)
