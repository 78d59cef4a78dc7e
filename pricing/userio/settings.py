"""Settings, resolved once for every room with one precedence:
flag > `BROKER_*` environment > `./broker.toml` > `~/.config/broker/config.toml` > default.

Every setting is declared in `SETTINGS` with its default and a one-line
description (docs/settings.md lists them; a test keeps the two equal). Keys are
plain names (`catalog`, `aws_endpoint`); the environment variable of `catalog` is
`BROKER_CATALOG`, and the TOML files hold them at top level
(`catalog = "/data/offers.csv"`). An empty environment variable counts as unset.

The variables that are a job's own contract inside its start-up script
(`BROKER_CHECKPOINT_DIR`, `BROKER_NOTICE_POLL`, ...) are not settings, and the
clouds' standard credential variables (`AWS_*`, `GOOGLE_*`, `AZURE_*`) stay read
by their SDKs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pricing.userio.dirs import user_config_dir


@dataclass(frozen=True)
class DeclaredSetting:
    """One setting: its key, its value when nothing sets it, and what it is for."""

    name: str
    default: Any
    description: str

    @property
    def variable(self) -> str:
        """The environment variable that sets it: `BROKER_` and the key in capitals."""
        return f"BROKER_{self.name.upper()}"


_TABLE: tuple[tuple[str, Any, str], ...] = (  # key, default, what it is for
    # --- what the CLI reads --------------------------------------------------------------
    ("catalog", None, "offers catalog CSV used instead of the user or bundled one"),
    ("pools", None, "on-prem pool inventory YAML (default: config dir pools.yaml)"),
    ("overlays", None, "price overlays YAML (default: config dir overlays.yaml)"),
    ("policy", None, "queue policy YAML (default: config dir policy.yaml)"),
    ("state", None, "state file (default: state.db in the state dir)"),
    ("freshness_days", 30, "catalog age in days after which prices are old"),
    ("auto_refresh_days", None, "refresh the user catalog when this old (off)"),
    ("clouds", (), "clouds launched for real (aws,gcp,azure); others: sandbox"),
    ("workdir_limit_mb", 100, "largest run.workdir to pack and deliver, in MB"),
    ("container_runtime", None, "command running the sandbox's image jobs (podman/docker)"),
    # --- cloud endpoints: an emulator or a private endpoint instead of the public one ----
    ("aws_endpoint", None, "AWS API endpoint (EC2; the others too without the next)"),
    ("aws_quotas_endpoint", None, "AWS Service Quotas and Pricing endpoint"),
    ("gcp_endpoint", None, "GCP Compute Engine API endpoint"),
    ("azure_endpoint", None, "Azure Resource Manager endpoint"),
    ("s3_endpoint", None, "S3 endpoint for checkpoint storage"),
    ("gcs_endpoint", None, "Cloud Storage endpoint for checkpoint storage"),
    ("azure_blob_endpoint", None, "Azure Blob endpoint for checkpoint storage"),
    # --- public price sources (`broker pricing refresh`) ---------------------------------
    ("aws_pricing_url", None, "AWS bulk price files (default: AWS's)"),
    ("azure_prices_url", None, "Azure Retail Prices API (default: Azure's)"),
    ("gcp_billing_url", None, "GCP Cloud Billing Catalog host (default: GCP's)"),
    ("gcp_pricing_api_key", None, "API key for the GCP Billing Catalog (else GOOGLE_API_KEY)"),
    ("spot_advisor_url", None, "AWS Spot Advisor data (default: AWS's)"),
    # --- what the cloud adapters launch ---------------------------------------------------
    ("aws_image_id", None, "AMI launched on AWS (no default: required)"),
    ("aws_staging_uri", None, "s3:// prefix AWS jobs' workdirs are uploaded to"),
    ("gcp_image", None, "boot image on GCP (default: a deep-learning image)"),
    ("gcp_staging_uri", None, "gs:// prefix GCP jobs' workdirs are uploaded to"),
    ("azure_image", None, "image on Azure (publisher:offer:sku:version or id)"),
    ("azure_staging_uri", None, "az:// prefix Azure jobs' workdirs are uploaded to"),
    ("azure_resource_group", None, "Azure resource group (default: broker)"),
    ("azure_subnet_id", None, "subnet of Azure VMs (required on Azure)"),
    ("azure_ssh_public_key", None, "SSH public key put on Azure VMs"),
)
SETTINGS: dict[str, DeclaredSetting] = {row[0]: DeclaredSetting(*row) for row in _TABLE}


@dataclass(frozen=True)
class Setting:
    """A resolved value and where it came from (for `--verbose` and error messages)."""

    value: Any
    origin: str


class ConfigError(ValueError):
    """A configuration file that cannot be read, or a value of the wrong kind in it."""


def _read_toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    import tomllib

    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def resolve(name: str, flag: Any = None, cwd: Path | None = None) -> Setting:
    """The value of setting `name` by the precedence in the module docstring.

    KeyError for a name that is not in `SETTINGS` (a typo in our code).
    """
    declared = SETTINGS[name]
    if flag is not None:
        return Setting(flag, "flag")
    if os.environ.get(declared.variable):
        return Setting(os.environ[declared.variable], declared.variable)
    for path in ((cwd or Path.cwd()) / "broker.toml", user_config_dir() / "config.toml"):
        values = _read_toml(path)
        if name in values:
            return Setting(values[name], str(path))
    return Setting(declared.default, "default")


def resolve_text(name: str) -> str | None:
    """A text setting (an endpoint, an image), or None when unset or empty;
    ConfigError naming the file when a TOML file gives something other than text."""
    setting = resolve(name)
    if setting.value is not None and not isinstance(setting.value, str):
        raise ConfigError(f"{setting.origin}: {name}: expected a string, got {setting.value!r}")
    return setting.value or None


def resolve_path(
    name: str, flag: Path | None = None, default_file: str | None = None
) -> Path | None:
    """A path setting; falls back to `~/.config/broker/<default_file>` when that file exists."""
    setting = resolve(name, flag)
    if setting.value is not None:
        return Path(setting.value).expanduser()
    if default_file:
        candidate = user_config_dir() / default_file
        if candidate.exists():
            return candidate
    return None
