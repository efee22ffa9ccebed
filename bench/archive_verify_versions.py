"""What `replay verify --from archive` asks S3 about versions as the partition's log grows.

One partition log on moto's S3 server (over HTTP, Object Lock on): ``--others`` small runs
(2 events each), each archived in its own flush as a busy archiver with idle runs would,
half before and half after the measured run. Then one verify of the measured run, with a
boto3 event hook counting what the store sends: ListObjectVersions requests, the versions
and delete markers they return, the GETs, and the wall time. The baseline is the same verify
of a run in a log with ``--baseline-others`` other runs, in the same process.

Version listings of the objects a run reads must not grow with the other runs; the time on
moto is no guide to S3 (moto copies every version of the bucket on each version listing).

    .venv/bin/python bench/archive_verify_versions.py [--others 2000] [--baseline-others 10]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import boto3

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.services.archiver.sealed_factory import s3_log_among_others
from tracevault.archive._s3store import S3Store
from tracevault.replayer.load.archive import load_from_archive
from tracevault.replayer.load.verify import verify


class Wire:
    def __init__(self) -> None:
        self.version_requests = 0
        self.versions_listed = 0
        self.gets = 0

    def params(self, model: Any, **_: Any) -> None:
        if model.name == "ListObjectVersions":
            self.version_requests += 1
        elif model.name == "GetObject":
            self.gets += 1

    def parsed(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name == "ListObjectVersions":
            self.versions_listed += len(parsed.get("Versions", []))
            self.versions_listed += len(parsed.get("DeleteMarkers", []))


def measure(endpoint: str, others: int) -> dict[str, Any]:
    bucket, signer = s3_log_among_others(endpoint, "measured", 20, others)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    objects = sum(
        len(page.get("Versions", []))
        for page in client.get_paginator("list_object_versions").paginate(
            Bucket=bucket, Prefix="archive/log/"
        )
    )
    wire = Wire()
    counted = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    counted.meta.events.register("provide-client-params.s3.*", wire.params)
    counted.meta.events.register("after-call.s3.*", wire.parsed)
    store = S3Store(bucket, "archive", client=counted)
    t0 = time.perf_counter()
    report = verify(load_from_archive(store, "measured"), keys=[signer.verifier])
    seconds = time.perf_counter() - t0
    assert report.finished and report.count == 20
    return {
        "other_runs": others,
        "log_object_versions": objects,
        "list_object_versions_requests": wire.version_requests,
        "versions_listed": wire.versions_listed,
        "get_requests": wire.gets,
        "verify_s_on_moto": round(seconds, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--others", type=int, default=2000)
    ap.add_argument("--baseline-others", type=int, default=10)
    args = ap.parse_args()
    from moto.server import ThreadedMotoServer

    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(k, "testing")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        base = measure(endpoint, args.baseline_others)
        print(json.dumps({"mode": "baseline", **base}))
        big = measure(endpoint, args.others)
        print(json.dumps({"mode": "long_log", **big}))
    finally:
        server.stop()
    print(
        json.dumps(
            {
                "baseline_other_runs": base["other_runs"],
                "other_runs": big["other_runs"],
                "log_object_versions": big["log_object_versions"],
                "version_requests": [
                    base["list_object_versions_requests"],
                    big["list_object_versions_requests"],
                ],
                "versions_listed": [base["versions_listed"], big["versions_listed"]],
                "versions_listed_ratio": round(big["versions_listed"] / base["versions_listed"], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
