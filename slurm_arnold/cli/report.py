"""``arnold report``: the admins' page and Prometheus metrics (docs/report.md)."""

from __future__ import annotations

from pathlib import Path

import click

from site_config import load_config


@click.command("report")
@click.option("--html", "html_dir", type=click.Path(file_okay=False),
              help="Write the page to DIR/index.html (any web server can serve DIR).")
@click.option("--metrics", "metrics_file", type=click.Path(dir_okay=False),
              help="Write Prometheus metrics to FILE (node_exporter's textfile collector: "
                   "name it *.prom in its directory); '-' prints them.")
@click.option("--topology", "topology_file", type=click.Path(exists=True, dir_okay=False),
              help="Instead of the live cluster, a topology file alone, every node free (to "
                   "see the page at any size).")
@click.option("--refresh", type=click.IntRange(min=0), default=60, show_default=True,
              help="The page reloads itself this often, in seconds (0: never); run this "
                   "command as often, e.g. beside `arnold reserve sync`.")
@click.option("--title", default="the cluster", show_default=True, help="The page's title.")
def report(html_dir: str | None, metrics_file: str | None, topology_file: str | None,
           refresh: int, title: str) -> None:
    """One snapshot of the cluster and of what arnold decided, as a page and as metrics:
    read from the live cluster and the site's state, nothing placed again."""
    from slurm_arnold.report.gather import gather
    from slurm_arnold.report.metrics import exposition, write_textfile
    from slurm_arnold.report.page import write
    from slurm_arnold.topology import read_topology_file

    if not html_dir and not metrics_file:
        raise click.UsageError("give --html DIR, --metrics FILE or both")
    topology = read_topology_file(topology_file) if topology_file else None
    snapshot = gather(load_config(), topology=topology)
    if html_dir:
        path = write(snapshot, Path(html_dir), title=title, refresh=refresh or None)
        click.echo(f"arnold: report: wrote {path}", err=True)
    if metrics_file == "-":
        click.echo(exposition(snapshot), nl=False)
    elif metrics_file:
        write_textfile(snapshot, Path(metrics_file))
        click.echo(f"arnold: report: wrote {metrics_file}", err=True)
