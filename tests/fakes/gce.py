"""A loopback Compute Engine REST API for the GCP adapter's tests (real SDK, real HTTP).

It speaks the JSON google-cloud-compute's REST transport sends and parses (see the GCE
section of offline-cloud-testing.md): zones, machine and accelerator types (per zone and
aggregated), regions with quotas, instances and zone operations, with the filters the
adapter uses (`field = "v"`, `field eq "regex"`, `labels.key = "v"`, terms joined by AND
or side by side in parentheses; anything else is a 400, so the adapter cannot lean on
syntax the fake does not check). An insert answers with a RUNNING operation that is DONE
once read, as GCE's are a moment later; a requestId seen before returns its operation.

Gangs: regional resource policies (insert, get, delete: refused while an instance
names it) with region operations, `setMetadata` (the fingerprint must match), and a
private `networkIP` on every network interface of an inserted instance.

Levers: `fail_inserts` (an operation error such as ZONE_RESOURCE_POOL_EXHAUSTED, or an
HTTP error such as 429; `after` lets that many inserts succeed first),
`lose_insert_responses` (the insert happens, the client sees a 503), `fail_all` (every
API call answers an HTTP error), `preempt`.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

# name -> (vCPUs, memory MB, built-in GPUs)
MACHINE_TYPES: dict[str, tuple[int, int, tuple[tuple[str, int], ...]]] = {
    "n1-standard-8": (8, 30720, ()),
    "a2-highgpu-1g": (12, 87040, (("nvidia-tesla-a100", 1),)),
    "a2-highgpu-8g": (96, 696320, (("nvidia-tesla-a100", 8),)),
    "g2-standard-8": (8, 32768, (("nvidia-l4", 1),)),
}
# zone -> (machine types offered, accelerator types offered)
OFFERED: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "us-central1-a": (
        tuple(MACHINE_TYPES),
        ("nvidia-tesla-v100", "nvidia-tesla-a100", "nvidia-l4"),
    ),
    "us-central1-b": (("n1-standard-8", "a2-highgpu-1g"), ("nvidia-tesla-t4", "nvidia-tesla-a100")),
    "europe-west4-a": (("n1-standard-8", "a2-highgpu-1g"), ("nvidia-tesla-v100",)),
}
# region -> metric -> (limit, usage)
QUOTAS: dict[str, dict[str, tuple[float, float]]] = {
    region: {
        "CPUS": (2400.0, 0.0),
        "PREEMPTIBLE_CPUS": (2400.0, 0.0),
        "NVIDIA_A100_GPUS": (16.0, 0.0),
        "PREEMPTIBLE_NVIDIA_A100_GPUS": (16.0, 0.0),
        "NVIDIA_V100_GPUS": (8.0, 0.0),
        "NVIDIA_L4_GPUS": (8.0, 0.0),
        "INSTANCES": (1000.0, 0.0),
    }
    for region in ("us-central1", "europe-west4")
}
# lever -> (HTTP status, RPC status, reason, message); the 401 quotes a token, as some do
HTTP_FAILURES: dict[str, tuple[int, str, str, str]] = {
    "429": (429, "RESOURCE_EXHAUSTED", "rateLimitExceeded", "Rate Limit Exceeded"),
    "401": (401, "UNAUTHENTICATED", "authError", "Invalid Credentials: Bearer ya29.Secret-T0ken"),
    "403": (403, "PERMISSION_DENIED", "forbidden", "Required 'compute.instances.create'"),
    "400": (400, "INVALID_ARGUMENT", "invalid", "Invalid value for field 'resource.machineType'"),
    "503": (503, "UNAVAILABLE", "backendError", "Internal error. Please try again."),
}
# operation error code -> (HTTP status the operation reports, message)
OPERATION_FAILURES: dict[str, tuple[int, str]] = {
    "ZONE_RESOURCE_POOL_EXHAUSTED": (503, "The zone does not have enough resources available."),
    "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS": (503, "A VM is currently unavailable here."),
    "QUOTA_EXCEEDED": (403, "Quota 'NVIDIA_A100_GPUS' exceeded. Limit: 0.0 in region."),
}
PREEMPTED = "compute.instances.preempted"
_TERM = re.compile(r"""\(?\s*([A-Za-z][\w.-]*)\s*(!=|=|\beq\b|\bne\b)\s*("[^"]*"|[^\s()]+)\s*\)?""")


