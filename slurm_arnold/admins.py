"""Who is an admin: the one rule every admin-only verb applies (``arnold reserve sync``,
``create``, ``release``, ``arnold site init``, reading other users' predictions).

Kept apart from the admin-side modules so that checking costs a user's command nothing.
"""

from __future__ import annotations

import os
import pwd

from site_config.settings import site_admins
from slurm_arnold.errors import ArnoldError, SlurmError
from slurm_arnold.slurm import Slurm


class NotAdmin(ArnoldError):
    """An admin-only action was asked for by someone else."""


def require_admin(slurm: Slurm, action: str) -> str:
    """The caller's name, or ``NotAdmin``: root, Slurm's ``SlurmUser``, or a name in the site
    file's ``reservation.admins`` (the site file only: a user's own config or environment
    cannot make them an admin). Slurm checks again on every change we ask for."""
    # From the uid, not $USER/$LOGNAME (getpass.getuser), which the caller sets at will.
    user = pwd.getpwuid(os.geteuid()).pw_name
    if os.geteuid() == 0 or user in site_admins():
        return user
    try:
        if user == slurm.slurm_user():
            return user
    except SlurmError:
        pass
    raise NotAdmin(f"`arnold {action}` is for cluster admins (root, SlurmUser, or "
                   f"reservation.admins in the site's arnold.toml); you are {user}: "
                   "ask an admin")
