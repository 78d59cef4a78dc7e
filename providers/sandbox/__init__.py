"""The local sandbox provider: the embedded default, no cloud account needed."""

from providers.sandbox.provider import SandboxProvider

__all__ = ["SandboxProvider"]
