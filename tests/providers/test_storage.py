"""Checkpoint storage (providers.storage) through real libcloud drivers: the Local driver
on tmp_path, the S3 and Google Storage drivers against moto's S3 server, and a small
loopback HTTP server that answers what moto cannot (errors, throttling, redirects,
wrong checksums) to the same drivers."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import random
import re
import sys
import threading
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pricing.userio.redact import redact
from providers.cloud import BACKOFF_ATTEMPTS
from providers.errors import (
    CredentialsError,
    InvalidRequest,
    NotFound,
    ProviderError,
    RateLimited,
)
from providers.storage import (
    InvalidUri,
    ObjectInfo,
    ObjectStore,
    ObjectUri,
    StorageUnavailable,
    parse_uri,
)
from providers.storage.store import PARTIAL_MARK

MiB = 1 << 20
FAKE_KEY_ID, FAKE_SECRET = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AZURE_KEY = base64.b64encode(b"k" * 64).decode()


def payload(size: int, seed: int = 0) -> bytes:
    """`size` repeatable pseudo-random bytes (fast: one call)."""
    return random.Random(seed).randbytes(size)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(4 * MiB):
            digest.update(chunk)
    return digest.hexdigest()


class Recorder:
    """A progress callback that keeps every (done, total) it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int | None]] = []

    def __call__(self, done: int, total: int | None) -> None:
        self.calls.append((done, total))

    def assert_reached(self, total: int | None, size: int) -> None:
        counts = [done for done, _ in self.calls]
        assert self.calls[0] == (0, total)
        assert all(a < b for a, b in zip(counts, counts[1:], strict=False))
        assert counts[-1] == size
        assert {t for _, t in self.calls} == {total}


@pytest.fixture
def store() -> ObjectStore:
    return ObjectStore(chunk_size=64 * 1024, sleep=lambda _: None)


