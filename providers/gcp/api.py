"""The Compute Engine API as the GCP adapter uses it: one object per project holding the
REST clients, every call made with retry=None and a timeout, the SDK's errors mapped
(errors.py) and throttling retried with bounded backoff (providers.cloud.sdk_call).

The provider decides; this module only knows how to ask GCE. google-cloud-compute is
imported when a `Compute` is made or a call runs, never at import time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from providers.cloud import sdk_call
from providers.errors import CredentialsError
from providers.gcp import capacity, errors, operations
from providers.gcp.capacity import CapacityView, region_of
from providers.gcp.vm import NAME, SCOPES, zone_of

T = TypeVar("T")


class Compute:
    """The instances, operations and capacity clients of one project (see the module
    docstring). `timeout` bounds each call; `sleep` paces the throttling backoff."""

    def __init__(
        self,
        credentials: Any,
        project: str,
        endpoint: str | None,
        timeout: float,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        from google.api_core.client_options import ClientOptions
        from google.cloud import compute_v1

        self.project, self.timeout, self._sleep = project, timeout, sleep
        options = ClientOptions(api_endpoint=endpoint) if endpoint else None

        def client(cls: type[T]) -> T:
            return cls(credentials=credentials, transport="rest", client_options=options)

        self._vms = client(compute_v1.InstancesClient)
        self._zone_ops = client(compute_v1.ZoneOperationsClient)
        self._region_ops = client(compute_v1.RegionOperationsClient)
        self._policies = client(compute_v1.ResourcePoliciesClient)
        self._all_ops = client(compute_v1.GlobalOperationsClient)
        self._capacity_clients = {
            "machine_types": client(compute_v1.MachineTypesClient),
            "accelerator_types": client(compute_v1.AcceleratorTypesClient),
            "regions": client(compute_v1.RegionsClient),
        }

    def call(self, fn: Callable[[], T], action: str) -> T:
        """`fn()` with the SDK's errors mapped (errors.py) and throttling retried."""
        return sdk_call(fn, errors.sdk_errors(), errors.from_exception, action, self._sleep)

    # --- instances -----------------------------------------------------------------------

    def get(self, zone: str, name: str) -> Any:
        """The VM `name` in `zone` (a compute_v1.Instance); NotFound when GCE has none."""
        return self.call(
            lambda: self._vms.get(
                project=self.project, zone=zone, instance=name, retry=None, timeout=self.timeout
            ),
            f"get {zone}/{name}",
        )

    def instances(self, expression: str, regions: Sequence[str]) -> list[Any]:
        """The VMs matching a GCE filter expression in `regions` (empty: every region)."""
        from google.cloud import compute_v1

        request = compute_v1.AggregatedListInstancesRequest(project=self.project, filter=expression)

        def read() -> list[Any]:
            pager = self._vms.aggregated_list(request=request, retry=None, timeout=self.timeout)
            return [vm for _, listed in pager for vm in listed.instances]

        vms = self.call(read, "list instances")
        return [vm for vm in vms if not regions or region_of(zone_of(vm)) in regions]

    def insert(self, zone: str, body: dict[str, Any], request_id: str, action: str) -> Any:
        """Start inserting the VM `body` in `zone`: its operation (not waited for)."""
        from google.cloud import compute_v1

        insert = compute_v1.InsertInstanceRequest(
            project=self.project,
            zone=zone,
            instance_resource=compute_v1.Instance(body),
            request_id=request_id,
        )
        return self.call(
            lambda: self._vms.insert_unary(request=insert, retry=None, timeout=self.timeout),
            action,
        )

    def delete(self, zone: str, name: str, request_id: str | None = None) -> Any:
        """Start deleting the VM (accepted, not waited for); `request_id` makes a repeat
        of the same delete one operation."""
        from google.cloud import compute_v1

        delete = compute_v1.DeleteInstanceRequest(project=self.project, zone=zone, instance=name)
        if request_id is not None:
            delete.request_id = request_id
        return self.call(
            lambda: self._vms.delete_unary(request=delete, retry=None, timeout=self.timeout),
            f"delete {zone}/{name}",
        )

    def set_metadata(self, zone: str, name: str, fingerprint: str, items: dict[str, str]) -> Any:
        """Start replacing the VM's metadata items (GCE refuses a stale `fingerprint`)."""
        from google.cloud import compute_v1

        metadata = compute_v1.Metadata(
            fingerprint=fingerprint,
            items=[compute_v1.Items(key=k, value=v) for k, v in items.items()],
        )
        request = compute_v1.SetMetadataInstanceRequest(
            project=self.project, zone=zone, instance=name, metadata_resource=metadata
        )
        return self.call(
            lambda: self._vms.set_metadata_unary(request=request, retry=None, timeout=self.timeout),
            f"set metadata of {zone}/{name}",
        )

    # --- resource policies (a gang's compact placement) ---------------------------------

    def insert_policy(self, region: str, body: dict[str, Any], request_id: str) -> Any:
        """Start inserting the resource policy `body` in `region`: its region operation."""
        from google.cloud import compute_v1

        insert = compute_v1.InsertResourcePolicyRequest(
            project=self.project,
            region=region,
            resource_policy_resource=compute_v1.ResourcePolicy(body),
            request_id=request_id,
        )
        return self.call(
            lambda: self._policies.insert_unary(request=insert, retry=None, timeout=self.timeout),
            f"insert resource policy {region}/{body['name']}",
        )

    def delete_policy(self, region: str, name: str) -> Any:
        """Start deleting a resource policy (GCE refuses while a VM names it)."""
        from google.cloud import compute_v1

        delete = compute_v1.DeleteResourcePolicyRequest(
            project=self.project, region=region, resource_policy=name
        )
        return self.call(
            lambda: self._policies.delete_unary(request=delete, retry=None, timeout=self.timeout),
            f"delete resource policy {region}/{name}",
        )

    def wait_region(self, region: str, operation: Any, action: str, limit: float) -> Any:
        """A region operation once DONE, or as it is after `limit` seconds."""
        return operations.wait(
            self._region_ops, self.project, region, operation, self.call, action, limit, "region"
        )

    # --- operations ------------------------------------------------------------------------

    def wait(self, zone: str, operation: Any, action: str, limit: float) -> Any:
        """`operation` once DONE, or as it is after `limit` seconds."""
        return operations.wait(
            self._zone_ops, self.project, zone, operation, self.call, action, limit
        )

    def preemptions(self) -> dict[str, Any]:
        """ "<zone>/<name>" -> the compute.instances.preempted operation GCE recorded."""
        return operations.preemptions(self._all_ops, self.project, self.call, self.timeout)

    def history(self, zone: str, name: str) -> set[str]:
        """The kinds of the operations GCE recorded on one VM (insert, delete, preempted)."""
        return operations.history(self._zone_ops, self.project, zone, name, self.call, self.timeout)

    # --- capacity --------------------------------------------------------------------------

    def capacity(
        self, types: set[str], gpus: set[str], regions: Sequence[str], quotas: bool
    ) -> CapacityView:
        """The zones that sell `types` and `gpus` in `regions`, and the regions' quotas
        (unless `quotas` is False): capacity.fetch through these clients."""
        return capacity.fetch(
            self._capacity_clients,
            self.project,
            regions,
            types,
            gpus,
            self.call,
            self.timeout,
            quotas=quotas,
        )


def credentials_and_project(credentials: Any, project: str | None) -> tuple[Any, str]:
    """The credentials and project to use: the ones given, else GOOGLE_CLOUD_PROJECT or
    CLOUDSDK_CORE_PROJECT, else what google.auth.default() finds; CredentialsError
    without a project."""
    project = (
        project or os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("CLOUDSDK_CORE_PROJECT")
    )
    if credentials is None or not project:
        import google.auth
        import google.auth.exceptions

        try:
            found, default_project = google.auth.default(scopes=list(SCOPES))
        except google.auth.exceptions.DefaultCredentialsError as exc:
            raise errors.from_exception(exc, "find Google credentials") from None
        credentials, project = credentials or found, project or default_project
    if not project:
        raise CredentialsError(NAME, "no GCP project: set GOOGLE_CLOUD_PROJECT or pass project=")
    return credentials, project
