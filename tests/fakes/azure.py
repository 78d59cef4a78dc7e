"""A small fake of Azure Resource Manager (compute only), over HTTPS on loopback.

The real azure-mgmt-compute SDK talks to it (offline-cloud-testing.md, Azure): a
self-signed certificate made by `make_certificate`, `base_url=fake.url`,
`connection_verify=<cert>`, `polling_interval=0`. It speaks what the adapter uses:
resource SKUs (with `$filter=location eq '…'`), usages, virtual machines (PUT 201 +
Azure-AsyncOperation, GET with instanceView, DELETE 202, list in a resource group,
PATCH of tags) and the async-operation status URLs; for gangs, proximity placement
groups and availability sets (PUT, GET, DELETE: refused while a VM names one) and the
NICs a VM's inline configuration made (GET, with a private IP). Tests pull its
levers: `fail_creates` (an async operation error or an HTTP error; `after` lets that
many creates succeed first), `evict` (a spot eviction), `deny` (every call 403).
`requests` records every call, so tests can read the bodies the SDK sent.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import re
import socket
import ssl
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

SUBSCRIPTION = "00000000-0000-4000-8000-000000000001"
TOKEN = "fake-arm-token-do-not-leak"  # what the tests' credential hands out
_GROUP = r"/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)"
_VMS = _GROUP + r"/providers/Microsoft\.Compute/virtualMachines"
_PPGS = _GROUP + r"/providers/Microsoft\.Compute/proximityPlacementGroups/(?P<name>[^/]+)"
_AVSETS = _GROUP + r"/providers/Microsoft\.Compute/availabilitySets/(?P<name>[^/]+)"
_NICS = _GROUP + r"/providers/Microsoft\.Network/networkInterfaces/(?P<name>[^/]+)"
VM_TYPE = "Microsoft.Compute/virtualMachines"
_COMPUTE = r"/subscriptions/(?P<sub>[^/]+)/providers/Microsoft\.Compute"


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed CA+server certificate for 127.0.0.1 and localhost: (cert, key) paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "broker fake arm")])
    now = datetime.datetime.now(datetime.UTC)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    san = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "fake-arm.pem", directory / "fake-arm.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@dataclass(frozen=True)
class Failure:
    """How creates fail: `status` None is an async operation ending Failed, else an HTTP error."""

    code: str
    message: str
    status: int | None = None


@dataclass
class _Vm:
    group: str
    body: dict[str, Any]  # what the client sent (plus id, name)
    provisioning: str = "Succeeded"
    power: str | None = "running"

    def view(self) -> dict[str, Any]:
        statuses = [{"code": f"ProvisioningState/{self.provisioning.lower()}", "level": "Info"}]
        if self.power:
            statuses.append({"code": f"PowerState/{self.power}", "level": "Info"})
        return {"statuses": statuses}

    def json(self, with_view: bool = False) -> dict[str, Any]:
        properties = dict(self.body.get("properties", {}), provisioningState=self.provisioning)
        properties.pop("osProfile", None)  # ARM never returns customData
        if with_view:
            properties["instanceView"] = self.view()
        return dict(self.body, properties=properties)


class FakeArm:
    """The fake's state and levers; `start()` serves it on https://127.0.0.1:<port>."""

    def __init__(self, cert: Path, key: Path, subscription: str = SUBSCRIPTION) -> None:
        self.subscription = subscription
        self.skus: list[dict[str, Any]] = []
        self.usages: dict[str, list[dict[str, Any]]] = {}
        self.vms: dict[str, _Vm] = {}  # "<group>/<name>", lowercase
        self.operations: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, Any]] = []  # (method, path, JSON body or None)
        self.groups: dict[str, dict[str, Any]] = {}  # PPG or availability set id (lower) -> it
        self.group_log: list[tuple[str, str]] = []  # ("create" | "delete", resource id)
        self.nics: dict[str, str] = {}  # NIC id (lower) -> private IP
        self._addresses = iter(range(4, 250))
        self.create_failure: Failure | None = None
        self.create_skip = 0
        self.deny = False
        self.lock = threading.Lock()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> FakeArm:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        with self.lock:
            self.skus, self.usages, self.vms, self.operations = [], {}, {}, {}
            self.groups, self.group_log, self.nics, self.create_skip = {}, [], {}, 0
            self.requests, self.create_failure, self.deny = [], None, False

    # --- levers ---------------------------------------------------------------------------

    def add_sku(self, name: str, location: str, family: str, vcpus: int, **extra: Any) -> None:
        """A virtualMachines SKU; `extra` may hold `restrictions` or `zones`."""
        zones = extra.pop("zones", ["1", "2", "3"])
        self.skus.append(
            {
                "resourceType": "virtualMachines",
                "name": name,
                "tier": "Standard",
                "family": family,
                "locations": [location],
                "locationInfo": [{"location": location, "zones": zones}],
                "capabilities": [{"name": "vCPUs", "value": str(vcpus)}],
                "restrictions": extra.pop("restrictions", []),
                **extra,
            }
        )

    def set_usage(self, location: str, name: str, current: int, limit: int) -> None:
        rows = [u for u in self.usages.get(location.lower(), []) if u["name"]["value"] != name]
        value = {"value": name, "localizedValue": name}
        rows.append({"unit": "Count", "currentValue": current, "limit": limit, "name": value})
        self.usages[location.lower()] = rows

    def fail_creates(self, failure: Failure | None, after: int = 0) -> None:
        """Every VM create fails with `failure` until called with None, once `after`
        more creates have succeeded."""
        self.create_failure, self.create_skip = failure, after

    def evict(self, group: str, name: str) -> None:
        """Azure reclaims a spot VM: deallocated, or gone when its eviction policy is Delete."""
        with self.lock:
            key = f"{group}/{name}".lower()
            if self.vms[key].body["properties"].get("evictionPolicy") == "Delete":
                del self.vms[key]
            else:
                self.vms[key].power = "deallocated"

    def creates(self) -> list[dict[str, Any]]:
        """The bodies of every VM PUT received."""
        return [
            body
            for method, path, body in self.requests
            if method == "PUT" and "/virtualmachines/" in path.lower()
        ]

    # --- the API --------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, str], body: Any, auth: str):
        """(status, JSON body, extra headers) for one request."""
        self.requests.append((method, path, body))
        if auth != f"Bearer {TOKEN}":
            return _error(401, "AuthenticationFailed", "Authentication failed.")
        if self.deny:
            return _error(403, "AuthorizationFailed", "The client does not have authorization.")
        for pattern, verb, action in self._routes():
            match = re.fullmatch(pattern, path, re.IGNORECASE)
            if match and verb == method:
                if match.groupdict().get("sub", self.subscription) != self.subscription:
                    return _error(404, "SubscriptionNotFound", "The subscription was not found.")
                with self.lock:
                    return action(query=query, body=body, path=path, **match.groupdict())
        return _error(404, "NotFound", f"no route for {method} {path}")

    def _routes(self):
        return (
            (_COMPUTE + r"/skus", "GET", self._skus),
            (_COMPUTE + r"/locations/(?P<loc>[^/]+)/usages", "GET", self._usages),
            (_COMPUTE + r"/locations/(?P<loc>[^/]+)/operations/(?P<op>[^/]+)", "GET", self._op),
            (_VMS, "GET", self._list),
            (_VMS + r"/(?P<vm>[^/]+)", "PUT", self._put),
            (_VMS + r"/(?P<vm>[^/]+)", "GET", self._get),
            (_VMS + r"/(?P<vm>[^/]+)", "DELETE", self._delete),
            (_VMS + r"/(?P<vm>[^/]+)/instanceView", "GET", self._view),
            (_VMS + r"/(?P<vm>[^/]+)", "PATCH", self._patch),
            (_PPGS, "PUT", self._put_group),
            (_PPGS, "GET", self._get_group),
            (_PPGS, "DELETE", self._delete_group),
            (_AVSETS, "PUT", self._put_group),
            (_AVSETS, "GET", self._get_group),
            (_AVSETS, "DELETE", self._delete_group),
            (_NICS, "GET", self._nic),
        )

    def _put_group(self, sub, rg, name, body, path, **_):
        key = path.lower()
        stored = dict(body, id=path, name=name)
        stored["properties"] = dict(body.get("properties") or {})
        self.groups[key] = stored
        self.group_log.append(("create", path))
        return 200, stored, {}

    def _get_group(self, path, name, **_):
        found = self.groups.get(path.lower())
        return (200, found, {}) if found else _error(404, "ResourceNotFound", f"no {name}")

    def _delete_group(self, path, **_):
        if path.lower() not in self.groups:
            return 204, None, {}
        users = [
            vm
            for vm in self.vms.values()
            if any(
                (vm.body["properties"].get(field) or {}).get("id", "").lower() == path.lower()
                for field in ("proximityPlacementGroup", "availabilitySet")
            )
        ]
        if users:
            return _error(409, "OperationNotAllowed", "The resource is in use by a VM.")
        del self.groups[path.lower()]
        self.group_log.append(("delete", path))
        return 200, None, {}

    def _nic(self, path, name, **_):
        address = self.nics.get(path.lower())
        if address is None:
            return _error(404, "ResourceNotFound", f"no network interface {name}")
        config = {"name": "ipconfig", "properties": {"privateIPAddress": address}}
        return 200, {"id": path, "name": name, "properties": {"ipConfigurations": [config]}}, {}

    def _patch(self, rg, vm, body, **_):
        found = self.vms.get(f"{rg}/{vm}".lower())
        if found is None:
            return _missing(vm)
        if "tags" in (body or {}):
            found.body["tags"] = dict(body["tags"])
        return 200, found.json(), {}

    def _skus(self, query, sub, **_):
        wanted = re.fullmatch(r"location eq '([^']+)'", query.get("$filter", ""))
        skus = [
            s
            for s in self.skus
            if not wanted or wanted[1].lower() in map(str.lower, s["locations"])
        ]
        return 200, {"value": skus}, {}

    def _usages(self, loc, **_):
        return 200, {"value": self.usages.get(loc.lower(), [])}, {}

    def _op(self, op, **_):
        if op not in self.operations:
            return _error(404, "NotFound", "no such operation")
        return 200, self.operations[op], {}

    def _list(self, rg, **_):
        vms = [vm.json() for vm in self.vms.values() if vm.group.lower() == rg.lower()]
        return 200, {"value": vms}, {}

    def _get(self, rg, vm, query, **_):
        found = self.vms.get(f"{rg}/{vm}".lower())
        if found is None:
            return _missing(vm)
        return 200, found.json(with_view=query.get("$expand") == "instanceView"), {}

    def _view(self, rg, vm, **_):
        found = self.vms.get(f"{rg}/{vm}".lower())
        return (200, found.view(), {}) if found else _missing(vm)

    def _put(self, sub, rg, vm, body, **_):
        failure = self.create_failure if not self.create_skip else None
        self.create_skip = max(0, self.create_skip - 1)
        if failure is not None and failure.status is not None:
            throttled = {"Retry-After": "1"} if failure.status == 429 else {}
            return _error(failure.status, failure.code, failure.message, throttled)
        missing = _missing_fields(body)
        if missing:
            return _error(400, "InvalidParameter", f"Required parameter '{missing}' is missing.")
        vm_id = f"/subscriptions/{sub}/resourceGroups/{rg}/providers/{VM_TYPE}/{vm}"
        stored = dict(body, id=vm_id, name=vm)
        stored["properties"] = dict(body["properties"], timeCreated=_now())
        nics = []
        for config in body["properties"]["networkProfile"].get(
            "networkInterfaceConfigurations", []
        ):
            nic_id = f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Network"
            nic_id += f"/networkInterfaces/{config['name']}"
            self.nics[nic_id.lower()] = f"10.1.0.{next(self._addresses)}"
            nics.append({"id": nic_id})
        stored["properties"]["networkProfile"] = dict(
            body["properties"]["networkProfile"], networkInterfaces=nics
        )
        record = _Vm(rg, stored)
        status: dict[str, Any] = {"status": "Succeeded"}
        if failure is not None:  # the VM resource stays behind, Failed, as on Azure
            record.provisioning, record.power = "Failed", None
            error = {"code": failure.code, "message": failure.message}
            status = {"status": "Failed", "error": error}
        self.vms[f"{rg}/{vm}".lower()] = record
        reply = record.json()
        reply["properties"]["provisioningState"] = "Creating"
        return 201, reply, self._operation(body.get("location", "eastus"), status)

    def _delete(self, rg, vm, **_):
        if self.vms.pop(f"{rg}/{vm}".lower(), None) is None:
            return 204, None, {}
        return 202, None, self._operation("eastus", {"status": "Succeeded"})

    def _operation(self, location: str, status: dict[str, Any]) -> dict[str, str]:
        op = uuid.uuid4().hex
        self.operations[op] = {"name": op, "startTime": _now(), **status}
        url = f"{self.url}/subscriptions/{self.subscription}/providers/Microsoft.Compute"
        return {"Azure-AsyncOperation": f"{url}/locations/{location}/operations/{op}"}


REQUIRED = (
    ("location",),
    ("properties", "hardwareProfile", "vmSize"),
    ("properties", "storageProfile", "imageReference"),
    ("properties", "osProfile", "adminUsername"),
    ("properties", "networkProfile"),
)


def _missing_fields(body: Any) -> str:
    for path in REQUIRED:
        node = body
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if not node:
            return ".".join(path)
    return ""


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None):
    return status, {"error": {"code": code, "message": message}}, headers or {}


def _missing(vm: str):
    message = f"The Resource 'Microsoft.Compute/virtualMachines/{vm}' was not found."
    return _error(404, "ResourceNotFound", message)


def _handler(fake: FakeArm) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: one TLS handshake per connection

        def setup(self) -> None:
            super().setup()  # headers and body go out in two writes: do not let Nagle wait
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            body = json.loads(raw) if raw else None
            auth = self.headers.get("Authorization", "")
            status, reply, headers = fake.handle(self.command, url.path, query, body, auth)
            data = json.dumps(reply).encode() if reply is not None else b""
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PUT = do_DELETE = do_PATCH = _serve

        def log_message(self, *args: Any) -> None:  # quiet
            pass

    return Handler