def leftovers(directory: Path) -> list[str]:
    """Hidden temporary files (a partial get or put) left in `directory`."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


# --- URIs --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("s3://bkt/ckpt/step-1", ObjectUri("s3", "bkt", "ckpt/step-1")),
        ("s3://bkt", ObjectUri("s3", "bkt", "")),
        ("gs://bkt/a b%20c", ObjectUri("gs", "bkt", "a b%20c")),  # cloud keys: as written
        ("az://container/x/", ObjectUri("az", "container", "x/")),
        ("file:///tmp/a%20b/c", ObjectUri("file", "", "/tmp/a b/c")),  # file URLs: decoded
        ("file://localhost/tmp//x", ObjectUri("file", "", "/tmp/x")),
        ("S3://bkt/k", ObjectUri("s3", "bkt", "k")),
    ],
)
def test_parse_uri(text, expected):
    assert parse_uri(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "/tmp/x",
        "http://host/x",
        "s3:///key",
        "file://host/tmp/x",
        "file:///tmp/../etc/passwd",
        "s3://bkt/a\nb",
        "az://",
    ],
)
def test_parse_uri_rejects(text):
    with pytest.raises(InvalidUri) as caught:
        parse_uri(text)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, InvalidRequest)


printable = st.characters(categories=("L", "M", "N", "P", "S"), include_characters=" ")
segment = st.text(printable.filter(lambda c: c != "/"), min_size=1, max_size=12).filter(
    lambda s: s not in (".", "..")
)


@settings(max_examples=100, deadline=None)
@given(
    st.one_of(
        st.builds(
            lambda scheme, bucket, key: ObjectUri(scheme, bucket, key),
            st.sampled_from(["s3", "gs", "az"]),
            st.from_regex(r"[a-z0-9][a-z0-9.-]{0,20}", fullmatch=True),
            st.text(printable, max_size=30),
        ),
        st.builds(
            lambda parts, slash: ObjectUri("file", "", "/" + "/".join(parts) + slash),
            st.lists(segment, min_size=1, max_size=4),
            st.sampled_from(["", "/"]),
        ),
    )
)
def test_uri_text_round_trips(uri):
    assert parse_uri(str(uri)) == uri


# --- local files: the Local driver -------------------------------------------------------


def test_put_get_copy_list_exists_size_delete(store, tmp_path):
    data = payload(300_000)
    source = tmp_path / "model.bin"
    source.write_bytes(data)
    uri = (tmp_path / "ckpt" / "step-1" / "model.bin").as_uri()
    info = store.put(source, uri)
    assert info == ObjectInfo(uri, len(data), None)
    assert store.exists(uri) and store.size(uri) == len(data)

    store.get(uri, tmp_path / "restore" / "deep" / "model.bin")
    assert (tmp_path / "restore" / "deep" / "model.bin").read_bytes() == data

    other = (tmp_path / "ckpt2" / "model.bin").as_uri()
    assert store.copy(uri, other).size == len(data)
    assert Path(parse_uri(other).key).read_bytes() == data

    store.put(b"meta", (tmp_path / "ckpt" / "step-1" / "meta.json").as_uri())
    ckpt = (tmp_path / "ckpt").as_uri()
    assert store.list(ckpt + "/") == [
        ckpt + "/step-1/meta.json",
        ckpt + "/step-1/model.bin",
    ]
    assert store.list(tmp_path.as_uri() + "/ckpt") == store.list(ckpt + "/") + [other]
    assert store.list(ckpt + "/step-1/mo") == [ckpt + "/step-1/model.bin"]
    assert store.list(ckpt + "/absent/") == []

    assert store.delete(uri) is True
    assert store.delete(uri) is False
    assert not store.exists(uri)
    assert store.list(ckpt + "/") == [ckpt + "/step-1/meta.json"]


def test_put_accepts_bytes_file_objects_and_iterables(store, tmp_path):
    base = (tmp_path / "in").as_uri()
    recorded = {}
    sources = {
        "bytes": b"abc" * 1000,
        "bytearray": bytearray(b"xyz" * 10),
        "buffer": io.BytesIO(b"123456789"),
        "chunks": iter([b"ab", b"", b"cd"]),
    }
    for name, source in sources.items():
        recorded[name] = Recorder()
        store.put(source, f"{base}/{name}", recorded[name])
    assert (tmp_path / "in" / "bytes").read_bytes() == b"abc" * 1000
    assert (tmp_path / "in" / "bytearray").read_bytes() == b"xyz" * 10
    assert (tmp_path / "in" / "buffer").read_bytes() == b"123456789"
    assert (tmp_path / "in" / "chunks").read_bytes() == b"abcd"
    recorded["buffer"].assert_reached(9, 9)
    recorded["chunks"].assert_reached(None, 4)  # an iterable's size is not known ahead


def test_missing_objects_are_not_found(store, tmp_path):
    missing = (tmp_path / "nope" / "x.bin").as_uri()
    for call in (
        lambda: store.size(missing),
        lambda: store.get(missing, tmp_path / "out"),
        lambda: store.copy(missing, (tmp_path / "y").as_uri()),
        lambda: store.put(tmp_path / "no-such-file", (tmp_path / "z" / "q").as_uri()),
        lambda: store.copy_tree((tmp_path / "empty").as_uri(), (tmp_path / "t").as_uri()),
    ):
        with pytest.raises(NotFound):
            call()
    assert store.exists(missing) is False
    (tmp_path / "adir").mkdir()
    assert store.exists((tmp_path / "adir").as_uri()) is False  # a directory is no object
    assert not (tmp_path / "out").exists()
    with pytest.raises(InvalidUri):
        store.put(b"x", (tmp_path / "dir").as_uri() + "/")


def test_progress_counts_increase_to_the_total(tmp_path):
    store = ObjectStore(chunk_size=1000)
    data = payload(10_500)
    uri = (tmp_path / "a" / "obj").as_uri()
    put, get, copy = Recorder(), Recorder(), Recorder()
    store.put(data, uri, put)
    store.get(uri, tmp_path / "back", get)
    store.copy(uri, (tmp_path / "b" / "obj").as_uri(), copy)
    for recorder in (put, get, copy):
        recorder.assert_reached(len(data), len(data))
        assert len(recorder.calls) == 12  # 0, then 11 chunks
    empty = Recorder()
    store.put(b"", (tmp_path / "a" / "empty").as_uri(), empty)
    assert empty.calls == [(0, 0)]


class Stop(Exception):
    pass


def stop_after(limit: int) -> Callable[[int, int | None], None]:
    def progress(done: int, total: int | None) -> None:
        if done >= limit:
            raise Stop

    return progress


def test_failed_get_leaves_no_partial_file(tmp_path):
    store = ObjectStore(chunk_size=4096)
    uri = (tmp_path / "src" / "obj").as_uri()
    store.put(payload(100_000), uri)
    target = tmp_path / "restore" / "obj"
    with pytest.raises(Stop):
        store.get(uri, target, stop_after(50_000))
    assert not target.exists() and leftovers(target.parent) == []

    target.write_bytes(b"previous checkpoint")
    with pytest.raises(Stop):
        store.get(uri, target, stop_after(50_000))
    assert target.read_bytes() == b"previous checkpoint"  # the old file, untouched
    assert leftovers(target.parent) == []


def test_failed_put_leaves_no_object(store, tmp_path):
    def broken() -> Iterator[bytes]:
        yield b"x" * 10_000
        raise Stop

    uri = (tmp_path / "ckpt" / "obj").as_uri()
    with pytest.raises(Stop):
        store.put(broken(), uri)
    assert not store.exists(uri)
    assert leftovers(tmp_path / "ckpt") == []
    assert store.list((tmp_path / "ckpt").as_uri() + "/") == []


def test_listing_skips_objects_being_written(store, tmp_path):
    store.put(b"done", (tmp_path / "c" / "a").as_uri())
    (tmp_path / "c" / f".b{PARTIAL_MARK}123").write_bytes(b"half")
    assert store.list((tmp_path / "c").as_uri() + "/") == [(tmp_path / "c" / "a").as_uri()]


def test_copy_tree_copies_a_checkpoint_directory(store, tmp_path):
    src = tmp_path / "job" / "step-100"
    files = {"model.bin": payload(70_000), "opt/state.bin": payload(30_000, 1), "meta": b""}
    for name, data in files.items():
        store.put(data, (src / name).as_uri())
    store.put(b"other step", (tmp_path / "job" / "step-1000" / "x").as_uri())  # same prefix
    progress = Recorder()
    copied = store.copy_tree(src.as_uri(), (tmp_path / "moved").as_uri(), progress)
    assert sorted(info.uri for info in copied) == sorted(
        (tmp_path / "moved" / name).as_uri() for name in files
    )
    for name, data in files.items():
        assert (tmp_path / "moved" / name).read_bytes() == data
    assert not (tmp_path / "moved" / "0").exists()
    counts = [done for done, _ in progress.calls]
    assert counts == sorted(counts) and counts[-1] == 100_000
    assert {total for _, total in progress.calls} == {100_000}


def test_local_copy_streams_in_chunks(tmp_path):
    store = ObjectStore(chunk_size=256 * 1024)
    source = tmp_path / "big.bin"
    with source.open("wb") as handle:
        for i in range(16):
            handle.write(payload(MiB, i))
    assert store.exists(source.as_uri())  # libcloud imported before measuring
    tracemalloc.start()
    try:
        store.copy(source.as_uri(), (tmp_path / "out" / "big.bin").as_uri())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * MiB  # a 16 MiB object, never held whole
    assert sha256_file(tmp_path / "out" / "big.bin") == sha256_file(source)


CHUNK = 64
boundary_sizes = st.sampled_from([0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 3 * CHUNK + 1])


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.data(),
    size=st.one_of(boundary_sizes, st.integers(0, 5 * CHUNK)),
    kind=st.sampled_from(["path", "bytes", "file", "chunks"]),
)
def test_put_get_round_trips_any_payload(tmp_path, data, size, kind):
    store = ObjectStore(chunk_size=CHUNK)
    content = data.draw(st.binary(min_size=size, max_size=size))
    name = uuid.uuid4().hex
    if kind == "path":
        source: object = tmp_path / f"{name}.src"
        source.write_bytes(content)
    elif kind == "bytes":
        source = content
    elif kind == "file":
        source = io.BytesIO(content)
    else:
        cuts = sorted(data.draw(st.lists(st.integers(0, size), max_size=6)))
        edges = [0, *cuts, size]
        source = iter([content[a:b] for a, b in zip(edges, edges[1:], strict=False)])
    uri = (tmp_path / "objects" / name).as_uri()
    put = Recorder()
    assert store.put(source, uri, put).size == size
    assert put.calls[-1][0] == size
    got = Recorder()
    info = store.get(uri, tmp_path / "back" / name, got)
    assert info.size == size and (tmp_path / "back" / name).read_bytes() == content
    got.assert_reached(size, size)


# --- S3 and Google Storage against moto ---------------------------------------------------


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def aws_env(monkeypatch, endpoint: str) -> None:
    for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith("AWS_CONTAINER_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("BROKER_S3_ENDPOINT", endpoint)


@pytest.fixture
def s3(moto_url, monkeypatch):
    """A boto3 client on moto (to make buckets and check objects), with the environment
    the store reads: fake keys, no config files, BROKER_S3_ENDPOINT."""
    import boto3

    aws_env(monkeypatch, moto_url)
    return boto3.client(
        "s3",
        endpoint_url=moto_url,
        region_name="us-east-1",
        aws_access_key_id=FAKE_KEY_ID,
        aws_secret_access_key=FAKE_SECRET,
    )


def new_bucket(client) -> str:
    name = f"broker-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    return name


def sha256_s3(client, bucket: str, key: str) -> str:
    digest = hashlib.sha256()
    for chunk in client.get_object(Bucket=bucket, Key=key)["Body"].iter_chunks(4 * MiB):
        digest.update(chunk)
    return digest.hexdigest()


def write_big(path: Path, size: int) -> None:
    with path.open("wb") as handle:
        for i in range(size // MiB):
            handle.write(payload(MiB, i))
        handle.write(payload(size % MiB, -1))


def test_s3_multipart_round_trip_of_50_mb(s3, store, tmp_path):
    bucket, size = new_bucket(s3), 50 * MiB + 12345
    source = tmp_path / "big.bin"
    write_big(source, size)
    uri = f"s3://{bucket}/ckpt/step-1/big.bin"
    progress = Recorder()
    assert store.put(source, uri, progress) == ObjectInfo(uri, size, None)
    progress.assert_reached(size, size)
    etag = s3.head_object(Bucket=bucket, Key="ckpt/step-1/big.bin")["ETag"]
    assert etag.strip('"').endswith("-11")  # 5 MiB parts
    assert store.size(uri) == size and store.exists(uri)
    assert sha256_s3(s3, bucket, "ckpt/step-1/big.bin") == sha256_file(source)

    back = tmp_path / "back" / "big.bin"
    assert store.get(uri, back).size == size
    assert sha256_file(back) == sha256_file(source)


class PartsSeen:
    """A progress callback that, once `after` bytes were read from the source, asks S3
    how many parts of the destination's multipart upload have already arrived."""

    def __init__(self, client, bucket: str, key: str, after: int) -> None:
        self.client, self.bucket, self.key, self.after = client, bucket, key, after
        self.parts: int | None = None
        self.done_at_check = 0

    def __call__(self, done: int, total: int | None) -> None:
        if self.parts is not None or done < self.after:
            return
        uploads = self.client.list_multipart_uploads(Bucket=self.bucket).get("Uploads", [])
        mine = [u for u in uploads if u["Key"] == self.key]
        self.parts = 0
        if mine:
            listing = self.client.list_parts(
                Bucket=self.bucket, Key=self.key, UploadId=mine[0]["UploadId"]
            )
            self.parts = len(listing.get("Parts", []))
        self.done_at_check, self.total = done, total


