"""Providers by name, imported only when asked for (Libcloud's habit).

The registry is a table of strings, so importing it loads no adapter and no cloud
SDK: `broker --help` stays fast, and a missing optional extra only matters to the
command that needs that cloud.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from providers.base import Provider

PROVIDERS: Mapping[str, str] = MappingProxyType(
    {
        "aws": "providers.aws:AwsProvider",
        "gcp": "providers.gcp:GcpProvider",
        "azure": "providers.azure:AzureProvider",
        "sandbox": "providers.sandbox:SandboxProvider",
    }
)
# The pip extra that brings each provider's SDK (pyproject.toml).
EXTRAS: Mapping[str, str] = MappingProxyType({"aws": "aws", "gcp": "gcp", "azure": "azure"})


class UnknownProvider(ValueError):
    """No provider by that name (bad input: a flag, a config file, a manifest)."""


class ProviderUnavailable(ImportError):
    """The provider is known but cannot be loaded here (SDK extra not installed)."""


def provider_names() -> tuple[str, ...]:
    """Every registered provider name, sorted."""
    return tuple(sorted(PROVIDERS))


def provider_class(name: str) -> type:
    """The provider class registered as `name`, importing its module now."""
    target = PROVIDERS.get(name)
    if target is None:
        from pricing.userio.suggest import hint

        known = ", ".join(provider_names())
        raise UnknownProvider(f"unknown provider {name!r}{hint(name, PROVIDERS)}; known: {known}")
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise ProviderUnavailable(
                f"provider {name!r} is not part of this version of broker"
            ) from exc
        extra = EXTRAS.get(name)
        fix = f": pip install 'broker[{extra}]'" if extra else ""
        raise ProviderUnavailable(f"provider {name!r} needs the {missing} package{fix}") from exc
    return getattr(module, attribute)


def load_provider(name: str, /, **kwargs: Any) -> Provider:
    """An instance of the provider registered as `name`, built with `kwargs`."""
    return provider_class(name)(**kwargs)
