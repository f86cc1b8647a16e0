"""Writing a matplotlib figure where the user asked, or one line saying why not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurm_arnold.errors import ArnoldError


def save_figure(fig: Any, path: Path, option: str, **savefig: Any) -> Path:
    """Save ``fig`` to ``path`` (its directory made if need be) and close it; an unwritable
    path is an ``ArnoldError`` naming ``option``, the path and the reason."""
    import matplotlib.pyplot as plt

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, **savefig)
        path.chmod(0o644)  # a picture to share, whatever the umask
    except OSError as exc:
        raise ArnoldError(f"cannot write {path} ({exc.strerror or exc}); give {option} a "
                          "path you can write") from None
    finally:
        plt.close(fig)
    return path