def test_copy_file_to_s3_streams_without_a_local_copy(s3, store, tmp_path):
    bucket, size = new_bucket(s3), 16 * MiB
    source = tmp_path / "ckpt.bin"
    write_big(source, size)
    seen = PartsSeen(s3, bucket, "runs/ckpt.bin", after=12 * MiB)
    info = store.copy(source.as_uri(), f"s3://{bucket}/runs/ckpt.bin", seen)
    assert info.size == size
    # Parts were on S3 while most of the source was still unread: nothing buffered whole.
    assert seen.done_at_check < size and seen.parts is not None and seen.parts >= 2
    assert sha256_s3(s3, bucket, "runs/ckpt.bin") == sha256_file(source)


def test_copy_between_s3_buckets_streams(s3, store):
    first, second, size = new_bucket(s3), new_bucket(s3), 16 * MiB
    data = payload(size, 7)
    s3.put_object(Bucket=first, Key="ckpt/model.bin", Body=data)
    seen = PartsSeen(s3, second, "moved/model.bin", after=12 * MiB)
    info = store.copy(f"s3://{first}/ckpt/model.bin", f"s3://{second}/moved/model.bin", seen)
    assert info == ObjectInfo(f"s3://{second}/moved/model.bin", size, None)
    # S3 answers in 5 MiB pieces: at 15 of 16 MiB read, one 5 MiB part is on the other side.
    assert seen.done_at_check < size and seen.parts is not None and seen.parts >= 1
    assert sha256_s3(s3, second, "moved/model.bin") == hashlib.sha256(data).hexdigest()


