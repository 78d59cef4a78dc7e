"""The lazy provider registry: names to import strings, nothing loaded until asked."""

from __future__ import annotations

import subprocess
import sys
from types import MappingProxyType

import pytest

from broker.clock import SystemClock
from providers import registry
from providers.base import Provider
from providers.registry import ProviderUnavailable, UnknownProvider, load_provider
from tests.fakes.offers import write_catalog

HEAVY = ("boto3", "botocore", "google", "azure", "libcloud", "pandas", "numpy")


def test_importing_the_registry_loads_no_adapter_and_no_sdk():
    code = (
        "import sys, providers.registry\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in "
        f"{HEAVY!r} or m.startswith(('providers.aws', 'providers.gcp', 'providers.azure', "
        "'providers.sandbox'))]\n"
        "print(sorted(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_entry_is_module_colon_class():
    assert set(registry.PROVIDERS) >= {"aws", "gcp", "azure", "sandbox"}
    for target in registry.PROVIDERS.values():
        module, _, attribute = target.partition(":")
        assert module.startswith("providers.") and attribute


def test_load_sandbox(tmp_path):
    from pricing.catalog import read_offer_table

    offers = read_offer_table(write_catalog(tmp_path / "offers.csv"))
    provider = load_provider("sandbox", offers=offers, workdir=tmp_path / "w", clock=SystemClock())
    assert provider.name == "sandbox"
    assert isinstance(provider, Provider)


def test_unknown_name_gets_did_you_mean():
    with pytest.raises(UnknownProvider, match=r"did you mean sandbox\?"):
        load_provider("sandbx")
    with pytest.raises(UnknownProvider, match="known: aws, azure, gcp, sandbox"):
        load_provider("openstack")


@pytest.fixture
def fake_entries(tmp_path, monkeypatch):
    """A provider module whose SDK is missing, and one that does not exist at all."""
    (tmp_path / "needs_sdk_provider.py").write_text(
        "import sdk_that_is_not_installed_xyz\nclass P: ...\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    entries = {"needy": "needs_sdk_provider:P", "ghost": "providers.ghost:GhostProvider"}
    monkeypatch.setattr(registry, "PROVIDERS", MappingProxyType(entries))
    monkeypatch.setattr(registry, "EXTRAS", MappingProxyType({"needy": "needy"}))


def test_missing_sdk_names_the_extra(fake_entries):
    with pytest.raises(ProviderUnavailable) as error:
        load_provider("needy")
    assert "sdk_that_is_not_installed_xyz" in str(error.value)
    assert "pip install 'broker[needy]'" in str(error.value)


def test_missing_adapter_module(fake_entries):
    with pytest.raises(ProviderUnavailable, match="not part of this version"):
        load_provider("ghost")
