"""`broker schema`: the JSON Schema of a job manifest, for editors and other tools."""

from __future__ import annotations


def schema() -> None:
    """Print the JSON Schema (draft 2020-12) of a broker/v1 job manifest.

    Point your editor's YAML support at it, e.g. with yaml-language-server:
    `broker schema > broker-job.schema.json`, then start a manifest with
    `# yaml-language-server: $schema=broker-job.schema.json`.
    """
    import json

    from broker.manifest.digest import manifest_json_schema

    print(json.dumps(manifest_json_schema(), indent=2))
