"""``dsh-sandbox bench``: per-runner cost against a bare spawn, measured in one run."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("bench")
@click.option("--runner", "runners", multiple=True, metavar="NAME",
              help="Runner to measure (repeatable; default: every registered runner).")
@click.option("-n", "--iterations", default=50, show_default=True, type=click.IntRange(min=5),
              help="Samples per measure.")
@click.option("--no-throughput", is_flag=True, help="Skip the 1 GiB output measure.")
@click.option("--vs", "peers", multiple=True, type=click.Choice(["codex", "srt", "landrun", "firejail", "all"]),
              help="Also time this peer's sandbox running `true`, if it is on PATH (repeatable).")
@click.option("--tree-entries", default=100_000, show_default=True, type=click.IntRange(min=0), metavar="N",
              help="Also time the protected-file search and `run -- true` in a generated tree of about N "
                   "entries, against a small workspace (0: skip).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Also write the results as JSON.")
def bench(runners: tuple[str, ...], iterations: int, no_throughput: bool, peers: tuple[str, ...],
          tree_entries: int, json_path: str | None) -> None:
    """Medians, p95 and ratios: runners vs bash-local, bwrap vs bare bwrap, Docker warm exec vs
    `docker run --rm`, the CLI vs `python -c pass` (and vs the peers named by --vs), a run in a
    container kept from the last run vs one made for it (--keep-warm), 1 GiB of
    output, 32 concurrent commands, each protection timed alone, a run in a big tree vs a small
    workspace, and a tool call through the MCP server vs in-process.

    Targets are reported, never enforced: timing depends on the machine.
    """
    from dsh.cli.bench_costs import sections
    from dsh.cli.benchmarks import PEERS, render_table, run_all, to_json
    from dsh.sandbox.registry import known_runner_names

    chosen = tuple(PEERS) if "all" in peers else peers
    measured = runners or tuple(known_runner_names())
    report = run_all(measured, iterations, throughput=not no_throughput, peers=chosen,
                     more=sections(measured, iterations, tree_entries))
    click.echo(render_table(report))
    if json_path:
        Path(json_path).write_text(to_json(report) + "\n")