def test_s3_metadata_listing_and_not_found(s3, store):
    bucket = new_bucket(s3)
    for key in ("ckpt/a", "ckpt/b/c", "ckpt2/d", "other"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    assert store.list(f"s3://{bucket}/ckpt/") == [
        f"s3://{bucket}/ckpt/a",
        f"s3://{bucket}/ckpt/b/c",
    ]
    assert len(store.list(f"s3://{bucket}/ckpt")) == 3
    assert len(store.list(f"s3://{bucket}")) == 4
    assert store.size(f"s3://{bucket}/ckpt/b/c") == 8
    with pytest.raises(NotFound):
        store.size(f"s3://{bucket}/missing")
    with pytest.raises(NotFound):
        store.put(b"x", "s3://broker-no-such-bucket/x")
    with pytest.raises(NotFound):
        store.list("s3://broker-no-such-bucket/")
    assert store.exists("s3://broker-no-such-bucket/x") is False
    assert store.delete(f"s3://{bucket}/other") is True
    assert store.delete(f"s3://{bucket}/other") is False
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix="other")
    copied = store.copy_tree(f"s3://{bucket}/ckpt", f"s3://{bucket}/restore/")
    assert [info.uri for info in copied] == [
        f"s3://{bucket}/restore/a",
        f"s3://{bucket}/restore/b/c",
    ]
    assert s3.get_object(Bucket=bucket, Key="restore/b/c")["Body"].read() == b"ckpt/b/c"


