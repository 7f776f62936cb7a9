#!/usr/bin/env python3
"""Checks, with boto3, the moto behaviours macp-aws relies on (DynamoDB, S3, S3 Vectors).

Usage:
    python tests/aws/verify_moto.py                  # starts tests/aws/moto_macp.py itself
    python tests/aws/verify_moto.py --endpoint http://127.0.0.1:PORT   # use a running one
    python tests/aws/verify_moto.py --show-raw       # also print the raw HTTP JSON bodies

The server's state is reset (POST /moto-api/reset) before the checks, and the last check
resets it again. Prints PASS/FAIL per check, NOTE lines for moto quirks that are observed
but not required, and a closing line `N passed, N failed`. Exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
import traceback
import urllib.parse
from collections.abc import Callable
from typing import Any

import boto3
import requests
from botocore.config import Config
from botocore.exceptions import ClientError

HERE = os.path.dirname(os.path.abspath(__file__))
REGION = "us-east-1"

CHECKS: list[tuple[str, Callable[[Ctx], None]]] = []


def check(fn: Callable[[Ctx], None]) -> Callable[[Ctx], None]:
    CHECKS.append((fn.__name__, fn))
    return fn


class CheckFailed(AssertionError):
    pass


def expect(cond: Any, msg: str) -> None:
    if not cond:
        raise CheckFailed(msg)


def expect_eq(actual: Any, expected: Any, what: str) -> None:
    if actual != expected:
        raise CheckFailed(f"{what}: expected {expected!r}, got {actual!r}")


class Ctx:
    def __init__(self, endpoint: str, show_raw: bool) -> None:
        self.endpoint = endpoint
        self.show_raw = show_raw
        self.notes: list[str] = []
        self.raw: dict[str, tuple[int, Any]] = {}
        cfg = Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}, signature_version="s3v4")
        kw = dict(
            endpoint_url=endpoint,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            config=cfg,
        )
        self.ddb = boto3.client("dynamodb", **kw)
        self.s3 = boto3.client("s3", **kw)
        self.s3v = boto3.client("s3vectors", **kw)
        # Like the Rust SDK, sends list lengths and ranges unchecked (boto3 validates them itself).
        unchecked = Config(retries={"max_attempts": 1}, parameter_validation=False)
        self.s3v_unchecked = boto3.client("s3vectors", **{**kw, "config": unchecked})
        for client in (self.ddb, self.s3, self.s3v, self.s3v_unchecked):
            client.meta.events.register("after-call.*", self._capture)

    def _capture(self, http_response: Any, model: Any, **_: Any) -> None:
        if model.has_streaming_output and http_response.status_code < 300:
            return  # reading .content here would consume the body the caller is about to read
        body: Any = http_response.content
        try:
            body = json.loads(body) if body else None
        except ValueError:
            body = body[:300]
        self.raw[model.name] = (http_response.status_code, body)

    def last_raw(self, op: str) -> tuple[int, Any]:
        return self.raw[op]

    def show(self, label: str, op: str) -> None:
        status, body = self.raw[op]
        if self.show_raw:
            print(f"  RAW {label}: HTTP {status} {json.dumps(body, sort_keys=False)}")

    def note(self, msg: str) -> None:
        self.notes.append(msg)
        print(f"  NOTE {msg}")

    def reset(self) -> None:
        r = requests.post(f"{self.endpoint}/moto-api/reset", timeout=10)
        r.raise_for_status()


def client_error(fn: Callable[[], Any]) -> ClientError:
    try:
        fn()
    except ClientError as e:
        return e
    raise CheckFailed("expected a ClientError, the call succeeded")


# =========================================================================== DynamoDB

TABLE = "macp-verify"


def S(v: str) -> dict[str, str]:
    return {"S": v}


def N(v: int | str) -> dict[str, str]:
    return {"N": str(v)}


def key(pk: str, sk: str) -> dict[str, Any]:
    return {"pk": S(pk), "sk": S(sk)}


@check
def ddb_create_table_lsi_gsi_pay_per_request(c: Ctx) -> None:
    c.ddb.create_table(
        TableName=TABLE,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("pk", "sk", "lsk", "gpk", "gsk")],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        LocalSecondaryIndexes=[
            {
                "IndexName": "lsi1",
                "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "lsk", "KeyType": "RANGE"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "gsi1",
                "KeySchema": [{"AttributeName": "gpk", "KeyType": "HASH"}, {"AttributeName": "gsk", "KeyType": "RANGE"}],
                "Projection": {"ProjectionType": "ALL"},
            },
            {
                "IndexName": "gsi2",
                "KeySchema": [{"AttributeName": "gpk", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["v"]},
            },
        ],
    )
    c.ddb.get_waiter("table_exists").wait(TableName=TABLE, WaiterConfig={"Delay": 1, "MaxAttempts": 10})
    t = c.ddb.describe_table(TableName=TABLE)["Table"]
    expect_eq(t["TableStatus"], "ACTIVE", "TableStatus")
    expect_eq(t.get("BillingModeSummary", {}).get("BillingMode"), "PAY_PER_REQUEST", "BillingMode")
    expect_eq([i["IndexName"] for i in t["LocalSecondaryIndexes"]], ["lsi1"], "LSIs")
    expect_eq(sorted(i["IndexName"] for i in t["GlobalSecondaryIndexes"]), ["gsi1", "gsi2"], "GSIs")
    for g in t["GlobalSecondaryIndexes"]:
        expect_eq(g.get("IndexStatus"), "ACTIVE", f"{g['IndexName']} IndexStatus")


@check
def ddb_put_attribute_not_exists(c: Ctx) -> None:
    item = {**key("p1", "a"), "v": N(1), "lsk": S("3"), "gpk": S("g1"), "gsk": S("x")}
    c.ddb.put_item(TableName=TABLE, Item=item, ConditionExpression="attribute_not_exists(pk)")
    e = client_error(
        lambda: c.ddb.put_item(
            TableName=TABLE, Item={**key("p1", "a"), "v": N(2)}, ConditionExpression="attribute_not_exists(pk)"
        )
    )
    expect_eq(e.response["Error"]["Code"], "ConditionalCheckFailedException", "error code")
    expect_eq(e.response["Error"]["Message"], "The conditional request failed", "error message")
    status, body = c.last_raw("PutItem")
    c.show("PutItem ConditionalCheckFailed", "PutItem")
    expect_eq(status, 400, "HTTP status")
    expect_eq(
        body,
        {
            "__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
            "message": "The conditional request failed",
        },
        "raw body",
    )
    expect_eq(e.response["ResponseMetadata"]["HTTPHeaders"].get("x-amzn-errortype"),
              "ConditionalCheckFailedException", "X-Amzn-ErrorType header")
    got = c.ddb.get_item(TableName=TABLE, Key=key("p1", "a"), ConsistentRead=True)["Item"]
    expect_eq(got["v"], N(1), "item unchanged after failed put")


@check
def ddb_put_condition_failure_return_all_old(c: Ctx) -> None:
    e = client_error(
        lambda: c.ddb.put_item(
            TableName=TABLE,
            Item={**key("p1", "a"), "v": N(2)},
            ConditionExpression="attribute_not_exists(pk)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    )
    expect_eq(e.response["Error"]["Code"], "ConditionalCheckFailedException", "error code")
    c.show("PutItem ConditionalCheckFailed ALL_OLD", "PutItem")
    _, body = c.last_raw("PutItem")
    expect_eq(body.get("Item", {}).get("v"), N(1), "raw body Item (old item)")
    expect_eq(e.response.get("Item", {}).get("v"), N(1), "boto3 parsed Item")


@check
def ddb_transact_write_condition_failure_reasons(c: Ctx) -> None:
    def attempt(all_old: bool) -> ClientError:
        failing: dict[str, Any] = {
            "TableName": TABLE,
            "Item": {**key("p1", "a"), "v": N(9)},
            "ConditionExpression": "attribute_not_exists(pk)",
        }
        if all_old:
            failing["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        return client_error(
            lambda: c.ddb.transact_write_items(
                TransactItems=[
                    {"Put": {"TableName": TABLE, "Item": {**key("p1", "tx-new"), "v": N(1)},
                             "ConditionExpression": "attribute_not_exists(pk)"}},
                    {"Put": failing},
                    {"Update": {"TableName": TABLE, "Key": key("p1", "tx-upd"), "UpdateExpression": "SET v = :v",
                                "ExpressionAttributeValues": {":v": N(5)}}},
                ]
            )
        )

    e = attempt(all_old=False)
    expect_eq(e.response["Error"]["Code"], "TransactionCanceledException", "error code")
    status, body = c.last_raw("TransactWriteItems")
    c.show("TransactWriteItems canceled", "TransactWriteItems")
    expect_eq(status, 400, "HTTP status")
    expect_eq(body.get("__type"), "com.amazonaws.dynamodb.v20120810#TransactionCanceledException", "__type")
    expect_eq(
        body.get("CancellationReasons"),
        [{"Code": "None"}, {"Code": "ConditionalCheckFailed", "Message": "The conditional request failed"},
         {"Code": "None"}],
        "raw CancellationReasons",
    )
    expect_eq(
        body.get("Message"),
        "Transaction cancelled, please refer cancellation reasons for specific reasons "
        "[None, ConditionalCheckFailed, None]",
        "raw Message",
    )
    expect_eq([r["Code"] for r in e.response["CancellationReasons"]], ["None", "ConditionalCheckFailed", "None"],
              "boto3 CancellationReasons")
    for k in ("tx-new", "tx-upd"):
        expect("Item" not in c.ddb.get_item(TableName=TABLE, Key=key("p1", k), ConsistentRead=True),
               f"transaction not applied ({k} must not exist)")

    e = attempt(all_old=True)
    c.show("TransactWriteItems canceled ALL_OLD", "TransactWriteItems")
    reasons = c.last_raw("TransactWriteItems")[1]["CancellationReasons"]
    expect_eq(reasons[1].get("Item", {}).get("v"), N(1), "CancellationReasons[1].Item with ALL_OLD")
    expect("Item" not in reasons[0] and "Item" not in reasons[2], "no Item on the 'None' entries")


@check
def ddb_transact_write_cancel_restores_updated_items(c: Ctx) -> None:
    # moto_macp.py rolls back item by item (its point 7): an item changed by an earlier
    # operation of a cancelled transaction must come back exactly as it was.
    c.ddb.put_item(TableName=TABLE, Item={**key("p1", "tx-keep"), "v": N(1), "s": {"S": "old"}})
    e = client_error(
        lambda: c.ddb.transact_write_items(
            TransactItems=[
                {"Update": {"TableName": TABLE, "Key": key("p1", "tx-keep"), "UpdateExpression": "SET v = :v REMOVE s",
                            "ExpressionAttributeValues": {":v": N(7)}}},
                {"Delete": {"TableName": TABLE, "Key": key("p1", "a")}},
                {"ConditionCheck": {"TableName": TABLE, "Key": key("p1", "nope"),
                                    "ConditionExpression": "attribute_exists(pk)"}},
            ]
        )
    )
    expect_eq(e.response["Error"]["Code"], "TransactionCanceledException", "error code")
    kept = c.ddb.get_item(TableName=TABLE, Key=key("p1", "tx-keep"), ConsistentRead=True).get("Item", {})
    expect_eq((kept.get("v"), kept.get("s")), (N(1), {"S": "old"}), "updated item restored")
    expect("Item" in c.ddb.get_item(TableName=TABLE, Key=key("p1", "a"), ConsistentRead=True),
           "deleted item restored")


@check
def ddb_transact_write_condition_check_and_update_failures(c: Ctx) -> None:
    e = client_error(
        lambda: c.ddb.transact_write_items(
            TransactItems=[
                {"ConditionCheck": {"TableName": TABLE, "Key": key("p1", "a"), "ConditionExpression": "v = :two",
                                    "ExpressionAttributeValues": {":two": N(2)}}},
                {"Update": {"TableName": TABLE, "Key": key("p1", "b"), "UpdateExpression": "SET v = :v",
                            "ConditionExpression": "attribute_exists(pk)",
                            "ExpressionAttributeValues": {":v": N(5)}}},
            ]
        )
    )
    c.show("TransactWriteItems ConditionCheck+Update both failing", "TransactWriteItems")
    expect_eq([r["Code"] for r in e.response["CancellationReasons"]],
              ["ConditionalCheckFailed", "ConditionalCheckFailed"], "codes when every condition fails")
    # Success path: a transaction whose conditions hold is applied.
    c.ddb.transact_write_items(
        TransactItems=[
            {"ConditionCheck": {"TableName": TABLE, "Key": key("p1", "a"), "ConditionExpression": "v = :one",
                                "ExpressionAttributeValues": {":one": N(1)}}},
            {"Put": {"TableName": TABLE, "Item": {**key("p1", "tx-ok"), "v": N(1)},
                     "ConditionExpression": "attribute_not_exists(pk)"}},
        ]
    )
    expect("Item" in c.ddb.get_item(TableName=TABLE, Key=key("p1", "tx-ok")), "successful transaction applied")
    # Two operations on one item in one transaction.
    e = client_error(
        lambda: c.ddb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": TABLE, "Item": {**key("p1", "dup"), "v": N(1)}}},
                {"Update": {"TableName": TABLE, "Key": key("p1", "dup"), "UpdateExpression": "SET v = :v",
                            "ExpressionAttributeValues": {":v": N(2)}}},
            ]
        )
    )
    c.show("TransactWriteItems same item twice", "TransactWriteItems")
    expect_eq(e.response["Error"]["Code"], "ValidationException", "same item twice")


@check
def ddb_query_lsi_consistent_read(c: Ctx) -> None:
    for sk, lsk in (("b", "1"), ("c", "2"), ("d", None)):
        item = {**key("p1", sk), "v": N(1)}
        if lsk:
            item["lsk"] = S(lsk)
        c.ddb.put_item(TableName=TABLE, Item=item)
    r = c.ddb.query(
        TableName=TABLE, IndexName="lsi1", ConsistentRead=True,
        KeyConditionExpression="pk = :p AND lsk >= :lo", ExpressionAttributeValues={":p": S("p1"), ":lo": S("1")},
    )
    expect_eq([i["lsk"]["S"] for i in r["Items"]], ["1", "2", "3"], "LSI order (items without lsk are absent)")
    r = c.ddb.query(
        TableName=TABLE, IndexName="lsi1", ConsistentRead=True, ScanIndexForward=False, Limit=2,
        KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": S("p1")},
    )
    expect_eq([i["lsk"]["S"] for i in r["Items"]], ["3", "2"], "LSI descending with Limit")
    lek = r.get("LastEvaluatedKey")
    expect(lek is not None and set(lek) == {"pk", "sk", "lsk"}, f"LSI LastEvaluatedKey has table+index keys: {lek}")


@check
def ddb_query_gsi(c: Ctx) -> None:
    for sk, gsk in (("g-1", "y"), ("g-2", "z")):
        c.ddb.put_item(TableName=TABLE, Item={**key("p2", sk), "gpk": S("g1"), "gsk": S(gsk), "v": N(7), "w": N(1)})
    r = c.ddb.query(
        TableName=TABLE, IndexName="gsi1", KeyConditionExpression="gpk = :g",
        ExpressionAttributeValues={":g": S("g1")},
    )
    expect_eq([i["gsk"]["S"] for i in r["Items"]], ["x", "y", "z"], "GSI order")
    r = c.ddb.query(
        TableName=TABLE, IndexName="gsi2", KeyConditionExpression="gpk = :g",
        ExpressionAttributeValues={":g": S("g1")},
    )
    attrs = sorted({a for i in r["Items"] for a in i})
    expect_eq(len(r["Items"]), 3, "GSI (INCLUDE projection) item count")
    if "w" in attrs:
        c.note(f"GSI with INCLUDE projection returned non-projected attributes too: {attrs}")
    # ConsistentRead on a GSI is a ValidationException on real DynamoDB.
    try:
        c.ddb.query(
            TableName=TABLE, IndexName="gsi1", ConsistentRead=True, KeyConditionExpression="gpk = :g",
            ExpressionAttributeValues={":g": S("g1")},
        )
        c.note("Query on a GSI with ConsistentRead=True succeeds on moto (real DynamoDB: ValidationException)")
    except ClientError as e:
        c.show("Query GSI ConsistentRead", "Query")
        expect_eq(e.response["Error"]["Code"], "ValidationException", "GSI ConsistentRead error code")


@check
def ddb_update_nested_if_not_exists_counter(c: Ctx) -> None:
    c.ddb.put_item(TableName=TABLE, Item={**key("p3", "ctr"), "m": {"M": {}}})
    upd = dict(
        TableName=TABLE, Key=key("p3", "ctr"),
        UpdateExpression="SET m.#k = if_not_exists(m.#k, :z) + :one",
        ExpressionAttributeNames={"#k": "some key.with-dots"},
        ExpressionAttributeValues={":z": N(0), ":one": N(1)},
        ReturnValues="UPDATED_NEW",
    )
    r1 = c.ddb.update_item(**upd)
    expect_eq(r1["Attributes"], {"m": {"M": {"some key.with-dots": N(1)}}}, "first increment UPDATED_NEW")
    r2 = c.ddb.update_item(**upd)
    expect_eq(r2["Attributes"], {"m": {"M": {"some key.with-dots": N(2)}}}, "second increment UPDATED_NEW")
    item = c.ddb.get_item(TableName=TABLE, Key=key("p3", "ctr"), ConsistentRead=True)["Item"]
    expect_eq(item["m"], {"M": {"some key.with-dots": N(2)}}, "stored map")
    # Parent map missing: real DynamoDB answers ValidationException ("The document path provided in
    # the update expression is invalid for update").
    upd["Key"] = key("p3", "no-map")
    try:
        c.ddb.update_item(**upd)
        got = c.ddb.get_item(TableName=TABLE, Key=key("p3", "no-map"))["Item"]
        c.note(f"SET m.#k on an item without m succeeds on moto (real: ValidationException); item={got}")
    except ClientError as e:
        c.show("UpdateItem nested path without parent map", "UpdateItem")
        expect_eq(e.response["Error"]["Code"], "ValidationException", "missing parent map error code")


@check
def ddb_time_to_live(c: Ctx) -> None:
    # The protocol sessions table's TTL: setup describes it first and enables it only when off,
    # because DynamoDB refuses to enable a TTL twice.
    off = c.ddb.describe_time_to_live(TableName=TABLE)["TimeToLiveDescription"]
    expect_eq(off.get("TimeToLiveStatus"), "DISABLED", "TTL status of a new table")
    c.ddb.update_time_to_live(
        TableName=TABLE, TimeToLiveSpecification={"AttributeName": "expires_epoch", "Enabled": True}
    )
    on = c.ddb.describe_time_to_live(TableName=TABLE)["TimeToLiveDescription"]
    expect_eq((on.get("TimeToLiveStatus"), on.get("AttributeName")), ("ENABLED", "expires_epoch"), "TTL after enabling")
    try:
        c.ddb.update_time_to_live(
            TableName=TABLE, TimeToLiveSpecification={"AttributeName": "expires_epoch", "Enabled": True}
        )
        c.note("enabling a TTL twice succeeds on moto (real: ValidationException)")
    except ClientError as e:
        expect_eq(e.response["Error"]["Code"], "ValidationException", "enabling a TTL twice")


@check
def ddb_batch_get_item(c: Ctx) -> None:
    r = c.ddb.batch_get_item(
        RequestItems={TABLE: {"Keys": [key("p1", "a"), key("p1", "b"), key("nope", "nope")], "ConsistentRead": True,
                              "ProjectionExpression": "pk, sk, v"}}
    )
    c.show("BatchGetItem", "BatchGetItem")
    _, body = c.last_raw("BatchGetItem")
    expect_eq(sorted(i["sk"]["S"] for i in r["Responses"][TABLE]), ["a", "b"], "found items")
    expect_eq(body.get("UnprocessedKeys"), {}, "raw UnprocessedKeys")
    if "ConsumedCapacity" in body:
        c.note("BatchGetItem returns ConsumedCapacity even without ReturnConsumedCapacity")
    e = client_error(lambda: c.ddb.batch_get_item(
        RequestItems={TABLE: {"Keys": [key("p", str(i)) for i in range(101)]}}))
    expect_eq(e.response["Error"]["Code"], "ValidationException", "more than 100 keys")
    c.show("BatchGetItem 101 keys", "BatchGetItem")


@check
def ddb_other_error_shapes(c: Ctx) -> None:
    for op, call in (
        ("UpdateItem", lambda: c.ddb.update_item(
            TableName=TABLE, Key=key("p1", "a"), UpdateExpression="SET v = :v", ConditionExpression="v = :x",
            ExpressionAttributeValues={":v": N(2), ":x": N(5)}, ReturnValuesOnConditionCheckFailure="ALL_OLD")),
        ("DeleteItem", lambda: c.ddb.delete_item(
            TableName=TABLE, Key=key("p1", "a"), ConditionExpression="attribute_not_exists(pk)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD")),
    ):
        e = client_error(call)
        expect_eq(e.response["Error"]["Code"], "ConditionalCheckFailedException", f"{op} code")
        expect_eq(c.last_raw(op)[1].get("Item", {}).get("v"), N(1), f"{op} ALL_OLD Item")
    e = client_error(lambda: c.ddb.delete_item(TableName=TABLE, Key=key("zz", "zz"),
                                               ConditionExpression="attribute_exists(pk)"))
    expect_eq(e.response["Error"]["Code"], "ConditionalCheckFailedException", "condition on a missing item")
    e = client_error(lambda: c.ddb.put_item(TableName="no-such-table", Item=key("a", "b")))
    expect_eq(e.response["Error"]["Code"], "ResourceNotFoundException", "missing table")
    c.show("PutItem missing table", "PutItem")
    e = client_error(lambda: c.ddb.transact_write_items(
        TransactItems=[{"Put": {"TableName": TABLE, "Item": key("many", str(i))}} for i in range(101)]))
    expect_eq(e.response["Error"]["Code"], "ValidationException", "101 transaction items")
    c.show("TransactWriteItems 101 items", "TransactWriteItems")
    e = client_error(lambda: c.ddb.batch_get_item(RequestItems={TABLE: {"Keys": [key("p1", "a"), key("p1", "a")]}}))
    expect_eq(e.response["Error"]["Code"], "ValidationException", "BatchGetItem duplicate keys")
    c.show("BatchGetItem duplicate keys", "BatchGetItem")


@check
def ddb_concurrent_conditional_transactions(c: Ctx) -> None:
    """Several clients race TransactWriteItems with attribute_not_exists on the same keys: exactly one
    wins per key and nothing fails with HTTP 500 (needs moto_macp.py's request serialization)."""
    import threading
    from collections import Counter

    wins: Counter[int] = Counter()
    errors: list[str] = []
    lock = threading.Lock()
    clients = [boto3.client("dynamodb", endpoint_url=c.endpoint, region_name=REGION, aws_access_key_id="testing",
                            aws_secret_access_key="testing", config=Config(retries={"max_attempts": 1}))
               for _ in range(4)]

    def worker(cl: Any, wid: int) -> None:
        for k in range(10):
            try:
                cl.transact_write_items(TransactItems=[
                    {"Put": {"TableName": TABLE, "Item": {**key(f"race-{k}", str(j)), "w": N(wid)},
                             "ConditionExpression": "attribute_not_exists(pk)"}} for j in range(10)])
                with lock:
                    wins[k] += 1
            except ClientError as e:
                if e.response["Error"]["Code"] != "TransactionCanceledException":
                    with lock:
                        errors.append(f"{e.response['Error']['Code']} {str(e)[:80]}")

    threads = [threading.Thread(target=worker, args=(cl, i)) for i, cl in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expect(not errors, f"unexpected errors: {errors[:3]}")
    expect_eq(dict(wins), {k: 1 for k in range(10)}, "winners per key")


# =========================================================================== S3

BUCKET = "macp-verify-bucket"


@check
def s3_presigned_put_head_get(c: Ctx) -> None:
    c.s3.create_bucket(Bucket=BUCKET)
    body = b'{"hello": "world"}\n'
    url = c.s3.generate_presigned_url(
        "put_object",
        Params={"Bucket": BUCKET, "Key": "blobs/a.json", "ContentType": "application/json",
                "ContentLength": len(body)},
        ExpiresIn=300,
    )
    q = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)
    expect_eq(q["X-Amz-SignedHeaders"], ["content-length;content-type;host"], "signed headers")
    r = requests.put(url, data=body, headers={"Content-Type": "application/json"}, timeout=10)
    expect_eq(r.status_code, 200, f"presigned PUT status ({r.text[:200]})")
    h = c.s3.head_object(Bucket=BUCKET, Key="blobs/a.json")
    expect_eq(h["ContentLength"], len(body), "HeadObject ContentLength")
    expect_eq(h["ContentType"], "application/json", "HeadObject ContentType")
    get_url = c.s3.generate_presigned_url("get_object", Params={"Bucket": BUCKET, "Key": "blobs/a.json"},
                                          ExpiresIn=300)
    r = requests.get(get_url, timeout=10)
    expect_eq((r.status_code, r.content), (200, body), "presigned GET")
    expect_eq(r.headers.get("Content-Type"), "application/json", "presigned GET Content-Type")
    # SDK put/get (boto3 sends a CRC32 checksum header by default, like recent Rust SDKs).
    c.s3.put_object(Bucket=BUCKET, Key="blobs/b.bin", Body=b"\x00\x01", ContentType="application/octet-stream")
    expect_eq(c.s3.get_object(Bucket=BUCKET, Key="blobs/b.bin")["Body"].read(), b"\x00\x01", "SDK round trip")
    e = client_error(lambda: c.s3.head_object(Bucket=BUCKET, Key="missing"))
    expect_eq((e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]), ("404", 404),
              "HeadObject on a missing key")
    e = client_error(lambda: c.s3.get_object(Bucket=BUCKET, Key="missing"))
    expect_eq(e.response["Error"]["Code"], "NoSuchKey", "GetObject on a missing key")


