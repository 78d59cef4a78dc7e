"""Importers of price catalogs in other tools' formats (SkyPilot CSVs) into the offers table."""