def test_empty_object_round_trips_through_s3(s3, store, tmp_path):
    bucket = new_bucket(s3)
    assert store.put(b"", f"s3://{bucket}/empty").size == 0
    assert store.get(f"s3://{bucket}/empty", tmp_path / "empty").size == 0
    assert (tmp_path / "empty").read_bytes() == b""


def test_google_storage_on_hmac_keys(s3, store, moto_url, monkeypatch, tmp_path):
    """gs:// through libcloud's Google Storage driver (HMAC signing, the XML API) against
    moto's S3, which speaks the same API: one PUT per object, so the ETag is an MD5."""
    monkeypatch.setenv("GOOGLE_STORAGE_HMAC_ACCESS_ID", "GOOG1EXAMPLEEXAMPLEEXAMPLE")
    monkeypatch.setenv("GOOGLE_STORAGE_HMAC_SECRET", "bGlrZS1hLWdvb2dsZS1zZWNyZXQtZXhhbXBsZQ")
    monkeypatch.setenv("BROKER_GCS_ENDPOINT", moto_url)
    bucket = new_bucket(s3)
    data = payload(3 * MiB + 5, 3)
    md5 = hashlib.md5(data).hexdigest()
    info = store.put(data, f"gs://{bucket}/ckpt/model.bin")
    assert info == ObjectInfo(f"gs://{bucket}/ckpt/model.bin", len(data), md5)
    assert store.get(f"gs://{bucket}/ckpt/model.bin", tmp_path / "m").md5 == md5
    assert (tmp_path / "m").read_bytes() == data
    s3.put_object(Bucket=bucket, Key="from-s3", Body=b"hello")
    copied = store.copy(f"s3://{bucket}/from-s3", f"gs://{bucket}/copied")
    assert copied.md5 == hashlib.md5(b"hello").hexdigest()
    # (listing: moto answers in S3's XML namespace, not Google's; see the next test)


# --- what moto cannot say: a loopback server with chosen answers --------------------------


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Answer:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[Seen] = []
        self.answer: Callable[[Seen], Answer] = lambda _: Answer(500)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that gave up
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = bytearray()
            while size := int(self.rfile.readline().split(b";")[0], 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = Seen(self.command, self.path, headers, bytes(body))
        self.server.seen.append(request)
        answer = self.server.answer(request)
        self.send_response(answer.status)
        headers = {"Content-Length": str(len(answer.body)), **answer.headers}
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer.body)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _serve

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    server = FakeServer()
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def region_of(request: Seen) -> str:
    return re.search(r"Credential=[^/]+/\d+/([^/]+)/", request.headers["authorization"]).group(1)


SECRET_BODY = (
    "<?xml version='1.0'?><Error><Code>SignatureDoesNotMatch</Code><Message>The request "
    "signature we calculated does not match. Check your key.</Message>"
    f"<AWSAccessKeyId>{FAKE_KEY_ID}</AWSAccessKeyId><StringToSign>AWS4-HMAC-SHA256 secret-"
    "string</StringToSign><SignatureProvided>9f2ac0e4b1d3c5e7f9a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9"
    "d1e3f5a7b9c1d3e5</SignatureProvided></Error>"
).encode()


@pytest.mark.parametrize(
    ("answer", "error", "retryable", "requests"),
    [
        (Answer(403, body=SECRET_BODY), CredentialsError, False, 2),
        (Answer(503, body=b"<Error><Code>SlowDown</Code></Error>"), RateLimited, True, 1),
        (Answer(429), RateLimited, True, 1),
        (Answer(500), ProviderError, True, 1),
        (Answer(404), NotFound, False, 1),
        (Answer(400, body=b"<Error><Code>InvalidArgument</Code></Error>"), ProviderError, False, 2),
    ],
)
def test_s3_errors_map_onto_the_taxonomy(fake, monkeypatch, answer, error, retryable, requests):
    aws_env(monkeypatch, fake.url)
    fake.answer = lambda request: answer
    pauses: list[float] = []
    store = ObjectStore(sleep=pauses.append)
    with pytest.raises(ProviderError) as caught:
        store.list("s3://broker-bkt/ckpt/")
    assert type(caught.value) is error and caught.value.retryable is retryable
    assert caught.value.provider == "s3" and "s3://broker-bkt/ckpt/" in str(caught.value)
    attempts = BACKOFF_ATTEMPTS if error is RateLimited else 1
    assert len(fake.seen) == attempts * requests  # throttled metadata calls are retried
    assert len(pauses) == attempts - 1
    text = f"{caught.value!s} {caught.value!r} {caught.value.message}"
    for secret in (FAKE_KEY_ID, FAKE_SECRET, "secret-string", "9f2ac0e4b1d3"):
        assert secret not in text
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_credentials_rejection_names_the_cloud_code(fake, monkeypatch):
    aws_env(monkeypatch, fake.url)
    fake.answer = lambda request: Answer(403, body=SECRET_BODY)
    with pytest.raises(CredentialsError, match="SignatureDoesNotMatch"):
        ObjectStore().list("s3://broker-bkt/")


