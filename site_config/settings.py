"""Pydantic models of ``arnold.toml`` and the precedence rules that load it.

Precedence, highest first: explicit overrides (CLI flags) > ``ARNOLD_*`` environment variables
(nested keys with ``__``, e.g. ``ARNOLD_RESERVATION__MODE=shrink``) > the user's config
(``$ARNOLD_CONFIG`` or ``~/.config/slurm-arnold/arnold.toml``) > the site config
(``arnold.toml`` beside ``$SLURM_CONF``, i.e. ``/etc/slurm/arnold.toml`` by default) > defaults.
"""

from __future__ import annotations

import os
import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from slurm_arnold.errors import ConfigError


class LinkTier(BaseModel):
    """Bandwidth, latency and oversubscription of one level of the network."""

    model_config = ConfigDict(extra="forbid")

    bandwidth_gbps: float = Field(gt=0, description="per-GPU bandwidth in Gbit/s")
    latency_us: float = Field(ge=0, description="one-way latency in microseconds")
    oversubscription: float = Field(default=1.0, ge=1.0, description="uplink oversubscription")


class NetworkTiers(BaseModel):
    """The tiered network: inside a node, under one leaf, under one minipod, across the core."""

    model_config = ConfigDict(extra="forbid")

    nvlink: LinkTier = LinkTier(bandwidth_gbps=3600.0, latency_us=2.0)
    leaf: LinkTier = LinkTier(bandwidth_gbps=400.0, latency_us=5.0)
    minipod: LinkTier = LinkTier(bandwidth_gbps=400.0, latency_us=8.0)
    core: LinkTier = LinkTier(bandwidth_gbps=400.0, latency_us=12.0, oversubscription=2.0)


class ReservationSettings(BaseModel):
    """How reservations for large jobs behave."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["share", "shrink"] = "share"
    large_job_gpus: int = Field(default=256, ge=1, description="a job this large gets reserved")
    admins: list[str] = Field(default=["root", "slurm"], description=(
        "who may run the admin actions of `arnold reserve` (read from the site file only)"))
    horizon_h: float = Field(default=2.0, gt=0, description=(
        "reserve only LPJs whose nodes are expected to drain within this many hours"))
    max_reservations: int = Field(default=4, ge=0, description="our reservations at once")
    pay_for_itself: bool = Field(default=True, description=(
        "reserve (sync) only where the LPJ's earlier start, against Slurm's own estimate, "
        "saves at least idle_share of the node-hours the reserved nodes sit idle"))
    idle_share: float = Field(default=0.25, ge=0, le=1, description=(
        "the share of a reservation's idle node-hours counted as its cost (chosen by "
        "`arnold bench sim --variants` over every shared log; docs/sim.md)"))
    spread_weight_h: float = Field(default=1.0, ge=0, description=(
        "hours of expected wait one unit of weighted spread is worth when choosing nodes"))
    replan_gain_min: float = Field(default=10.0, ge=0, description=(
        "sync moves a waiting arnold job (and its reservation) to other nodes when their "
        "plan beats its own by this many minutes of expected wait + spread_weight_h x weighted "
        "spread (the simulator's replan_gain_s)"))
    predictor: Literal["model_q", "requested"] = Field(default="model_q", description=(
        "the admission gate: the serving model's upper quantile, or time limits"))


class SlurmSettings(BaseModel):
    """How slurm-arnold reaches Slurm."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["auto", "pyslurm", "commands"] = Field(default="auto", description=(
        "what serves reads of Slurm's state and the reservation writes: pyslurm (built for "
        "the running Slurm's release), Slurm's commands, or auto (pyslurm where it can, "
        "else the commands); jobs are always submitted by running sbatch"))


class PredictorSettings(BaseModel):
    """Where the job-completion-time model lives and how it is used."""

    model_config = ConfigDict(extra="forbid")

    model_dir: Path | None = None
    quantile: float = Field(default=0.9, gt=0.0, lt=1.0)


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "slurm-arnold"


