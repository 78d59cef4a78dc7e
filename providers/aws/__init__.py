"""The AWS (EC2) adapter; needs the `aws` extra (boto3)."""

from providers.aws.provider import AwsProvider

__all__ = ["AwsProvider"]
