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
from pathlib import Path
from typing import Any, NamedTuple

from pricing.userio.dirs import user_config_dir


class DeclaredSetting(NamedTuple):
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
    ("state", None, "state file, or a postgresql:// URL (default: state.db in the state dir)"),
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
    # --- how much of a user's file broker reads (pricing.userio.reading) -----------------
    ("max_yaml_bytes", 8 << 20, "largest YAML file read (manifests, pools, policy, overlays)"),
    ("max_catalog_bytes", 512 << 20, "largest catalog CSV (or compiled cache) read"),
    ("max_trace_bytes", 1 << 30, "largest trace read (job list, spot data), once inflated"),
    ("max_bill_bytes", 1 << 30, "largest billing export CSV read (cost-report --actual)"),
    ("max_nesting_depth", 64, "deepest nesting of lists and mappings in a YAML or JSON file"),
)
SETTINGS: dict[str, DeclaredSetting] = {row[0]: DeclaredSetting(*row) for row in _TABLE}


class Setting(NamedTuple):
    """A resolved value and where it came from (for `--verbose` and error messages)."""

    value: Any
    origin: str


class ConfigError(ValueError):
    """A configuration file that cannot be read, or a value of the wrong kind in it."""


def _read_toml(path: Path) -> dict[str, Any]:
    if not os.path.lexists(path):
        return {}
    return read_toml(path)  # a directory or a FIFO of that name is refused, not skipped


def read_toml(path: Path) -> dict[str, Any]:
    """A settings file's table; ConfigError `file:line:col: ...` for one that is not TOML
    (or not a regular file, or too large: `pricing.userio.reading`)."""
    import re
    import tomllib

    from pricing.userio.errors import UserInputError
    from pricing.userio.reading import read_text

    try:
        text = read_text(path, "config")
        return tomllib.loads(text)
    except UserInputError as exc:
        raise ConfigError(str(exc)) from None
    except RecursionError:
        raise ConfigError(f"{path}: TOML syntax error: arrays or tables nested too deep") from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        where = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
        if where is None:
            raise ConfigError(f"{path}: TOML syntax error: {message}") from None
        reason = message[: where.start()]
        raise ConfigError(f"{path}:{where[1]}:{where[2]}: TOML syntax error: {reason}") from None
    except ValueError:  # a value tomllib reads but Python cannot hold (4,301 digits)
        long = re.search(r"[0-9_]{4300,}", text)
        line = f":{text.count(chr(10), 0, long.start()) + 1}" if long else ""
        raise ConfigError(f"{path}{line}: an integer too long to read") from None


def config_files(cwd: Path | None = None) -> tuple[Path, Path]:
    """The two settings files, the project's first: `./broker.toml`, user `config.toml`."""
    return (cwd or Path.cwd()) / "broker.toml", user_config_dir() / "config.toml"


def unknown_keys(cwd: Path | None = None) -> list[str]:
    """A warning for every key of the settings files that is no setting, with its line
    and a did-you-mean (`broker.toml:3: unknown setting 'catalgo' (did you mean
    'catalog'?)`); ConfigError for a file that is not TOML. Read once per command."""
    import re

    from pricing.userio.suggest import suggestion

    warnings = []
    for path in config_files(cwd):
        values = _read_toml(path)
        unknown = [key for key in values if key not in SETTINGS]
        if not unknown:
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for key in unknown:
            pattern = re.compile(rf"^\s*(\[\s*)?[\"']?{re.escape(key)}[\"']?\s*[=\].]")
            line = next((n for n, text in enumerate(lines, 1) if pattern.match(text)), 0)
            where = f"{path}:{line}" if line else str(path)
            warnings.append(f"{where}: unknown setting {key!r}{suggestion(key, SETTINGS)}")
    return warnings


def resolve(name: str, flag: Any = None, cwd: Path | None = None) -> Setting:
    """The value of setting `name` by the precedence in the module docstring.

    KeyError for a name that is not in `SETTINGS` (a typo in our code).
    """
    declared = SETTINGS[name]
    if flag is not None:
        return Setting(flag, "flag")
    if os.environ.get(declared.variable):
        return Setting(os.environ[declared.variable], declared.variable)
    for path in config_files(cwd):
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


def origin_note(name: str, flag: object = None) -> str:
    """Where setting `name` was given, for a message about its value: " (set by
    BROKER_POOLS)", " (set in ./broker.toml)", or "" for a flag or the default."""
    origin = resolve(name, flag).origin
    if origin in ("flag", "default"):
        return ""
    return f" (set by {origin})" if origin.startswith("BROKER_") else f" (set in {origin})"


def resolve_positive_int(name: str) -> int:
    """A whole-number setting above 0 (a size cap, a number of days); ConfigError naming
    where it came from when it is anything else."""
    setting = resolve(name)
    value = setting.value
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        where = f"{setting.origin}: {name}"
        raise ConfigError(f"{where}: expected a whole number above 0, got {value!r}")
    return value


def check_no_nul(setting: Setting, name: str) -> str:
    """A path or URL setting's text; ConfigError when it holds a NUL byte (TOML writes
    one as "\\u0000"): no path can, and the system would refuse it with a traceback."""
    text = str(setting.value)
    if "\x00" in text:
        raise ConfigError(f"{setting.origin}: {name}: a path cannot hold a NUL byte")
    return text


def resolve_path(
    name: str, flag: Path | None = None, default_file: str | None = None
) -> Path | None:
    """A path setting; falls back to `~/.config/broker/<default_file>` when that file exists."""
    setting = resolve(name, flag)
    if isinstance(setting.value, str | Path) and str(setting.value):
        return Path(check_no_nul(setting, name)).expanduser()
    if setting.value is not None:
        raise ConfigError(f"{setting.origin}: {name}: expected a path, got {setting.value!r}")
    if default_file:
        candidate = user_config_dir() / default_file
        if candidate.exists():
            return candidate
    return None
