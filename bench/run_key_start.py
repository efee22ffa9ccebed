"""What keeping each run's wrapped key in the run-key store costs a run's start.

A run's start asks the key provider for its data key (one ``generate``: one KMS
``GenerateDataKey``, or the keyring's local wrap) and, since runs are erasable one by one,
writes the wrapped key to the run-key store once (docs/confidentiality.md, "Where the keys
live"). Nothing per event changes. This measures, per run start, the provider call alone
against the provider call plus the store write, for the keyring with a directory store and
(``--endpoint``, e.g. a moto server) for KMS with an S3 store.

Prints one JSON object per configuration: ``generate_us`` and ``generate_and_store_us``
(medians over ``--starts`` run starts).

    .venv/bin/python bench/run_key_start.py [--starts 300] [--endpoint http://127.0.0.1:5000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid

import boto3

from tracevault.config import Settings
from tracevault.content import open_key_store, open_provider


def bench(settings: Settings, starts: int) -> dict[str, float]:
    provider, store = open_provider(settings), open_key_store(settings)
    assert provider is not None
    provider.generate("bench", None, "warm-up")  # the tenant's KEK exists before timing
    alone, stored = [], []
    for _ in range(starts):
        run_id = f"bench-{uuid.uuid4().hex}"
        t0 = time.perf_counter()
        _, wrapped = provider.generate("bench", None, run_id)
        t1 = time.perf_counter()
        store.put(run_id, wrapped)
        t2 = time.perf_counter()
        alone.append((t1 - t0) * 1e6)
        stored.append((t2 - t0) * 1e6)
    return {
        "generate_us": round(statistics.median(alone), 1),
        "generate_and_store_us": round(statistics.median(stored), 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--starts", type=int, default=300, help="run starts measured")
    ap.add_argument("--endpoint", help="a KMS and S3 endpoint (moto) for the kms+s3 figures")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        keyring = Settings(key_provider="keyring", keyring_path=f"{tmp}/keyring.json")
        print(json.dumps({"config": "keyring+directory", **bench(keyring, opts.starts)}))
        if opts.endpoint:
            bucket = f"bench-run-keys-{uuid.uuid4().hex[:8]}"
            boto3.client("s3", endpoint_url=opts.endpoint).create_bucket(Bucket=bucket)
            kms = Settings(
                key_provider="kms",
                kms_endpoint_url=opts.endpoint,
                s3_endpoint_url=opts.endpoint,
                run_key_store=f"s3://{bucket}/keys",
            )
            print(json.dumps({"config": "kms+s3", **bench(kms, opts.starts)}))


if __name__ == "__main__":
    main()
