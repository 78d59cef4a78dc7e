"""Where each cloud region is: its country (ISO 3166 alpha-2) and continent; and `Place`.

Data residency (`countries: [DE, FR]`) and egress pricing (same continent or
not) both need this. On-prem pools carry their own country in the inventory.
`Place` is the one type for where data lives, used by manifests (a checkpoint's
or an input's bucket) and by egress pricing alike.
"""

from __future__ import annotations

from dataclasses import dataclass

_AWS = {
    "us-east-1": "US",
    "us-east-2": "US",
    "us-west-1": "US",
    "us-west-2": "US",
    "us-gov-east-1": "US",
    "us-gov-west-1": "US",
    "ca-central-1": "CA",
    "ca-west-1": "CA",
    "mx-central-1": "MX",
    "sa-east-1": "BR",
    "eu-west-1": "IE",
    "eu-west-2": "GB",
    "eu-west-3": "FR",
    "eu-central-1": "DE",
    "eu-central-2": "CH",
    "eu-north-1": "SE",
    "eu-south-1": "IT",
    "eu-south-2": "ES",
    "ap-northeast-1": "JP",
    "ap-northeast-2": "KR",
    "ap-northeast-3": "JP",
    "ap-southeast-1": "SG",
    "ap-southeast-2": "AU",
    "ap-southeast-3": "ID",
    "ap-southeast-4": "AU",
    "ap-southeast-5": "MY",
    "ap-southeast-7": "TH",
    "ap-south-1": "IN",
    "ap-south-2": "IN",
    "ap-east-1": "HK",
    "ap-east-2": "TW",
    "me-south-1": "BH",
    "me-central-1": "AE",
    "af-south-1": "ZA",
    "il-central-1": "IL",
}
_GCP = {
    "us-central1": "US",
    "us-east1": "US",
    "us-east4": "US",
    "us-east5": "US",
    "us-south1": "US",
    "us-west1": "US",
    "us-west2": "US",
    "us-west3": "US",
    "us-west4": "US",
    "northamerica-northeast1": "CA",
    "northamerica-northeast2": "CA",
    "northamerica-south1": "MX",
    "southamerica-east1": "BR",
    "southamerica-west1": "CL",
    "europe-west1": "BE",
    "europe-west2": "GB",
    "europe-west3": "DE",
    "europe-west4": "NL",
    "europe-west6": "CH",
    "europe-west8": "IT",
    "europe-west9": "FR",
    "europe-west10": "DE",
    "europe-west12": "IT",
    "europe-north1": "FI",
    "europe-north2": "SE",
    "europe-central2": "PL",
    "europe-southwest1": "ES",
    "asia-east1": "TW",
    "asia-east2": "HK",
    "asia-northeast1": "JP",
    "asia-northeast2": "JP",
    "asia-northeast3": "KR",
    "asia-south1": "IN",
    "asia-south2": "IN",
    "asia-southeast1": "SG",
    "asia-southeast2": "ID",
    "australia-southeast1": "AU",
    "australia-southeast2": "AU",
    "me-west1": "IL",
    "me-central1": "QA",
    "me-central2": "SA",
    "africa-south1": "ZA",
}
_AZURE = {
    "eastus": "US",
    "eastus2": "US",
    "centralus": "US",
    "northcentralus": "US",
    "southcentralus": "US",
    "westcentralus": "US",
    "westus": "US",
    "westus2": "US",
    "westus3": "US",
    "canadacentral": "CA",
    "canadaeast": "CA",
    "mexicocentral": "MX",
    "brazilsouth": "BR",
    "brazilsoutheast": "BR",
    "chilecentral": "CL",
    "northeurope": "IE",
    "westeurope": "NL",
    "uksouth": "GB",
    "ukwest": "GB",
    "francecentral": "FR",
    "francesouth": "FR",
    "germanywestcentral": "DE",
    "germanynorth": "DE",
    "switzerlandnorth": "CH",
    "switzerlandwest": "CH",
    "norwayeast": "NO",
    "norwaywest": "NO",
    "swedencentral": "SE",
    "swedensouth": "SE",
    "polandcentral": "PL",
    "italynorth": "IT",
    "spaincentral": "ES",
    "austriaeast": "AT",
    "eastasia": "HK",
    "southeastasia": "SG",
    "japaneast": "JP",
    "japanwest": "JP",
    "koreacentral": "KR",
    "koreasouth": "KR",
    "centralindia": "IN",
    "southindia": "IN",
    "westindia": "IN",
    "jioindiawest": "IN",
    "jioindiacentral": "IN",
    "australiaeast": "AU",
    "australiasoutheast": "AU",
    "australiacentral": "AU",
    "australiacentral2": "AU",
    "newzealandnorth": "NZ",
    "indonesiacentral": "ID",
    "malaysiawest": "MY",
    "uaenorth": "AE",
    "uaecentral": "AE",
    "qatarcentral": "QA",
    "israelcentral": "IL",
    "southafricanorth": "ZA",
    "southafricawest": "ZA",
}
REGION_COUNTRY: dict[tuple[str, str], str] = {
    **{("aws", r): c for r, c in _AWS.items()},
    **{("gcp", r): c for r, c in _GCP.items()},
    **{("azure", r): c for r, c in _AZURE.items()},
}

_CONTINENT_COUNTRIES = {
    "north-america": "US CA MX",
    "south-america": "BR CL",
    "europe": "IE GB FR DE CH SE IT ES BE NL FI PL NO AT",
    "asia": "JP KR SG ID MY TH IN HK TW",
    "oceania": "AU NZ",
    "middle-east": "BH AE IL QA SA",
    "africa": "ZA",
}
COUNTRY_CONTINENT: dict[str, str] = {
    country: continent
    for continent, countries in _CONTINENT_COUNTRIES.items()
    for country in countries.split()
}


@dataclass(frozen=True, slots=True)
class Place:
    """Where data lives: a cloud and region ("aws:us-east-1"; on-prem uses its region
    label), and the zone and country when known (a manifest gives neither: a country
    is derived from the region, and on-prem places carry their pool's)."""

    cloud: str
    region: str
    zone: str = ""
    country: str = ""

    def resolved_country(self) -> str:
        return self.country or country_of(self.cloud, self.region)


def country_of(cloud: str, region: str) -> str:
    """ISO country code of a cloud region, or "" when unknown."""
    return REGION_COUNTRY.get((cloud, region), "")


def continent_of_country(country: str) -> str:
    """Continent name of a country code, or "" when unknown."""
    return COUNTRY_CONTINENT.get(country.upper(), "")