@check
def s3_presigned_put_not_enforced_by_moto(c: Ctx) -> None:
    """Records (as NOTEs) what moto does not check on presigned URLs; fails only if the upload errors."""
    body = b"12345"
    url = c.s3.generate_presigned_url(
        "put_object",
        Params={"Bucket": BUCKET, "Key": "blobs/c.txt", "ContentType": "text/plain", "ContentLength": len(body)},
        ExpiresIn=300,
    )
    r = requests.put(url, data=b"1234567", headers={"Content-Type": "image/png"}, timeout=10)
    if r.status_code == 200:
        h = c.s3.head_object(Bucket=BUCKET, Key="blobs/c.txt")
        c.note("presigned PUT with a different Content-Type and Content-Length than signed is accepted "
               f"(stored ContentType={h['ContentType']}, ContentLength={h['ContentLength']})")
    else:
        c.note(f"presigned PUT with mismatched headers rejected: {r.status_code}")
    bad = url.replace("X-Amz-Signature=", "X-Amz-Signature=0")
    r = requests.put(bad, data=body, headers={"Content-Type": "text/plain"}, timeout=10)
    c.note(f"presigned PUT with a tampered signature -> HTTP {r.status_code}")
    url = c.s3.generate_presigned_url("put_object", Params={"Bucket": BUCKET, "Key": "blobs/d.txt"}, ExpiresIn=1)
    time.sleep(2.1)
    r = requests.put(url, data=body, timeout=10)
    c.note(f"expired presigned PUT -> HTTP {r.status_code}")