class SiteConfig(BaseSettings):
    """Every setting of slurm-arnold; see ``site_config/arnold.toml.example``."""

    model_config = SettingsConfigDict(
        env_prefix="ARNOLD_", env_nested_delimiter="__", extra="forbid"
    )

    state_dir: Path = Field(default_factory=_default_state_dir, description=(
        "the site's state, written by the admin side only: reservations, admissions, the "
        "job history, the serving model, the site-wide submit lock"))
    jobs_dir: Path | None = Field(default=None, description=(
        "each user's placements and rank files, in <jobs_dir>/<user>/ (default: "
        "<state_dir>/jobs); on a file system the compute nodes see"))
    lock_timeout_s: float = Field(default=120.0, gt=0, description=(
        "how long arnold-sbatch waits for the site-wide submit lock before giving up"))
    minipod_level: int = Field(
        default=1, ge=0, description="switch level that forms a minipod (0 = leaf switches)"
    )
    partition: str | None = None
    network: NetworkTiers = NetworkTiers()
    tier_weights: dict[str, float | tuple[float, float]] = Field(default_factory=dict, description=(
        "placement weight of a tier other than the minipod, by the name `arnold place --json`'s "
        "per_tier gives it: a number scales alpha and 1 - alpha there, [alpha, beta] sets them "
        "(default: from the network's links, docs/placement.md)"))
    reservation: ReservationSettings = ReservationSettings()
    predictor: PredictorSettings = PredictorSettings()
    slurm: SlurmSettings = SlurmSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """CLI overrides, then ``ARNOLD_*`` variables, then the config files."""
        return (init_settings, env_settings, _FileSource(settings_cls, _FILE_LAYER.get() or {}))

    @property
    def db_path(self) -> Path:
        """The site's SQLite state database (written by the admin side only)."""
        return self.state_dir / "arnold.db"

    @property
    def users_dir(self) -> Path:
        """The parent of every user's own directory (``jobs_dir`` or ``<state_dir>/jobs``)."""
        return self.jobs_dir or self.state_dir / "jobs"


def site_config_path() -> Path:
    """The site's ``arnold.toml``: beside ``$SLURM_CONF``, as Slurm finds its other files."""
    slurm_conf = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    return slurm_conf.parent / "arnold.toml"


def site_admins() -> list[str]:
    """``reservation.admins`` from the site file alone (defaults when it has none): a user's
    own config or environment must not make them an admin."""
    path = site_config_path()
    data = _read_toml(path) if _present(path) else {}
    return list(data.get("reservation", {}).get("admins", ReservationSettings().admins))


def user_config_path() -> Path:
    """The user's ``arnold.toml``: ``$ARNOLD_CONFIG`` or ``~/.config/slurm-arnold/arnold.toml``."""
    explicit = os.environ.get("ARNOLD_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "slurm-arnold" / "arnold.toml"


def _present(path: Path) -> bool:
    """Whether a config file is there; one behind a directory we may not enter is an error
    naming it (``Path.is_file`` raises a bare PermissionError there)."""
    try:
        return path.is_file()
    except PermissionError:
        raise ConfigError(path, None, "cannot read: permission denied on a directory above "
                          "it; fix the permissions or point ARNOLD_CONFIG elsewhere") from None


def _read_toml(path: Path) -> dict[str, Any]:
    """Parse and validate one config file on its own, so errors name this file."""
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(path, None, f"not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(path, None, f"cannot read: {exc.strerror}") from None
    _validate(data, path)
    return data


def _validate(data: dict[str, Any], source: Path | str) -> None:
    try:
        SiteConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or None
        msg = "unknown key; remove it or check its spelling" if err["type"] == "extra_forbidden" \
            else str(err["msg"])
        raise ConfigError(source, key, msg) from None


def _merge(low: dict[str, Any], high: dict[str, Any]) -> dict[str, Any]:
    out = dict(low)
    for key, value in high.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


class _FileSource(PydanticBaseSettingsSource):
    """The already validated and merged contents of the site and user config files."""

    def __init__(self, settings_cls: type[BaseSettings], data: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self.data = data

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return self.data


_FILE_LAYER: ContextVar[dict[str, Any] | None] = ContextVar("_FILE_LAYER", default=None)


def load_config(
    overrides: dict[str, Any] | None = None,
    *,
    site_path: Path | None = None,
    user_path: Path | None = None,
) -> SiteConfig:
    """Load the effective configuration.

    ``overrides`` are the CLI's flags (``None`` values are ignored). Raises ``ConfigError``
    naming the file and key when a config file is invalid, or naming the key when an
    ``ARNOLD_*`` variable or flag is.
    """
    files: dict[str, Any] = {}
    for path in (site_path or site_config_path(), user_path or user_config_path()):
        if _present(path):
            files = _merge(files, _read_toml(path))
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    token = _FILE_LAYER.set(files)
    try:
        return SiteConfig(**flags)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise ConfigError(
            "command line or ARNOLD_* environment", key, str(err["msg"])
        ) from None
    finally:
        _FILE_LAYER.reset(token)
