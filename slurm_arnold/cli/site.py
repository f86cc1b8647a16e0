"""``arnold site``: the site's directories, lock and database (``init`` is admin-only)."""

from __future__ import annotations

import json
import stat

import click

from site_config import load_config
from slurm_arnold.cli.options import json_option


@click.group("site")
def site() -> None:
    """Where arnold keeps the site's state and each user's placements (docs/site.md)."""


@site.command("init")
def site_init() -> None:
    """Create or repair the site's directories, submit lock and database with their modes
    (admin; idempotent: run it after installing or upgrading arnold)."""
    from slurm_arnold.admins import require_admin
    from slurm_arnold.site_state import init_site
    from slurm_arnold.slurm import Slurm

    require_admin(Slurm(), "site init")
    for line in init_site(load_config()) or ["nothing to do: the site's state is in order"]:
        click.echo(line)


@site.command("prolog-script")
@click.option("--prolog", type=click.Path(dir_okay=False),
              help="The arnold-prolog to run (default: the one beside this arnold).")
@click.option("--slurm-conf", type=click.Path(dir_okay=False),
              help="Set SLURM_CONF for it (default: $SLURM_CONF if set, else Slurm's default).")
@click.option("--slurm-bin", type=click.Path(file_okay=False),
              help="Put this directory of Slurm's commands first on its PATH (default: where "
                   "scontrol is on yours, unless that is /usr/bin or /bin).")
def site_prolog_script(prolog: str | None, slurm_conf: str | None,
                       slurm_bin: str | None) -> None:
    """Print the PrologSlurmctld wrapper for this site's config (docs/site.md): save it,
    make it executable and name it in slurm.conf."""
    import os
    import sys
    from pathlib import Path

    from slurm_arnold.prolog import wrapper_script
    from slurm_arnold.slurm import slurm_commands_dir

    program = Path(prolog) if prolog else Path(sys.argv[0]).resolve().parent / "arnold-prolog"
    conf = slurm_conf or os.environ.get("SLURM_CONF")
    commands = slurm_bin or slurm_commands_dir()
    click.echo(wrapper_script(load_config(), program, Path(conf) if conf else None,
                              Path(commands) if commands else None), nl=False)


@site.command("show")
@json_option()
def site_show(as_json: bool) -> None:
    """Each path arnold uses, its owner and mode, and whether you may write it."""
    import os
    import pwd

    from slurm_arnold.site_state import SUBMIT_LOCK, caller, model_dir

    config = load_config()
    paths = {"state_dir": config.state_dir, "database": config.db_path,
             "submit_lock": config.state_dir / SUBMIT_LOCK, "model_dir": model_dir(config),
             "users_dir": config.users_dir, "your_dir": config.users_dir / caller()}
    rows = []
    for key, path in paths.items():
        try:
            info = path.stat()
            owner = pwd.getpwuid(info.st_uid).pw_name
            mode = f"{stat.S_IMODE(info.st_mode):o}"
        except (OSError, KeyError):
            owner, mode = "-", "missing"
        rows.append({"what": key, "path": str(path), "owner": owner, "mode": mode,
                     "writable": os.access(path, os.W_OK)})
    if as_json:
        click.echo(json.dumps(rows))
        return
    for r in rows:
        click.echo(f"{r['what']:12s} {r['mode']:>7s} {r['owner']:10s} "
                   f"{'w' if r['writable'] else '-'} {r['path']}")
    click.echo(f"{'slurm':12s} served by {_serving_backend()}")


def _serving_backend() -> str:
    """The backend the Slurm adapter chooses here (``slurm.backend``), or why none."""
    from slurm_arnold.errors import ArnoldError
    from slurm_arnold.slurm import Slurm

    try:
        return Slurm().backend.describe()
    except ArnoldError as exc:
        return f"no backend: {exc}"