class HttpFailure(Exception):
    """An error answer: (HTTP status, RPC status, reason, message)."""

    def body(self) -> dict:
        status, rpc, reason, message = self.args
        errors = [{"reason": reason, "message": message, "domain": "global"}]
        return {"error": {"code": status, "message": message, "status": rpc, "errors": errors}}


def _missing(what: str) -> HttpFailure:
    return HttpFailure(404, "NOT_FOUND", "notFound", f"The resource '{what}' was not found")


def matches(resource: Mapping, expression: str) -> bool:
    """Whether `resource` passes a GCE list filter (the subset described above)."""
    if expression and re.sub(r"\bAND\b", "", _TERM.sub("", expression)).strip():
        raise HttpFailure(400, "INVALID_ARGUMENT", "invalid", f"Invalid filter: {expression}")
    for field, op, literal in _TERM.findall(expression or ""):
        value: object = resource
        for part in field.split(".", 1) if field.startswith("labels.") else field.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        text, wanted = "" if value is None else str(value), literal.strip('"')
        equal = re.fullmatch(wanted, text) is not None if op in ("eq", "ne") else text == wanted
        if equal != (op in ("=", "eq")):
            return False
    return True


class FakeGce:
    """The fake service; `url` is the endpoint the adapter takes. Call `close()` at the end."""

    def __init__(self, project: str = "broker-test", offered=OFFERED, quotas=QUOTAS) -> None:
        self.project = project
        self.offered = {zone: (tuple(m), tuple(a)) for zone, (m, a) in offered.items()}
        self.quotas = {region: dict(metrics) for region, metrics in quotas.items()}
        self.instances: dict[tuple[str, str], dict] = {}  # (zone, name) -> instance
        self.operations: dict[str, dict] = {}
        self.request_ids: dict[str, str] = {}  # requestId -> operation name
        self.calls: list[tuple[str, str, dict[str, str]]] = []  # method, path, query
        self.inserts: list[dict] = []  # bodies of the inserts that made an instance
        self.policies: dict[tuple[str, str], dict] = {}  # (region, name) -> resource policy
        self.policy_log: list[tuple[str, str]] = []  # ("insert" | "delete", name)
        self.region_operations: dict[str, dict] = {}
        self.metadata_sets: list[tuple[str, dict]] = []  # (instance name, items by key)
        self._insert_skip = 0
        self._addresses = itertools.count(2)
        self.page_size = 500
        self.fail_all: str | None = None  # a key of HTTP_FAILURES: every API call fails
        self._insert_failure: tuple[str, int | None] | None = None
        self._lost_responses = 0
        self._ids = itertools.count(1000)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        serve = lambda: self._server.serve_forever(poll_interval=0.01)  # noqa: E731 (fast close)
        threading.Thread(target=serve, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- levers --------------------------------------------------------------------

    def fail_inserts(self, failure: str | None, times: int | None = None, after: int = 0) -> None:
        """Fail the next `times` inserts (None: every one until cleared) with a key of
        HTTP_FAILURES or OPERATION_FAILURES, once `after` more inserts have succeeded;
        `failure` None clears."""
        assert failure is None or failure in HTTP_FAILURES or failure in OPERATION_FAILURES
        self._insert_failure = None if failure is None else (failure, times)
        self._insert_skip = after

    def lose_insert_responses(self, times: int = 1) -> None:
        """The next inserts take effect, but the client gets a 503 (a lost response)."""
        self._lost_responses = times

    def preempt(self, zone: str, name: str) -> None:
        """Reclaim a spot instance as GCE does: its termination action (DELETE removes it,
        STOP leaves it TERMINATED), and a compute.instances.preempted operation."""
        with self._lock:
            instance = self.instances[(zone, name)]
            if instance.get("scheduling", {}).get("instanceTerminationAction") == "DELETE":
                del self.instances[(zone, name)]
            else:
                instance["status"] = "TERMINATED"
            message = "Instance was preempted."
            self._operation(zone, PREEMPTED, instance, "DONE", statusMessage=message)

    def link(self, *parts: str) -> str:
        return "/".join((self.url, "compute/v1/projects", self.project, *parts))

    # --- the API -------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, str], body: dict) -> dict:
        self.calls.append((method, path, query))
        if self.fail_all:
            raise HttpFailure(*HTTP_FAILURES[self.fail_all])
        route = path.removeprefix(f"/compute/v1/projects/{self.project}/")
        for verb, pattern, action in _ROUTES:
            found = re.fullmatch(pattern, route)
            if found and verb == method:
                with self._lock:
                    return action(self, query, body, *found.groups())
        raise _missing(path)

    def _zones(self, query, body):
        items = [{"name": z, "region": self.link("regions", z[:-2]), "status": "UP"}
                 for z in sorted(self.offered)]  # fmt: skip
        return self._page("compute#zoneList", items, query)

    def _machine_types(self, query, body, zone=None):
        pairs = [(z, _machine_type(name, z)) for z in self._zones_of(zone)
                 for name in self.offered[z][0]]  # fmt: skip
        return self._listing("machineTypes", pairs, query, aggregated=zone is None)

    def _accelerator_types(self, query, body, zone=None):
        pairs = [(z, {"name": name, "zone": z, "maximumCardsPerInstance": 8})
                 for z in self._zones_of(zone) for name in self.offered[z][1]]  # fmt: skip
        return self._listing("acceleratorTypes", pairs, query, aggregated=zone is None)

    def _region(self, query, body, region):
        if region not in self.quotas:
            raise _missing(f"projects/{self.project}/regions/{region}")
        quotas = [{"metric": m, "limit": limit, "usage": usage}
                  for m, (limit, usage) in sorted(self.quotas[region].items())]  # fmt: skip
        return {"kind": "compute#region", "name": region, "status": "UP", "quotas": quotas}

    def _insert(self, query, body, zone):
        failing = self._insert_failure if not self._insert_skip else None
        self._insert_skip = max(0, self._insert_skip - 1)
        if failing and failing[0] in HTTP_FAILURES:
            raise HttpFailure(*HTTP_FAILURES[self._use_failure()])
        request_id, name = query.get("requestId"), body["name"]
        if request_id in self.request_ids:
            return self._lose_maybe(self.operations[self.request_ids[request_id]])
        if (zone, name) in self.instances:
            what = f"projects/{self.project}/zones/{zone}/instances/{name}"
            raise HttpFailure(409, "ALREADY_EXISTS", "alreadyExists", f"'{what}' already exists")
        instance = {**body, "kind": "compute#instance", "id": str(next(self._ids)),
                    "zone": self.link("zones", zone), "status": "PROVISIONING",
                    "creationTimestamp": _now(),
                    "selfLink": self.link("zones", zone, "instances", name)}  # fmt: skip
        instance["metadata"] = {**body.get("metadata", {}), "fingerprint": _fingerprint()}
        instance["networkInterfaces"] = [
            {**nic, "networkIP": f"10.128.{index}.{next(self._addresses)}"}
            for index, nic in enumerate(body.get("networkInterfaces", []))
        ]
        operation = self._operation(zone, "insert", instance, "RUNNING")
        if failing:  # an operation error: the operation fails, no instance
            operation["_error"] = self._use_failure()
        else:
            self.instances[(zone, name)] = instance
            self.inserts.append(body)
        if request_id:
            self.request_ids[request_id] = operation["name"]
        return self._lose_maybe(operation)

    def _instances(self, query, body, zone=None):
        pairs = [(z, i) for (z, _), i in sorted(self.instances.items()) if zone in (None, z)]
        return self._listing("instances", pairs, query, aggregated=zone is None)

    def _instance(self, query, body, zone, name):
        if (zone, name) not in self.instances:
            raise _missing(f"projects/{self.project}/zones/{zone}/instances/{name}")
        return self.instances[(zone, name)]

    def _delete(self, query, body, zone, name):
        request_id = query.get("requestId")
        if request_id in self.request_ids:
            return self.operations[self.request_ids[request_id]]
        instance = self._instance(query, body, zone, name)
        del self.instances[(zone, name)]
        operation = self._operation(zone, "delete", instance, "DONE")
        if request_id:
            self.request_ids[request_id] = operation["name"]
        return operation

    def _set_metadata(self, query, body, zone, name):
        instance = self._instance(query, body, zone, name)
        if body.get("fingerprint") != instance["metadata"].get("fingerprint"):
            raise HttpFailure(412, "FAILED_PRECONDITION", "conditionNotMet", "Fingerprint stale")
        instance["metadata"] = {"items": body.get("items", []), "fingerprint": _fingerprint()}
        self.metadata_sets.append((name, {i["key"]: i["value"] for i in body.get("items", [])}))
        return self._operation(zone, "setMetadata", instance, "DONE")

    def _insert_policy(self, query, body, region):
        name = body["name"]
        if (region, name) in self.policies:
            what = f"projects/{self.project}/regions/{region}/resourcePolicies/{name}"
            raise HttpFailure(409, "ALREADY_EXISTS", "alreadyExists", f"'{what}' already exists")
        link = self.link("regions", region, "resourcePolicies", name)
        self.policies[(region, name)] = {**body, "region": region, "selfLink": link,
                                         "status": "READY"}  # fmt: skip
        self.policy_log.append(("insert", name))
        return self._region_operation(region, "insert", link)

    def _policy(self, query, body, region, name):
        if (region, name) not in self.policies:
            raise _missing(f"projects/{self.project}/regions/{region}/resourcePolicies/{name}")
        return self.policies[(region, name)]

    def _delete_policy(self, query, body, region, name):
        policy = self._policy(query, body, region, name)
        users = [
            i["name"]
            for i in self.instances.values()
            if any(p.rsplit("/", 1)[-1] == name for p in i.get("resourcePolicies", []))
        ]
        if users:
            message = f"The resource_policy resource '{name}' is already being used by {users[0]}"
            raise HttpFailure(400, "FAILED_PRECONDITION", "resourceInUseByAnotherResource", message)
        del self.policies[(region, name)]
        self.policy_log.append(("delete", name))
        return self._region_operation(region, "delete", policy["selfLink"])

    def _get_region_operation(self, query, body, region, name):
        operation = self.region_operations.get(name)
        if operation is None or operation["_region"] != region:
            raise _missing(f"projects/{self.project}/regions/{region}/operations/{name}")
        operation.update(status="DONE", progress=100)
        return operation

    def _region_operation(self, region: str, kind: str, target: str) -> dict:
        name = f"operation-{next(self._ids)}"
        operation = {"kind": "compute#operation", "id": name[10:], "name": name,
                     "region": self.link("regions", region), "operationType": kind,
                     "status": "RUNNING", "targetLink": target, "_region": region,
                     "selfLink": self.link("regions", region, "operations", name),
                     "insertTime": _now()}  # fmt: skip
        self.region_operations[name] = operation
        return operation

    def _operations(self, query, body, zone=None):
        pairs = [(op["_zone"], self._finish(op)) for op in self.operations.values()
                 if zone in (None, op["_zone"])]  # fmt: skip
        return self._listing("operations", pairs, query, aggregated=zone is None)

    def _get_operation(self, query, body, zone, name):
        operation = self.operations.get(name)
        if operation is None or operation["_zone"] != zone:
            raise _missing(f"projects/{self.project}/zones/{zone}/operations/{name}")
        return self._finish(operation)

    # --- helpers -------------------------------------------------------------------

    def _zones_of(self, zone: str | None) -> list[str]:
        return sorted(self.offered) if zone is None else [zone] if zone in self.offered else []

    def _use_failure(self) -> str:
        assert self._insert_failure is not None
        failure, times = self._insert_failure
        if times is not None:
            self._insert_failure = (failure, times - 1) if times > 1 else None
        return failure

    def _lose_maybe(self, operation: dict) -> dict:
        if self._lost_responses:
            self._lost_responses -= 1
            raise HttpFailure(*HTTP_FAILURES["503"])
        return operation

    def _operation(self, zone: str, kind: str, instance: dict, status: str, **fields) -> dict:
        name = f"operation-{next(self._ids)}"
        operation = {"kind": "compute#operation", "id": name[10:], "name": name,
                     "zone": self.link("zones", zone), "operationType": kind, "status": status,
                     "targetLink": instance["selfLink"], "targetId": instance["id"],
                     "selfLink": self.link("zones", zone, "operations", name), "_zone": zone,
                     "insertTime": _now(), **fields}  # fmt: skip
        self.operations[name] = operation
        return operation

    def _finish(self, operation: dict) -> dict:
        """Complete a RUNNING operation (the first read of it finds it DONE)."""
        if operation["status"] != "DONE":
            operation.update(status="DONE", progress=100)
            failure = operation.pop("_error", None)
            if failure:
                status, message = OPERATION_FAILURES[failure]
                errors = [{"code": failure, "message": message}]
                operation.update(httpErrorStatusCode=status, error={"errors": errors})
            elif operation["operationType"] == "insert":
                name = operation["targetLink"].rsplit("/", 1)[1]
                if (operation["_zone"], name) in self.instances:
                    self.instances[(operation["_zone"], name)]["status"] = "RUNNING"
        return operation

    def _page(self, kind: str, items: list[dict], query: dict[str, str]) -> dict:
        items = [item for item in items if matches(item, query.get("filter", ""))]
        start = int(query.get("pageToken") or 0)
        size = int(query.get("maxResults") or self.page_size)
        page = {"kind": kind, "items": items[start : start + size]}
        if start + size < len(items):
            page["nextPageToken"] = str(start + size)
        return page

    def _listing(self, key: str, pairs: list[tuple[str, dict]], query, aggregated: bool) -> dict:
        """A zone's list, or the aggregated list (items grouped by "zones/Z", paged)."""
        if not aggregated:
            return self._page(f"compute#{key}List", [item for _, item in pairs], query)
        page = self._page(
            f"compute#{key}AggregatedList", [{"_in": z, **i} for z, i in pairs], query
        )
        empty = {"warning": {"code": "NO_RESULTS_ON_PAGE", "message": "no results"}}
        grouped: dict[str, dict] = {f"zones/{zone}": dict(empty) for zone in sorted(self.offered)}
        for item in page["items"]:
            scope = grouped.setdefault(f"zones/{item['_in']}", {})
            scope.pop("warning", None)
            scope.setdefault(key, []).append(item)
        return {**page, "items": grouped}


def _fingerprint() -> str:
    import base64
    import os

    return base64.b64encode(os.urandom(8)).decode()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _public(value):
    """`value` without the fake's bookkeeping (keys starting with "_")."""
    if isinstance(value, dict):
        return {k: _public(v) for k, v in value.items() if not k.startswith("_")}
    return [_public(v) for v in value] if isinstance(value, list) else value


def _machine_type(name: str, zone: str) -> dict:
    cpus, memory, gpus = MACHINE_TYPES[name]
    accelerators = [{"guestAcceleratorType": t, "guestAcceleratorCount": n} for t, n in gpus]
    return {"name": name, "zone": zone, "guestCpus": cpus, "memoryMb": memory,
            "accelerators": accelerators}  # fmt: skip


_ROUTES = (
    ("GET", r"zones", FakeGce._zones),
    ("GET", r"aggregated/machineTypes", FakeGce._machine_types),
    ("GET", r"zones/([^/]+)/machineTypes", FakeGce._machine_types),
    ("GET", r"aggregated/acceleratorTypes", FakeGce._accelerator_types),
    ("GET", r"zones/([^/]+)/acceleratorTypes", FakeGce._accelerator_types),
    ("GET", r"regions/([^/]+)", FakeGce._region),
    ("POST", r"zones/([^/]+)/instances", FakeGce._insert),
    ("GET", r"zones/([^/]+)/instances", FakeGce._instances),
    ("GET", r"aggregated/instances", FakeGce._instances),
    ("GET", r"zones/([^/]+)/instances/([^/]+)", FakeGce._instance),
    ("DELETE", r"zones/([^/]+)/instances/([^/]+)", FakeGce._delete),
    ("GET", r"zones/([^/]+)/operations", FakeGce._operations),
    ("GET", r"aggregated/operations", FakeGce._operations),
    ("GET", r"zones/([^/]+)/operations/([^/]+)", FakeGce._get_operation),
    ("POST", r"zones/([^/]+)/operations/([^/]+)/wait", FakeGce._get_operation),
    ("POST", r"zones/([^/]+)/instances/([^/]+)/setMetadata", FakeGce._set_metadata),
    ("POST", r"regions/([^/]+)/resourcePolicies", FakeGce._insert_policy),
    ("GET", r"regions/([^/]+)/resourcePolicies/([^/]+)", FakeGce._policy),
    ("DELETE", r"regions/([^/]+)/resourcePolicies/([^/]+)", FakeGce._delete_policy),
    ("GET", r"regions/([^/]+)/operations/([^/]+)", FakeGce._get_region_operation),
    ("POST", r"regions/([^/]+)/operations/([^/]+)/wait", FakeGce._get_region_operation),
)


def _handler(fake: FakeGce) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            url = urlsplit(self.path)
            query = {key: values[-1] for key, values in parse_qs(url.query).items()}
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, reply = 200, {}
            try:
                if url.path == "/token":  # an OAuth token endpoint, for check()'s tests
                    reply = {
                        "access_token": "ya29.fake",
                        "expires_in": 3600,
                        "token_type": "Bearer",
                    }
                else:
                    body = json.loads(data) if data else {}
                    reply = _public(fake.handle(self.command, url.path, query, body))
            except HttpFailure as failure:
                status, reply = failure.args[0], failure.body()
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _serve

        def log_message(self, format: str, *args) -> None:  # quiet
            pass

    return Handler
