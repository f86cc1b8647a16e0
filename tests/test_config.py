"""Site configuration: precedence, validation, errors naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from site_config import load_config
from slurm_arnold.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[1] / "site_config" / "arnold.toml.example"


def test_defaults(isolated_config: Path) -> None:
    cfg = load_config(site_path=isolated_config / "none.toml")
    assert cfg.minipod_level == 1
    assert cfg.reservation.mode == "share"
    assert cfg.db_path.name == "arnold.db"


def test_precedence_flag_env_user_site_default(
    isolated_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = isolated_config / "site.toml"
    user = isolated_config / "user.toml"
    site.write_text('minipod_level = 2\npartition = "site"\n[reservation]\nmode = "shrink"\n'
                    "large_job_gpus = 64\n")
    user.write_text('partition = "user"\n[reservation]\nlarge_job_gpus = 128\n')
    cfg = load_config(site_path=site, user_path=user)
    assert (cfg.minipod_level, cfg.partition) == (2, "user")
    assert (cfg.reservation.mode, cfg.reservation.large_job_gpus) == ("shrink", 128)

    monkeypatch.setenv("ARNOLD_PARTITION", "env")
    monkeypatch.setenv("ARNOLD_RESERVATION__LARGE_JOB_GPUS", "512")
    monkeypatch.setenv("ARNOLD_RANKFILE", "/not/a/setting")  # job variables are not settings
    cfg = load_config(site_path=site, user_path=user)
    assert cfg.partition == "env"
    assert cfg.reservation.large_job_gpus == 512
    assert cfg.reservation.mode == "shrink"

    cfg = load_config({"partition": "flag", "minipod_level": None}, site_path=site, user_path=user)
    assert cfg.partition == "flag"
    assert cfg.minipod_level == 2  # a flag left unset does not override


def test_site_file_sits_beside_slurm_conf(
    isolated_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (isolated_config / "arnold.toml").write_text("minipod_level = 3\n")
    monkeypatch.setenv("SLURM_CONF", str(isolated_config / "slurm.conf"))
    assert load_config().minipod_level == 3


@pytest.mark.parametrize(
    ("text", "key", "needle"),
    [
        ("minipod_levle = 1\n", "minipod_levle", "unknown key"),
        ("minipod_level = -1\n", "minipod_level", "greater than or equal"),
        ('[reservation]\nmode = "steal"\n', "reservation.mode", "'share' or 'shrink'"),
        ("[network.core]\nbandwidth_gbps = 0\nlatency_us = 1\n", "network.core.bandwidth_gbps",
         "greater than 0"),
        ("minipod_level = \n", None, "not valid TOML"),
    ],
)
def test_invalid_config_names_file_and_key(
    isolated_config: Path, text: str, key: str | None, needle: str
) -> None:
    bad = isolated_config / "bad.toml"
    bad.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(site_path=bad)
    message = str(err.value)
    assert message.startswith(f"{bad}: ")
    if key:
        assert f": {key}: " in message
    assert needle in message
    assert "\n" not in message


def test_invalid_environment_names_the_key(
    isolated_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARNOLD_MINIPOD_LEVEL", "two")
    with pytest.raises(ConfigError, match="minipod_level"):
        load_config(site_path=isolated_config / "none.toml")


def test_example_file_is_valid_and_complete(isolated_config: Path) -> None:
    cfg = load_config(site_path=EXAMPLE)
    text = EXAMPLE.read_text()
    for key in ("state_dir", "minipod_level", "partition", "[network.core]", "[reservation]",
                "[predictor]", "large_job_gpus", "mode"):
        assert key in text, f"{key} is not documented in {EXAMPLE.name}"
    assert cfg.reservation.large_job_gpus >= 1
