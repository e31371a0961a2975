"""A real S3-compatible server on 127.0.0.1 (port 0) for the tests of artifacts and
repositories in S3: moto's server mode (`moto[server]`, a dev extra), started in this process
on its own thread. `s3_serving(directory, bucket, prefix)` creates the bucket, uploads every
file of `directory` under `prefix` and yields the URL, the environment a reader needs (the
endpoint override AWS_ENDPOINT_URL_S3, a region and test credentials) and a boto3 client (to
tamper with an object). Imported by tests/artifact and tests/bridge/test_repository_s3.py
under this unique name.

moto answers an unsigned (credential-less) GET of an object with 403, as a private bucket does,
and a missing bucket with NoSuchBucket: the two one-line errors the readers give.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Every variable that says where AWS credentials, region or endpoint come from: a test clears
#: them all, so the machine's AWS setup cannot leak in, then sets what it means.
AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
            "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
            "JAXPORT_S3_CREDENTIALS", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE")

#: What a reader of the bucket needs besides the endpoint (moto takes any key pair).
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "jaxport-test", "AWS_SECRET_ACCESS_KEY": "jaxport-test",
               "AWS_REGION": "us-east-1"}


@dataclass
class S3Served:
    """A running server: `url` (`s3://bucket/prefix`), `endpoint` (http://127.0.0.1:PORT),
    `env` for a reader (endpoint, region, credentials), `client` (boto3, for the test)."""

    url: str
    endpoint: str
    env: dict[str, str]
    client: Any
    bucket: str

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)


@contextlib.contextmanager
def s3_serving(directory: Path, bucket: str = "models", prefix: str = "repo"
               ) -> Iterator[S3Served]:
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id="jaxport-test",
                              aws_secret_access_key="jaxport-test")
        client.create_bucket(Bucket=bucket)
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            key = f"{prefix}/{path.relative_to(directory).as_posix()}"
            client.upload_file(str(path), bucket, key)
        yield S3Served(url=f"s3://{bucket}/{prefix}", endpoint=endpoint,
                       env={"AWS_ENDPOINT_URL_S3": endpoint, **CREDENTIALS}, client=client,
                       bucket=bucket)
    finally:
        server.stop()