# =========================================================================== S3 Vectors

VB = "macp-verify-vectors"
IDX = "memories"


def _cos_dist(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return 1 - dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


VECTORS = [
    ("v1", [1.0, 0.0, 0.0, 0.0], {"scope": "proj-a", "kind": "note", "tags": ["a", "b"], "n": 1, "text": "alpha"}),
    ("v2", [0.9, 0.1, 0.0, 0.0], {"scope": "proj-a", "kind": "fact", "tags": ["b"], "n": 2}),
    ("v3", [0.0, 1.0, 0.0, 0.0], {"scope": "proj-b", "kind": "note", "tags": ["c"], "n": 3, "pinned": True}),
    ("v4", [0.0, 0.0, 1.0, 0.0], {"scope": "proj-b", "kind": "fact", "tags": [], "n": 4}),
    ("v5", [0.5, 0.5, 0.5, 0.5], {"scope": "proj-c", "kind": "note", "n": 5, "text": "beta"}),
]
QUERY = [1.0, 0.2, 0.0, 0.0]


def _q(c: Ctx, flt: Any = None, top_k: int = 10, **extra: Any) -> dict[str, Any]:
    kw: dict[str, Any] = dict(vectorBucketName=VB, indexName=IDX, topK=top_k, queryVector={"float32": QUERY},
                              **extra)
    if flt is not None:
        kw["filter"] = flt
    return c.s3v.query_vectors(**kw)


def _keys(resp: dict[str, Any]) -> list[str]:
    return [v["key"] for v in resp["vectors"]]


@check
def s3v_bucket_and_index(c: Ctx) -> None:
    c.s3v.create_vector_bucket(vectorBucketName=VB)
    b = c.s3v.get_vector_bucket(vectorBucketName=VB)["vectorBucket"]
    expect_eq(b["vectorBucketName"], VB, "bucket name")
    expect("creationTime" in b, "GetVectorBucket returns creationTime")
    e = client_error(lambda: c.s3v.create_vector_bucket(vectorBucketName=VB))
    expect_eq(e.response["Error"]["Code"], "ConflictException", "duplicate vector bucket")
    e = client_error(lambda: c.s3v.get_vector_bucket(vectorBucketName="no-such-bucket"))
    expect_eq(e.response["Error"]["Code"], "NotFoundException", "missing vector bucket")
    c.show("GetVectorBucket missing", "GetVectorBucket")
    c.s3v.create_index(vectorBucketName=VB, indexName=IDX, dataType="float32", dimension=4, distanceMetric="cosine",
                       metadataConfiguration={"nonFilterableMetadataKeys": ["text"]})
    ix = c.s3v.get_index(vectorBucketName=VB, indexName=IDX)["index"]
    expect_eq((ix["dimension"], ix["distanceMetric"], ix["dataType"]), (4, "cosine", "float32"), "index attributes")
    expect_eq(ix.get("metadataConfiguration"), {"nonFilterableMetadataKeys": ["text"]}, "metadataConfiguration")
    expect("creationTime" in ix, "GetIndex returns creationTime")
    c.show("GetIndex", "GetIndex")
    by_arn = c.s3v.get_index(indexArn=ix["indexArn"])["index"]
    expect_eq(by_arn["indexName"], IDX, "GetIndex by ARN")
    e = client_error(lambda: c.s3v.create_index(vectorBucketName=VB, indexName=IDX, dataType="float32", dimension=4,
                                                distanceMetric="cosine"))
    expect_eq(e.response["Error"]["Code"], "ConflictException", "duplicate index")
    e = client_error(lambda: c.s3v.get_index(vectorBucketName=VB, indexName="no-such-index"))
    expect_eq(e.response["Error"]["Code"], "NotFoundException", "missing index")
    c.show("GetIndex missing", "GetIndex")
    names = [i["indexName"] for i in c.s3v.list_indexes(vectorBucketName=VB)["indexes"]]
    expect_eq(names, [IDX], "ListIndexes")


@check
def s3v_put_get_list_vectors(c: Ctx) -> None:
    c.s3v.put_vectors(vectorBucketName=VB, indexName=IDX,
                      vectors=[{"key": k, "data": {"float32": d}, "metadata": m} for k, d, m in VECTORS])
    got = c.s3v.get_vectors(vectorBucketName=VB, indexName=IDX, keys=["v3", "v1", "missing"],
                            returnData=True, returnMetadata=True)["vectors"]
    c.show("GetVectors", "GetVectors")
    by_key = {v["key"]: v for v in got}
    expect_eq(sorted(by_key), ["v1", "v3"], "GetVectors keys (missing keys are left out)")
    expect_eq(by_key["v1"]["data"]["float32"], VECTORS[0][1], "GetVectors data")
    expect_eq(by_key["v3"]["metadata"], VECTORS[2][2], "GetVectors metadata")
    bare = c.s3v.get_vectors(vectorBucketName=VB, indexName=IDX, keys=["v1"])["vectors"]
    expect_eq(bare, [{"key": "v1"}], "GetVectors without returnData/returnMetadata")
    # Overwrite (PutVectors is an upsert).
    c.s3v.put_vectors(vectorBucketName=VB, indexName=IDX,
                      vectors=[{"key": "v4", "data": {"float32": VECTORS[3][1]}, "metadata": VECTORS[3][2]}])
    # ListVectors pagination.
    seen, token, pages = [], None, 0
    while True:
        kw: dict[str, Any] = dict(vectorBucketName=VB, indexName=IDX, maxResults=2, returnMetadata=True)
        if token:
            kw["nextToken"] = token
        page = c.s3v.list_vectors(**kw)
        pages += 1
        seen += [v["key"] for v in page["vectors"]]
        token = page.get("nextToken")
        if not token:
            break
    expect_eq((sorted(seen), pages), (["v1", "v2", "v3", "v4", "v5"], 3), "ListVectors pages of 2")
    segs = []
    for i in range(3):
        segs += [v["key"] for v in c.s3v.list_vectors(vectorBucketName=VB, indexName=IDX, segmentCount=3,
                                                       segmentIndex=i)["vectors"]]
    expect_eq(sorted(segs), ["v1", "v2", "v3", "v4", "v5"], "ListVectors segments cover every vector once")
    e = client_error(lambda: c.s3v.put_vectors(vectorBucketName=VB, indexName=IDX,
                                               vectors=[{"key": "bad", "data": {"float32": [1.0, 2.0]}}]))
    expect_eq(e.response["Error"]["Code"], "ValidationException", "wrong dimension on PutVectors")
    c.show("PutVectors wrong dimension", "PutVectors")


@check
def s3v_query_topk_distance_metadata(c: Ctx) -> None:
    r = _q(c, top_k=3, returnDistance=True, returnMetadata=True)
    c.show("QueryVectors", "QueryVectors")
    expected = sorted(((_cos_dist(QUERY, d), k) for k, d, _ in VECTORS))[:3]
    expect_eq(_keys(r), [k for _, k in expected], "top-3 order by cosine distance")
    for v, (dist, _) in zip(r["vectors"], expected):
        expect(abs(v["distance"] - dist) < 1e-6, f"distance of {v['key']}: {v['distance']} vs {dist}")
    expect_eq(r["distanceMetric"], "cosine", "distanceMetric")
    meta = {v["key"]: v.get("metadata") for v in r["vectors"]}
    expect_eq(meta["v1"], VECTORS[0][2], "metadata returned (non-filterable keys included)")
    r = _q(c, top_k=2)
    expect_eq(r["vectors"], [{"key": k} for _, k in expected[:2]], "no distance/metadata unless asked")
    _, raw = c.last_raw("QueryVectors")
    expect_eq(set(raw), {"vectors", "distanceMetric"}, "raw top-level members")


FILTER_CASES: list[tuple[str, Any, list[str]]] = [
    ("implicit equality", {"scope": "proj-a"}, ["v1", "v2"]),
    ("$eq", {"kind": {"$eq": "note"}}, ["v1", "v3", "v5"]),
    ("$ne", {"kind": {"$ne": "note"}}, ["v2", "v4"]),
    ("$in", {"scope": {"$in": ["proj-b", "proj-c"]}}, ["v3", "v4", "v5"]),
    ("$nin", {"scope": {"$nin": ["proj-a"]}}, ["v3", "v4", "v5"]),
    ("array metadata, implicit equality", {"tags": "b"}, ["v1", "v2"]),
    ("array metadata, $eq", {"tags": {"$eq": "a"}}, ["v1"]),
    ("array metadata, $in", {"tags": {"$in": ["a"]}}, ["v1"]),
    ("array metadata, $in several", {"tags": {"$in": ["a", "c"]}}, ["v1", "v3"]),
    ("array metadata, $nin (missing key matches)", {"tags": {"$nin": ["b"]}}, ["v3", "v4", "v5"]),
    ("$and", {"$and": [{"scope": "proj-a"}, {"kind": "fact"}]}, ["v2"]),
    ("$or", {"$or": [{"scope": "proj-c"}, {"kind": {"$eq": "fact"}}]}, ["v2", "v4", "v5"]),
    ("nested $and/$or", {"$and": [{"$or": [{"scope": "proj-a"}, {"scope": "proj-b"}]}, {"tags": {"$in": ["b", "c"]}}]},
     ["v1", "v2", "v3"]),
    ("several keys are ANDed", {"scope": "proj-b", "kind": "note"}, ["v3"]),
    ("range", {"n": {"$gte": 2, "$lt": 4}}, ["v2", "v3"]),
    ("$exists true", {"pinned": {"$exists": True}}, ["v3"]),
    ("$exists false", {"tags": {"$exists": False}}, ["v5"]),
    ("bool equality", {"pinned": True}, ["v3"]),
    ("type-strict equality", {"n": "1"}, []),
    ("non-filterable key never matches", {"text": "alpha"}, []),
    ("no match", {"scope": "nope"}, []),
]


@check
def s3v_query_filters(c: Ctx) -> None:
    failures = []
    for label, flt, want in FILTER_CASES:
        got = sorted(_keys(_q(c, flt)))
        if got != want:
            failures.append(f"{label} {json.dumps(flt)}: expected {want}, got {got}")
    expect(not failures, "; ".join(failures))
    # Filter and top-k combine: best 1 of the proj-b vectors.
    expect_eq(_keys(_q(c, {"scope": "proj-b"}, top_k=1)), ["v3"], "filter then top-k")


@check
def s3v_query_validation(c: Ctx) -> None:
    cases = [
        ("wrong dimension", dict(queryVector={"float32": [1.0, 0.0]})),
        ("zero vector (cosine)", dict(queryVector={"float32": [0.0, 0.0, 0.0, 0.0]})),
        ("topK > 100", dict(topK=101)),
        ("unknown operator", dict(filter={"kind": {"$regex": "n.*"}})),
        ("$in not an array", dict(filter={"kind": {"$in": "note"}})),
        ("empty $and", dict(filter={"$and": []})),
    ]
    for label, over in cases:
        kw: dict[str, Any] = dict(vectorBucketName=VB, indexName=IDX, topK=3, queryVector={"float32": QUERY})
        kw.update(over)
        e = client_error(lambda kw=kw: c.s3v.query_vectors(**kw))
        expect_eq(e.response["Error"]["Code"], "ValidationException", label)
    c.show("QueryVectors invalid filter", "QueryVectors")
    u = c.s3v_unchecked
    limits = [
        ("PutVectors 501 vectors", lambda: u.put_vectors(vectorBucketName=VB, indexName=IDX, vectors=[
            {"key": f"x{i}", "data": {"float32": QUERY}} for i in range(501)])),
        ("GetVectors 101 keys", lambda: u.get_vectors(vectorBucketName=VB, indexName=IDX,
                                                      keys=[f"x{i}" for i in range(101)])),
        ("DeleteVectors 501 keys", lambda: u.delete_vectors(vectorBucketName=VB, indexName=IDX,
                                                            keys=[f"x{i}" for i in range(501)])),
        ("QueryVectors topK 0", lambda: u.query_vectors(vectorBucketName=VB, indexName=IDX, topK=0,
                                                        queryVector={"float32": QUERY})),
    ]
    for label, call in limits:
        e = client_error(call)
        expect_eq(e.response["Error"]["Code"], "ValidationException", label)
    c.show("GetVectors 101 keys", "GetVectors")
    e = client_error(lambda: c.s3v.query_vectors(vectorBucketName=VB, indexName="no-such-index", topK=1,
                                                 queryVector={"float32": QUERY}))
    expect_eq(e.response["Error"]["Code"], "NotFoundException", "query on a missing index")
    c.show("QueryVectors missing index", "QueryVectors")


@check
def s3v_euclidean_and_index_arn(c: Ctx) -> None:
    c.s3v.create_index(vectorBucketName=VB, indexName="euclid", dataType="float32", dimension=2,
                       distanceMetric="euclidean")
    arn = c.s3v.get_index(vectorBucketName=VB, indexName="euclid")["index"]["indexArn"]
    c.s3v.put_vectors(indexArn=arn, vectors=[
        {"key": "o", "data": {"float32": [0.0, 0.0]}},
        {"key": "x", "data": {"float32": [3.0, 4.0]}},
        {"key": "y", "data": {"float32": [1.0, 1.0]}, "metadata": {"g": "1"}},
    ])
    r = c.s3v.query_vectors(indexArn=arn, topK=3, queryVector={"float32": [0.0, 0.0]}, returnDistance=True)
    expect_eq(r["distanceMetric"], "euclidean", "distanceMetric")
    expect_eq([(v["key"], round(v["distance"], 6)) for v in r["vectors"]],
              [("o", 0.0), ("y", round(math.sqrt(2), 6)), ("x", 5.0)], "euclidean distances")


@check
def s3v_delete_vectors_index_bucket(c: Ctx) -> None:
    c.s3v.delete_vectors(vectorBucketName=VB, indexName=IDX, keys=["v1", "v2", "never-existed"])
    expect_eq(sorted(_keys(_q(c))), ["v3", "v4", "v5"], "deleted vectors are gone from queries")
    expect_eq(c.s3v.get_vectors(vectorBucketName=VB, indexName=IDX, keys=["v1"])["vectors"], [], "GetVectors after")
    e = client_error(lambda: c.s3v.delete_vector_bucket(vectorBucketName=VB))
    expect_eq(e.response["Error"]["Code"], "ConflictException", "deleting a non-empty vector bucket")
    c.s3v.delete_index(vectorBucketName=VB, indexName=IDX)
    c.s3v.delete_index(vectorBucketName=VB, indexName="euclid")
    c.s3v.delete_vector_bucket(vectorBucketName=VB)
    expect_eq(c.s3v.list_vector_buckets()["vectorBuckets"], [], "no vector buckets left")


@check
def reset_clears_everything(c: Ctx) -> None:
    c.s3v.create_vector_bucket(vectorBucketName=VB)
    c.s3v.create_index(vectorBucketName=VB, indexName=IDX, dataType="float32", dimension=4, distanceMetric="cosine")
    c.s3v.put_vectors(vectorBucketName=VB, indexName=IDX, vectors=[{"key": "k", "data": {"float32": QUERY}}])
    expect_eq(_keys(_q(c)), ["k"], "vector visible before reset")
    c.reset()
    e = client_error(lambda: _q(c))
    expect_eq(e.response["Error"]["Code"], "NotFoundException", "query after reset")
    expect_eq(c.s3v.list_vector_buckets()["vectorBuckets"], [], "vector buckets after reset")
    expect_eq(c.ddb.list_tables()["TableNames"], [], "DynamoDB tables after reset")
    expect_eq(c.s3.list_buckets()["Buckets"], [], "S3 buckets after reset")
    # Same names can be created again after a reset.
    c.s3v.create_vector_bucket(vectorBucketName=VB)
    c.s3v.create_index(vectorBucketName=VB, indexName=IDX, dataType="float32", dimension=4, distanceMetric="cosine")
    expect_eq(_q(c)["vectors"], [], "fresh index is empty")
    c.reset()


# =========================================================================== runner


def start_server() -> tuple[subprocess.Popen[str], str]:
    # --exit-on-stdin-eof: the server also stops if this script dies without cleaning up.
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "moto_macp.py"), "--port", "0", "--exit-on-stdin-eof"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"moto_macp.py did not start (got {line!r})")
    return proc, line.split()[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint", help="use a running moto_macp.py instead of starting one")
    ap.add_argument("--show-raw", action="store_true", help="print the raw HTTP JSON of the interesting responses")
    ap.add_argument("-k", dest="only", help="run only the checks whose name contains this")
    args = ap.parse_args()

    def on_sigterm(*_: Any) -> None:
        raise SystemExit(143)  # runs the finally below, which stops the server

    signal.signal(signal.SIGTERM, on_sigterm)
    proc = None
    endpoint = args.endpoint
    if not endpoint:
        proc, endpoint = start_server()
    passed = failed = 0
    try:
        ctx = Ctx(endpoint.rstrip("/"), args.show_raw)
        ctx.reset()
        print(f"moto at {endpoint}")
        for name, fn in CHECKS:
            if args.only and args.only not in name:
                continue
            try:
                fn(ctx)
                passed += 1
                print(f"PASS {name}")
            except Exception as e:  # noqa: BLE001 - report every failure and go on
                failed += 1
                detail = str(e) if isinstance(e, CheckFailed) else traceback.format_exc(limit=3)
                print(f"FAIL {name}: {detail}")
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = "killed"
            if rc != 0:
                print(f"FAIL moto_macp.py exit status after SIGTERM: {rc}")
                failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
