"""What a parsed YAML document is to the manifest loader (broker.manifest.load): whether
it claims to be a manifest, the error when it names no version the loader reads, and
where its text is in its file (what the state keeps of a submitted job)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pricing.userio.errors import UserInputError
    from pricing.userio.yaml_reader import YamlDocument

API_VERSION = "broker/v1"


def is_broker_document(data: Any) -> bool:
    """Whether a document claims to be a manifest (with its `apiVersion` key in any case)."""
    if not isinstance(data, dict):
        return False
    return any(
        isinstance(key, str) and key.lower() == "apiversion" and str(value).startswith("broker/")
        for key, value in data.items()
    )


def document_span(doc: YamlDocument, text: str) -> tuple[int, int]:
    """Where a document's content starts and ends in its file: from its first node to
    its last, surrounding white space left out (its text is that slice plus a newline)."""
    start, end = doc.node.start_mark.index, doc.node.end_mark.index
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def version_error(doc: YamlDocument, data: dict[Any, Any]) -> UserInputError:
    """The one error of a mapping that is not a broker/v1 manifest: its version, a
    mistyped `apiVersion` key, or the key missing (the schema depends on the version)."""
    from pricing.userio.suggest import suggestion

    if "apiVersion" in data:
        message = f"unsupported apiVersion {data['apiVersion']!r}: expected {API_VERSION}"
        return doc.error(("apiVersion",), message)
    for key in data:
        if close := suggestion(key, ["apiVersion"]):
            return doc.error((key,), f"unknown field{close}", key=True)
    return doc.error(("apiVersion",), f"not a job manifest: apiVersion: {API_VERSION} is missing")
