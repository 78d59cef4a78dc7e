"""Find, read and check job manifests: YAML files of `apiVersion: broker/v1` documents.

    result = load_manifests([Path("jobs/")])
    for error in result.errors:          # every mistake of every file, each located
        print(error)                     # jobs/llama.yaml:7:17: resources.accelerators: ...
    specs = [m.spec for m in result.manifests]

A file named explicitly must be a manifest file. In a directory (searched
recursively for *.yaml and *.yml, hidden directories skipped), a file none of
whose documents has an `apiVersion` starting with `broker/` is skipped: a git
tree holds other YAML (CI configs, pools.yaml, Kubernetes objects). A file
that mentions no such apiVersion at all is skipped without being parsed, so a
Helm template that is not valid YAML does no harm.

A job is known by (team, name): the same pair twice among everything loaded
is an error at the second one's `name`. Each manifest carries the sha256 of
its document's canonical JSON (keys sorted, no spaces), so that re-submitting
an unchanged manifest can be told apart from a changed one whatever its
comments, layout or key order.

pydantic is imported only when a document is validated (`broker.manifest.model`),
and yaml (with pricing.userio.yaml_reader) only when a file is parsed: a manifest file loaded
before comes from the spec cache (`broker.manifest.spec_cache`) without either.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from broker.collector import collector_paused
from broker.manifest.digest import manifest_digest
from broker.manifest.documents import API_VERSION, document_span, is_broker_document, version_error
from broker.manifest.files import SUFFIXES as SUFFIXES  # where callers have found them
from broker.manifest.files import find_manifest_files as find_manifest_files
from broker.manifest.files import keyed_files
from broker.manifest.workdir import MANIFEST_DIR, as_written, manifest_dir, resolved
from broker.spec import JobSpec

if TYPE_CHECKING:
    from broker.manifest.spec_cache import SpecCache
    from broker.manifest.templates import Templates
    from pricing.userio.errors import UserInputError
    from pricing.userio.reading import Limits
    from pricing.userio.yaml_reader import YamlDocument

# A cheap test, before parsing, of whether a file found in a directory may hold a manifest.
_MENTIONS_BROKER_API = re.compile(r"""apiversion["']?\s*:\s*["']?broker/""", re.IGNORECASE)
_MENTIONED = "apiVersion: broker/"  # what the pattern matches, as nearly every file says it


@dataclass(frozen=True)
class Manifest:
    """One validated manifest document and where it came from."""

    spec: JobSpec
    path: Path
    index: int  # 0-based document number in the file
    line: int  # 1-based line where the document's content starts
    digest: str  # sha256 hex of the document's canonical JSON
    text: str = ""  # the document as written (comments included): what the store keeps


@dataclass(frozen=True, eq=False)
class LoadResult:
    """Everything `load_manifests` found: valid manifests, every error, and skipped files."""

    manifests: list[Manifest] = field(default_factory=list)
    errors: list[UserInputError] = field(default_factory=list)  # each a single error
    skipped: list[Path] = field(default_factory=list)  # found in a directory, not manifests
    files: list[Path] = field(default_factory=list)  # every file looked at, in order

    @property
    def ok(self) -> bool:
        return not self.errors


def load_manifests(paths: Sequence[Path]) -> LoadResult:
    """Read every manifest under `paths` (files or directories); collect every error.

    A directory that holds no manifest at all is an error too (a mistyped path
    should not pass a CI check by finding nothing).
    """
    from broker.manifest.spec_cache import SpecCache, cache_dir
    from pricing.userio.reading import Limits

    result = LoadResult()
    loaded: list[_Loaded] = []
    readers = _Readers(SpecCache(cache_dir()), _templates(paths), Limits.resolved())
    seen: dict[str, bool] = {}  # absolute path -> is a manifest file
    with collector_paused(freeze=True):
        _load_paths(paths, result, loaded, readers, seen)
    cache = readers.cache
    cache.flush()
    result.manifests.extend(_unique(loaded, result.errors))
    return result


def _load_paths(
    paths: Sequence[Path],
    result: LoadResult,
    loaded: list[_Loaded],
    readers: _Readers,
    seen: dict[str, bool],
) -> None:
    """`load_manifests`' walk: every file of every path, each loaded once. Each file is
    read by `pricing.userio.reading` (regular files only, within the YAML size cap,
    strict UTF-8, a byte-order mark dropped), or its error kept at its name: a FIFO or
    a device named `*.yaml` in a directory is an error, never a wait or an endless read."""
    from pricing.userio.reading import read_texts

    cache, limits = readers.cache, readers.limits
    for path in map(Path, paths):
        in_directory = path.is_dir()
        keyed = keyed_files(path)
        keys = [key for _, key in keyed]
        todo = [(file, key) for file, key in keyed if key not in seen]
        texts = read_texts([file for file, _ in todo], "yaml", limits)
        cache.expect([text for text in texts if isinstance(text, str)])  # looked up in bulk
        for (file, key), text in zip(todo, texts, strict=True):
            if key in seen:  # named twice within this path
                continue
            result.files.append(file)
            skipped = _load_file(file, text, in_directory, loaded, result.errors, readers)
            if skipped:
                result.skipped.append(file)
            seen[key] = not skipped
        if in_directory and not any(seen[key] for key in keys):
            from pricing.userio.errors import UserInputError

            message = f"no job manifests (YAML with apiVersion: {API_VERSION}) in this directory"
            result.errors.append(UserInputError(path, 0, 0, "", message))


def parse_manifest_text(text: str, path: Path = Path("<stdin>")) -> list[Manifest]:
    """The manifests of one text (stdin, tests); UserInputError holding every mistake."""
    from broker.manifest.spec_cache import SpecCache, cache_dir
    from pricing.userio.errors import UserInputError
    from pricing.userio.yaml_reader import iter_yaml_documents

    loaded: list[_Loaded] = []
    errors: list[UserInputError] = []
    cache = SpecCache(cache_dir())
    try:
        for doc in iter_yaml_documents(text, Path(path)):
            _load_document(doc, text, loaded, errors, cache)
    finally:
        cache.flush()
    manifests = _unique(loaded, errors)
    if errors:
        raise UserInputError.collect(errors)
    return manifests


def load_texts(texts: Sequence[tuple[str, Path]]) -> LoadResult:
    """The manifests of texts in hand, each named by its path in errors (`broker import`
    converts tasks in memory), checked together as `load_manifests` checks files."""
    from broker.manifest.spec_cache import SpecCache, cache_dir
    from pricing.userio.errors import UserInputError
    from pricing.userio.yaml_reader import iter_yaml_documents

    result = LoadResult()
    loaded: list[_Loaded] = []
    cache = SpecCache(cache_dir())
    for text, path in texts:
        result.files.append(Path(path))
        try:
            for doc in iter_yaml_documents(text, Path(path)):
                _load_document(doc, text, loaded, result.errors, cache)
        except UserInputError as exc:
            result.errors.append(exc)
    cache.flush()
    result.manifests.extend(_unique(loaded, result.errors))
    return result


class _Readers(NamedTuple):
    """What one load reads files with: the spec cache, the templates of the files parsed
    so far (broker.manifest.templates; None without a folder to load) and the size and
    depth caps."""

    cache: SpecCache
    templates: Templates | None
    limits: Limits


def _templates(paths: Sequence[Path]) -> Templates | None:
    """Templates for a load of folders (copies of one file come in folders); none for
    files named one by one, which spares `broker plan job.yaml` their module."""
    if not any(Path(path).is_dir() for path in paths):
        return None
    from broker.manifest.templates import Templates

    return Templates()


class _Loaded(NamedTuple):
    """A valid manifest and where its name is (its node tree is not kept: memory and GC)."""

    manifest: Manifest
    name_at: tuple[int, int]
    span: tuple[int, int]  # of its text in the file


def _load_file(
    path: Path,
    text: str | UserInputError,
    in_directory: bool,
    loaded: list[_Loaded],
    errors: list[UserInputError],
    readers: _Readers,
) -> bool:
    """Load one file (its `text`, or the error reading it) into `loaded` and `errors`;
    True when it is skipped as not a manifest file."""
    if not isinstance(text, str):
        errors.append(text)
        return False
    if in_directory and _MENTIONED not in text and not _MENTIONS_BROKER_API.search(text):
        return True
    templates = readers.templates
    derived = None if templates is None else templates.derive(path, text)
    if derived is not None:  # cheaper than a cached file's row
        loaded.append(_Loaded(*derived))
        return False
    known = _from_cache(path, text, readers)
    if known is not None:
        loaded.extend(known)
        return False
    return _parse_file(path, text, in_directory, loaded, errors, readers)


def _from_cache(path: Path, text: str, readers: _Readers) -> list[_Loaded] | None:
    """The manifests of a file loaded before with the same text, if all are still cached
    (a template file's template remembered again, for the copies after it)."""
    entries = readers.cache.get_file(text)
    if not entries:
        return None
    found = []
    for entry in entries:
        spec = _cached(readers.cache, entry.digest, path)
        if spec is None:
            return None
        start, end = entry.span
        document = text[start:end] + "\n"
        manifest = Manifest(spec, path, entry.index, entry.line, entry.digest, document)
        found.append(_Loaded(manifest, entry.name_at, entry.span))
    if readers.templates is not None and len(entries) == 1 and entries[0].template is not None:
        readers.templates.restore(text, found[0], entries[0].template)
    return found


def _cached(cache: SpecCache, digest: str, path: Path) -> JobSpec | None:
    """The cached spec of a document, its workdir resolved for the manifest at `path`."""
    spec = cache.get(digest)
    if spec is None or spec.run.workdir is None:
        return spec
    return resolved(spec, manifest_dir(path))


def _parse_file(
    path: Path,
    text: str,
    in_directory: bool,
    loaded: list[_Loaded],
    errors: list[UserInputError],
    readers: _Readers,
) -> bool:
    """`_load_file` for a file not in the cache: parse and validate every document; a
    folder's file of one valid document becomes a template for the files after it."""
    from broker.manifest.spec_cache import FileEntry
    from pricing.userio.errors import UserInputError
    from pricing.userio.yaml_reader import iter_yaml_documents

    found: list[_Loaded] = []
    mistakes: list[UserInputError] = []
    cache = readers.cache
    documents = claimed = 0
    docs: list[YamlDocument] = []  # the first, while it is the only one
    try:
        for doc in iter_yaml_documents(text, path, readers.limits.nesting_depth):
            documents += doc.data is not None
            claimed += is_broker_document(doc.data)
            _load_document(doc, text, found, mistakes, cache)
            docs = [doc] if not docs and not doc.index else []
    except UserInputError as exc:  # a syntax error, in a file that mentions a broker apiVersion
        mistakes.append(exc)
    else:
        if in_directory and not claimed:
            return True
        if not documents:
            mistakes.append(UserInputError(path, 0, 0, "", "no job manifest in this file"))
    if found and not mistakes:
        templates = readers.templates if in_directory and len(docs) == 1 else None
        template = None if templates is None else templates.add(docs[0], text, found[0])
        stored = None if template is None else template.stored()
        entries = [FileEntry(m.digest, m.index, m.line, at, s, stored) for m, at, s in found]
        cache.put_file(text, entries)
    loaded.extend(found)
    errors.extend(mistakes)
    return False


def _load_document(
    doc: YamlDocument,
    text: str,
    loaded: list[_Loaded],
    errors: list[UserInputError],
    cache: SpecCache,
) -> None:
    """Validate one document of `text` into `loaded` (or `errors`). A document that
    validated before, with the same code, comes from the spec cache without pydantic."""
    data = doc.data
    if data is None:  # an empty document, e.g. after a trailing `---`
        return
    # The version decides which schema applies: without the right one, say only that.
    if isinstance(data, dict) and data.get("apiVersion") != API_VERSION:
        errors.append(version_error(doc, data))
        return
    try:
        digest = manifest_digest(data)
    except ValueError:  # json: "Circular reference detected"
        errors.append(doc.error((), "a value refers to itself (a recursive YAML alias)"))
        return
    except TypeError as exc:  # !!binary, !!set, a date as a key: nothing a manifest holds
        errors.append(doc.error((), f"a value YAML tags as no manifest value holds ({exc})"))
        return
    spec = _cached(cache, digest, doc.path)
    if spec is None:
        spec = _validated(doc, errors)
        if spec is None:
            return
        cache.put(digest, as_written(spec, data["run"].get("workdir")))
    line = doc.locate(())[0]
    span = document_span(doc, text)
    manifest = Manifest(spec, doc.path, doc.index, line, digest, text[span[0] : span[1]] + "\n")
    loaded.append(_Loaded(manifest, doc.locate(("name",)), span))


def _validated(doc: YamlDocument, errors: list[UserInputError]) -> JobSpec | None:
    """The spec of a document not in the cache: read directly when it is plainly valid
    (`broker.manifest.direct`, no pydantic), else by the model, whose errors go to
    `errors` (None then)."""
    from broker.manifest.direct import direct_spec

    base = manifest_dir(doc.path)
    spec = direct_spec(doc.data, base)
    if spec is not None:
        return spec
    from pydantic import ValidationError

    from broker.manifest.model import JobManifest
    from pricing.userio.validation import validation_errors

    try:
        model = JobManifest.model_validate(doc.data, context={MANIFEST_DIR: base})
    except ValidationError as exc:
        errors.extend(validation_errors(doc, exc, JobManifest))
        return None
    return model.to_spec()


def _unique(loaded: list[_Loaded], errors: list[UserInputError]) -> list[Manifest]:
    """The manifests, but for each one whose (team, name) came before: an error at its name."""
    first: dict[tuple[str, str], _Loaded] = {}
    for item in loaded:
        spec = item.manifest.spec
        earlier = first.setdefault((spec.team, spec.name), item)
        if earlier is not item:
            from pricing.userio.errors import UserInputError

            message = (
                f"duplicate job {spec.name!r} in team {spec.team!r} "
                f"(first at {earlier.manifest.path}:{earlier.name_at[0]})"
            )
            errors.append(UserInputError(item.manifest.path, *item.name_at, "name", message))
    return [item.manifest for item in first.values()]
