"""Site configuration of slurm-arnold (``arnold.toml``) and the local development cluster."""

from site_config.settings import (
    LinkTier,
    NetworkTiers,
    PredictorSettings,
    SiteConfig,
    load_config,
    site_config_path,
    user_config_path,
)

__all__ = [
    "LinkTier",
    "NetworkTiers",
    "PredictorSettings",
    "SiteConfig",
    "load_config",
    "site_config_path",
    "user_config_path",
]