def test_unreachable_endpoint_is_a_retryable_error(fake, monkeypatch):
    url = fake.url
    fake.shutdown()
    fake.server_close()
    aws_env(monkeypatch, url)
    with pytest.raises(ProviderError, match="cannot reach") as caught:
        ObjectStore(sleep=lambda _: None).get("s3://broker-bkt/x", "unused")
    assert caught.value.retryable


def test_a_stalled_download_times_out(fake, monkeypatch, tmp_path):
    aws_env(monkeypatch, fake.url)
    release = threading.Event()

    def answer(request: Seen) -> Answer:
        if request.method == "GET":
            release.wait(10)  # stall the streamed download
            return Answer(500)
        return Answer(200, {"Content-Length": "5", "ETag": '"e"'})

    fake.answer = answer
    try:
        with pytest.raises(ProviderError, match="ReadTimeout") as caught:
            ObjectStore(timeout=0.3).get("s3://broker-bkt/k", tmp_path / "k")
    finally:
        release.set()
    assert caught.value.retryable and not (tmp_path / "k").exists()


def test_s3_follows_a_bucket_to_its_region(fake, monkeypatch):
    aws_env(monkeypatch, fake.url)

    def answer(request: Seen) -> Answer:
        if region_of(request) != "eu-west-1":
            return Answer(301, {"x-amz-bucket-region": "eu-west-1"})
        return Answer(200, {"Content-Length": "7", "ETag": '"abc"'})

    fake.answer = answer
    store = ObjectStore()
    assert store.size("s3://broker-bkt/ckpt") == 7
    assert store.size("s3://broker-bkt/ckpt") == 7  # remembered: no second redirect
    assert [region_of(r) for r in fake.seen] == ["us-east-1"] + ["eu-west-1"] * 4


def test_s3_signs_with_session_tokens_and_any_region(fake, monkeypatch):
    aws_env(monkeypatch, fake.url)
    monkeypatch.setenv("AWS_SESSION_TOKEN", "session-token-value")
    monkeypatch.setenv("AWS_REGION", "ap-southeast-3")  # not in libcloud's region list
    fake.answer = lambda request: Answer(200, {"Content-Length": "3", "ETag": '"x"'})
    assert ObjectStore().size("s3://broker-bkt/k") == 3
    assert {region_of(r) for r in fake.seen} == {"ap-southeast-3"}
    assert {r.headers["x-amz-security-token"] for r in fake.seen} == {"session-token-value"}
    assert all(f"Credential={FAKE_KEY_ID}/" in r.headers["authorization"] for r in fake.seen)


def test_s3_keys_from_the_environment_without_boto3(fake, monkeypatch):
    aws_env(monkeypatch, fake.url)
    for module in ("botocore", "botocore.session", "botocore.exceptions"):
        monkeypatch.setitem(sys.modules, module, None)  # import fails: boto3 not installed
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENTONLY1")
    fake.answer = lambda request: Answer(200, {"Content-Length": "1", "ETag": '"x"'})
    assert ObjectStore().size("s3://broker-bkt/k") == 1
    assert "Credential=AKIAENVIRONMENTONLY1/" in fake.seen[0].headers["authorization"]
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(CredentialsError, match="AWS_SECRET_ACCESS_KEY") as missing:
        ObjectStore().size("s3://broker-bkt/k")
    # what reaches an event or an error line (redacted) still says what to set
    assert "set AWS_ACCESS_KEY_ID" in redact(str(missing.value))


def test_missing_credentials_and_bad_endpoints(monkeypatch, fake):
    aws_env(monkeypatch, fake.url)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(CredentialsError, match="no AWS credentials"):
        ObjectStore().size("s3://broker-bkt/k")
    with pytest.raises(CredentialsError, match="GOOGLE_STORAGE_HMAC_ACCESS_ID"):
        ObjectStore().size("gs://bkt/k")
    with pytest.raises(CredentialsError, match="AZURE_STORAGE_ACCOUNT"):
        ObjectStore().size("az://ckpt/k")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", "acct")
    monkeypatch.setenv("AZURE_STORAGE_KEY", "not base64!")
    with pytest.raises(CredentialsError, match="base64"):
        ObjectStore().size("az://ckpt/k")
    assert fake.seen == []
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    for bad in ("127.0.0.1:9000", "http://127.0.0.1:99999", "ftp://host", "http://h:1/path"):
        monkeypatch.setenv("BROKER_S3_ENDPOINT", bad)
        with pytest.raises(InvalidRequest, match="BROKER_S3_ENDPOINT"):
            ObjectStore().size("s3://broker-bkt/k")


