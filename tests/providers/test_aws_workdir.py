"""A job's workdir on AWS, through boto3 and libcloud against moto over loopback: the
adapter uploads the packed archive to the staging prefix, and the user data fetches it
with the instance's own credentials, runs setup, then the command in it."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from pricing.catalog import read_offer_table
from providers.aws import AwsProvider
from providers.base import LaunchRequest
from providers.errors import InvalidRequest
from providers.workdir import pack_workdir
from tests.fakes import aws as fakes
from tests.fakes.offers import write_catalog

moto_server, aws_env, aws_clients = fakes.moto_server, fakes.aws_env, fakes.aws_clients
BUCKET = "broker-staging"
TRAIN = """\
from pathlib import Path
print("data:", Path("data/in.txt").read_text().strip())
print("setup:", Path("setup.log").read_text().strip())
"""


@pytest.fixture
def staged(aws_env, tmp_path, monkeypatch):
    """moto with a staging bucket, the store pointed at it, and a packed workdir."""
    monkeypatch.setenv("BROKER_S3_ENDPOINT", aws_env.endpoint)
    aws_env.client("s3").create_bucket(Bucket=BUCKET)
    folder = tmp_path / "proj"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "in.txt").write_text("fetched from S3\n")
    (folder / "train.py").write_text(TRAIN)
    return pack_workdir(folder, tmp_path / "archives", 10_000_000)


def provider(aws_env, tmp_path, **options) -> AwsProvider:
    return AwsProvider(
        catalog=read_offer_table(write_catalog(tmp_path / "offers.csv")),
        regions=["us-east-1"],
        image_id=aws_env.image_id,
        session=aws_env.session(),
        max_attempts=1,
        sleep=lambda _: None,
        **options,
    )


def request(archive_uri: str) -> LaunchRequest:
    return LaunchRequest(
        attempt_id="a-wd",
        job_id="j-wd",
        cloud="aws",
        region="us-east-1",
        instance_type="g4dn.xlarge",
        workdir_uri=archive_uri,
        setup="echo ready > setup.log",
        command="python3 train.py",
    )


def launch(aws_env, tmp_path, staged):
    aws = provider(aws_env, tmp_path, staging_uri=f"s3://{BUCKET}/workdirs")
    instance = aws.launch(request(staged.uri))
    return aws, instance, aws_env.user_data(instance.id.partition("/")[2])


def test_the_archive_lands_in_s3_and_the_user_data_fetches_it(aws_env, tmp_path, staged):
    aws, instance, user_data = launch(aws_env, tmp_path, staged)
    s3 = aws_env.client("s3")
    key = f"workdirs/{staged.digest}.tar.gz"
    body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    assert hashlib.sha256(body).hexdigest() == staged.digest
    assert f"aws s3 cp --only-show-errors s3://{BUCKET}/{key}" in user_data
    assert staged.digest in user_data and "sha256sum -c" in user_data
    assert user_data.index("sha256sum") < user_data.index("echo ready") < user_data.index("train")
    assert fakes.FAKE_KEY_ID not in user_data and fakes.FAKE_SECRET not in user_data
    assert str(staged.archive) not in user_data  # the VM never sees the controller's paths
    # The same attempt again: the same instance, and the archive is not sent twice.
    assert aws.launch(request(staged.uri)).id == instance.id
    listed = s3.list_objects_v2(Bucket=BUCKET)["Contents"]
    assert [o["Key"] for o in listed] == [key]


def test_the_user_data_runs_the_job_in_the_fetched_workdir(aws_env, tmp_path, staged):
    """The user data, run by /bin/sh as cloud-init would, with the AWS CLI fetching from
    moto on the credentials the instance role would give."""
    from tests.services import need_programs

    need_programs("aws", install="apt-get install awscli: what the AMI runs to fetch it")
    _, _, user_data = launch(aws_env, tmp_path, staged)
    script = tmp_path / "user-data.sh"
    script.write_text(user_data)
    workdir = tmp_path / "vm" / "workdir"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "BROKER_WORKDIR": str(workdir),
        "AWS_ENDPOINT_URL": aws_env.endpoint,
        "AWS_ACCESS_KEY_ID": fakes.FAKE_KEY_ID,  # what IMDS would give the instance
        "AWS_SECRET_ACCESS_KEY": fakes.FAKE_SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }
    done = subprocess.run(
        ["/bin/sh", str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["data: fetched from S3", "setup: ready"]
    assert (workdir / "train.py").exists() and not Path(f"{workdir}.tar.gz").exists()


def test_a_workdir_job_without_a_staging_prefix_is_refused_before_any_launch(
    aws_env, tmp_path, staged
):
    aws = provider(aws_env, tmp_path)
    with pytest.raises(InvalidRequest, match="BROKER_AWS_STAGING_URI"):
        aws.launch(request(staged.uri))
    with pytest.raises(InvalidRequest, match="fetches from s3://"):
        provider(aws_env, tmp_path, staging_uri="gs://elsewhere/").launch(request(staged.uri))
    assert aws.list_instances() == []