def gcs_env(monkeypatch, url: str) -> None:
    monkeypatch.setenv("GOOGLE_STORAGE_HMAC_ACCESS_ID", "GOOG1EXAMPLEEXAMPLEEXAMPLE")
    monkeypatch.setenv("GOOGLE_STORAGE_HMAC_SECRET", "c2VjcmV0LXNlY3JldC1zZWNyZXQ")
    monkeypatch.setenv("BROKER_GCS_ENDPOINT", url)


GCS_NAMESPACE = "http://doc.s3.amazonaws.com/2006-03-01"  # what Google's XML API answers in


def listing(keys: list[str], truncated: bool) -> bytes:
    contents = "".join(
        f'<Contents><Key>{key}</Key><Size>{len(key)}</Size><ETag>"e"</ETag>'
        "<LastModified>2026-01-01T00:00:00.000Z</LastModified></Contents>"
        for key in keys
    )
    flag = "true" if truncated else "false"
    text = f'<ListBucketResult xmlns="{GCS_NAMESPACE}"><IsTruncated>{flag}</IsTruncated>'
    return (text + contents + "</ListBucketResult>").encode()


def test_google_storage_listing_reads_every_page(fake, monkeypatch):
    gcs_env(monkeypatch, fake.url)

    def answer(request: Seen) -> Answer:
        if request.method == "HEAD":
            return Answer(200)
        if "marker=ck%2Fb" in request.path:
            return Answer(200, body=listing(["ck/c"], truncated=False))
        return Answer(200, body=listing(["ck/a", "ck/b"], truncated=True))

    fake.answer = answer
    assert ObjectStore().list("gs://bkt/ck/") == ["gs://bkt/ck/a", "gs://bkt/ck/b", "gs://bkt/ck/c"]
    assert all("prefix=ck%2F" in r.path for r in fake.seen if r.method == "GET")


def test_get_rejects_a_wrong_checksum_or_size_and_keeps_nothing(fake, monkeypatch, tmp_path):
    gcs_env(monkeypatch, fake.url)
    claims = {"/bkt/sum": ("5", hashlib.md5(b"world").hexdigest()), "/bkt/size": ("9", "x")}

    def answer(request: Seen) -> Answer:
        if request.path == "/bkt":
            return Answer(200)
        length, etag = claims[request.path]
        if request.method == "HEAD":
            return Answer(200, {"Content-Length": length, "ETag": f'"{etag}"'})
        return Answer(200, body=b"hello")

    fake.answer = answer
    store = ObjectStore()
    for name, problem in (("sum", "checksum mismatch"), ("size", "size mismatch")):
        with pytest.raises(ProviderError, match=problem) as caught:
            store.get(f"gs://bkt/{name}", tmp_path / name)
        assert caught.value.retryable and caught.value.provider == "gs"
        assert not (tmp_path / name).exists()
    assert leftovers(tmp_path) == []


def test_put_deletes_an_upload_whose_checksum_is_wrong(fake, monkeypatch):
    gcs_env(monkeypatch, fake.url)
    stored: dict[str, bytes] = {}

    def answer(request: Seen) -> Answer:
        if request.path == "/bkt":
            return Answer(200)
        if request.method == "PUT":
            stored[request.path] = request.body
            return Answer(200, {"ETag": '"whatever"'})
        if request.method == "DELETE":
            stored.pop(request.path)
            return Answer(204)
        wrong = hashlib.md5(b"something else").hexdigest()
        size = str(len(stored.get(request.path, b"")))
        return Answer(200, {"Content-Length": size, "ETag": f'"{wrong}"'})

    fake.answer = answer
    with pytest.raises(ProviderError, match="checksum mismatch"):
        ObjectStore().put(b"checkpoint", "gs://bkt/ckpt")
    assert [r.method for r in fake.seen if r.path == "/bkt/ckpt"][0] == "PUT"
    assert "DELETE" in [r.method for r in fake.seen if r.path == "/bkt/ckpt"]
    assert stored == {}


def test_azure_addresses_the_account_as_a_path_prefix(fake, monkeypatch):
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", "devstoreaccount1")
    monkeypatch.setenv("AZURE_STORAGE_KEY", AZURE_KEY)
    monkeypatch.setenv("BROKER_AZURE_BLOB_ENDPOINT", fake.url)
    body = b"<Error><Code>ServerBusy</Code><Message>Too busy. Retry.</Message></Error>"
    fake.answer = lambda request: Answer(503, {"Content-Type": "application/xml"}, body)
    with pytest.raises(RateLimited, match="HTTP 503"):  # libcloud reads no code under lxml
        ObjectStore(sleep=lambda _: None).list("az://ckpt/run/")
    assert fake.seen and all(r.path.startswith("/devstoreaccount1/ckpt") for r in fake.seen)
    signed = {r.headers["authorization"].partition(":")[0] for r in fake.seen}
    assert signed == {"SharedKey devstoreaccount1"}
    fake.answer = lambda request: Answer(403)
    with pytest.raises(CredentialsError):
        ObjectStore().list("az://ckpt/run/")


class AzureBlobs:
    """Just enough of the Blob service, addressed `/account/container/blob` as Azurite is,
    for put (blocks, then the block list), HEAD, GET and DELETE."""

    STAMP = {"ETag": '"0x8D0"', "Last-Modified": "Thu, 01 Jan 2026 00:00:00 GMT"}

    def __init__(self, account: str) -> None:
        self.prefix = f"/{account}/"
        self.blobs: dict[str, tuple[bytes, str | None]] = {}
        self.blocks: dict[tuple[str, str], bytes] = {}

    def __call__(self, request: Seen) -> Answer:
        url = urlsplit(request.path)
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        assert url.path.startswith(self.prefix)
        container, _, name = url.path[len(self.prefix) :].partition("/")
        if container != "ckpt":
            return Answer(404)
        if not name:
            return Answer(200, self.STAMP)
        if request.method == "PUT" and query.get("comp") == "block":
            self.blocks[(name, query["blockid"])] = request.body
            return Answer(201)
        if request.method == "PUT" and query.get("comp") == "blocklist":
            ids = re.findall(r"<Uncommitted>([^<]*)</Uncommitted>", request.body.decode())
            data = b"".join(self.blocks.pop((name, block)) for block in ids)
            self.blobs[name] = (data, request.headers.get("x-ms-blob-content-md5"))
            return Answer(201, self.STAMP)
        if name not in self.blobs:
            return Answer(404)
        data, md5 = self.blobs[name]
        if request.method == "DELETE":
            del self.blobs[name]
            return Answer(202)
        headers = {**self.STAMP, "Content-Length": str(len(data)), "x-ms-blob-type": "BlockBlob"}
        if md5:
            headers["Content-MD5"] = md5
        return Answer(200, headers, b"" if request.method == "HEAD" else data)


def test_azure_round_trip_is_checked_by_content_md5(fake, monkeypatch, tmp_path):
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT", "devstoreaccount1")
    monkeypatch.setenv("AZURE_STORAGE_KEY", AZURE_KEY)
    monkeypatch.setenv("BROKER_AZURE_BLOB_ENDPOINT", fake.url)
    fake.answer = service = AzureBlobs("devstoreaccount1")
    store = ObjectStore()
    data = payload(9 * MiB + 3, 5)  # three 4 MiB blocks
    md5 = hashlib.md5(data).hexdigest()
    assert store.put(data, "az://ckpt/run/model.bin") == ObjectInfo(
        "az://ckpt/run/model.bin", len(data), md5
    )
    assert service.blobs["run/model.bin"][0] == data and service.blocks == {}
    assert store.get("az://ckpt/run/model.bin", tmp_path / "m").md5 == md5
    assert (tmp_path / "m").read_bytes() == data
    copied = store.copy("az://ckpt/run/model.bin", (tmp_path / "c" / "m").as_uri())
    assert copied.size == len(data) and (tmp_path / "c" / "m").read_bytes() == data
    assert store.put(b"", "az://ckpt/run/empty").size == 0
    assert store.delete("az://ckpt/run/model.bin") is True
    assert not store.exists("az://ckpt/run/model.bin")
    with pytest.raises(NotFound):
        store.put(b"x", "az://no-container/x")

    service.blobs["run/model.bin"] = (data, base64.b64encode(b"\0" * 16).decode())
    with pytest.raises(ProviderError, match="checksum mismatch"):
        store.get("az://ckpt/run/model.bin", tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_a_missing_storage_extra_says_how_to_install_it(monkeypatch, tmp_path):
    aws_env(monkeypatch, "http://127.0.0.1:9")
    monkeypatch.setitem(sys.modules, "libcloud.storage.base", None)
    with pytest.raises(
        StorageUnavailable, match=r"apache-libcloud: pip install 'broker\[storage\]'"
    ):
        ObjectStore().size("s3://broker-bkt/k")
    monkeypatch.setitem(sys.modules, "libcloud.storage.drivers.local", None)
    with pytest.raises(StorageUnavailable, match=r"pip install 'broker\[storage\]'"):
        ObjectStore().put(b"x", (tmp_path / "d" / "x").as_uri())


# --- the CLI's progress bar --------------------------------------------------------------


def test_progress_bar_drives_a_rich_progress(tmp_path):
    from rich.console import Console

    from providers.storage.progress import progress_bar

    out = io.StringIO()
    with progress_bar("upload step-1", Console(file=out, width=100)) as progress:
        ObjectStore().put(payload(2_000_000), (tmp_path / "x" / "y").as_uri(), progress)
    assert "upload step-1" in out.getvalue() and "2.0/2.0 MB" in out.getvalue()
