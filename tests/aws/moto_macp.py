#!/usr/bin/env python3
"""moto_server plus a small extension of moto's own S3 Vectors backend, for macp-aws tests.

Usage:
    python tests/aws/moto_macp.py [--host 127.0.0.1] [--port 0] [--exit-on-stdin-eof]
                                  [--no-serialize] [--verbose]

Prints exactly one line on stdout once the server accepts connections:
    listening on http://127.0.0.1:PORT
and serves until SIGTERM or SIGINT, after which it shuts down and exits 0.
`--port 0` (the default) picks a free port. `POST /moto-api/reset` clears every
backend, including the vectors this extension queries (it keeps no state of its own).

Pinned to moto 5.2.5 (tests/e2e/requirements.txt). What the extension changes, all
installed by `install_extensions()` before the server starts (monkey-patches, no files
in site-packages are touched):

1. QueryVectors (moto 5.2.5 has no route for it and answers an HTML 404):
   exact (brute-force) top-k over the index's vectors by its distance metric
     cosine:    distance = 1 - cos(q, v)
     euclidean: distance = sqrt(sum((q_i - v_i)^2))
   ties broken by key, so results are deterministic. Request members used: topK
   (1..100), queryVector.float32 (must match the index dimension; a zero vector is
   rejected for cosine), filter, returnDistance, returnMetadata, and the index given
   by vectorBucketName+indexName or indexArn. queryTexts (full-text/hybrid search) is
   answered with a ValidationException. No nextToken is ever returned.
   Response: {"vectors": [{"key", "distance"?, "metadata"?}], "distanceMetric": ...}.
   Filter language (S3 Vectors metadata filtering):
     {"k": v}                  implicit $eq; several keys in one object are ANDed
     {"k": {"$eq": v}}, $ne    v a string, number or bool
     $gt, $gte, $lt, $lte      v a number
     $in, $nin                 a non-empty list of strings/numbers/bools
     $exists                   bool
     {"$and": [f, ...]}, {"$or": [f, ...]}   non-empty lists of filters
   Array-valued metadata: $eq/$in (and the implicit form) match when ANY element
   matches, so {"tags": "a"} and {"tags": {"$in": ["a"]}} both match
   {"tags": ["a", "b"]}; $ne/$nin match when NO element matches; range operators
   match when any numeric element satisfies them. Equality is type-strict (true != 1,
   "1" != 1; 1 == 1.0). A missing key fails $eq/$in/range operators and satisfies
   $ne/$nin (Mongo-style; the AWS docs do not say). Keys listed in the index's
   metadataConfiguration.nonFilterableMetadataKeys are treated as missing by filters
   but still returned with returnMetadata. A malformed filter (unknown $operator, $in
   with an empty or non-list value, ...) gives ValidationException.

2. CreateIndex: a second CreateIndex with an existing name answers ConflictException
   (moto 5.2.5 silently replaced the index, dropping all its vectors); the request's
   metadataConfiguration is kept and returned by GetIndex.

3. creationTime (a required member) is set on vector buckets and indexes, so
   GetVectorBucket/ListVectorBuckets/GetIndex/ListIndexes return it (moto 5.2.5
   omitted it).

4. ListVectors honours maxResults (default 500, 1..1000), nextToken and
   segmentCount/segmentIndex (moto 5.2.5 ignored them all and returned every vector).
   Pages are ordered by key; nextToken is the last key returned (opaque to clients).

5. The API's list lengths are enforced server-side, as AWS does (boto3 checks them on the
   client, the Rust SDK does not): PutVectors 1..500 vectors, GetVectors 1..100 keys,
   DeleteVectors 1..500 keys -> ValidationException.

6. Requests are serialized (one at a time through moto, behind a lock). moto's
   backends have no locking: concurrent TransactWriteItems on one table fail with
   HTTP 500 ("dictionary changed size during iteration" in its deepcopy of the table)
   and concurrent conditional writes can both succeed. `--no-serialize` turns this off.

7. TransactWriteItems rolls back item by item: moto 5.2.5 deep-copies every table a
   transaction touches before applying it, so one post to a 10,000-finding room copies
   10,000 items, and a large-room run grew the server past 20 GB. The extension snapshots
   only the items the transaction names and restores exactly those on cancellation; the
   whole-table copy is skipped (identity) for that one call site. Conditions, errors and
   cancellation reasons are moto's own, unchanged.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import logging
import math
import os
import signal
import sys
import threading
import zlib
from typing import Any

import moto.dynamodb.models as ddb_models
import moto.s3vectors.urls as s3vectors_urls
from moto.core.responses import ActionResult
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.s3vectors import exceptions as s3v_exc
from moto.s3vectors.models import Index, S3VectorsBackend, VectorBucket
from moto.s3vectors.responses import S3VectorsResponse

MAX_TOP_K = 100
LIST_DEFAULT_MAX_RESULTS = 500
LIST_MAX_RESULTS = 1000

_MISSING = object()


class IndexAlreadyExists(s3v_exc.ServiceException):
    code = "ConflictException"

    def __init__(self) -> None:
        super().__init__("An index with the specified name already exists")


def _validation(msg: str) -> Exception:
    return s3v_exc.ValidationError(msg)


# --------------------------------------------------------------------------- filters


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_primitive(x: Any) -> bool:
    return isinstance(x, (str, bool)) or _is_number(x)


def _scalar_eq(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return float(a) == float(b)
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return False


def _eq(value: Any, operand: Any) -> bool:
    if value is _MISSING:
        return False
    if isinstance(value, list):
        return any(_scalar_eq(e, operand) for e in value)
    return _scalar_eq(value, operand)


_RANGE_OPS = {
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}


def _apply_op(op: str, operand: Any, value: Any) -> bool:
    if op in ("$eq", "$ne"):
        if not _is_primitive(operand):
            raise _validation(f"Invalid query filter: {op} expects a string, number or boolean")
        hit = _eq(value, operand)
        return hit if op == "$eq" else not hit
    if op in _RANGE_OPS:
        if not _is_number(operand):
            raise _validation(f"Invalid query filter: {op} expects a number")
        cmp = _RANGE_OPS[op]
        values = value if isinstance(value, list) else [value]
        return any(_is_number(v) and cmp(v, operand) for v in values)
    if op in ("$in", "$nin"):
        if not isinstance(operand, list) or not operand or not all(_is_primitive(x) for x in operand):
            raise _validation(f"Invalid query filter: {op} expects a non-empty array of primitives")
        hit = any(_eq(value, x) for x in operand)
        return hit if op == "$in" else not hit
    if op == "$exists":
        if not isinstance(operand, bool):
            raise _validation("Invalid query filter: $exists expects a boolean")
        return (value is not _MISSING) == operand
    raise _validation(f"Invalid query filter: unsupported operator {op}")


def filter_matches(flt: Any, metadata: Any, non_filterable: frozenset[str] = frozenset()) -> bool:
    """Evaluates an S3 Vectors metadata filter against one vector's metadata."""
    if not isinstance(flt, dict) or not flt:
        raise _validation("Invalid query filter: a filter must be a non-empty object")
    metadata = metadata if isinstance(metadata, dict) else {}
    for key, cond in flt.items():
        if key in ("$and", "$or"):
            if not isinstance(cond, list) or not cond:
                raise _validation(f"Invalid query filter: {key} expects a non-empty array of filters")
            results = (filter_matches(sub, metadata, non_filterable) for sub in cond)
            ok = all(results) if key == "$and" else any(results)
        elif key.startswith("$"):
            raise _validation(f"Invalid query filter: unsupported operator {key}")
        else:
            value = _MISSING if key in non_filterable else metadata.get(key, _MISSING)
            if isinstance(cond, dict):
                if not cond or not all(isinstance(k, str) and k.startswith("$") for k in cond):
                    raise _validation(f"Invalid query filter for key '{key}'")
                ok = all(_apply_op(op, operand, value) for op, operand in cond.items())
            elif _is_primitive(cond):
                ok = _eq(value, cond)
            else:
                raise _validation(f"Invalid query filter for key '{key}'")
        if not ok:
            return False
    return True


# --------------------------------------------------------------------------- distances


def _cosine_distance(q: list[float], q_norm: float, v: list[float]) -> float:
    v_norm = math.sqrt(math.fsum(x * x for x in v))
    if v_norm == 0.0:
        return 1.0
    cos = math.fsum(a * b for a, b in zip(q, v)) / (q_norm * v_norm)
    return 1.0 - max(-1.0, min(1.0, cos))


def _euclidean_distance(q: list[float], v: list[float]) -> float:
    return math.sqrt(math.fsum((a - b) * (a - b) for a, b in zip(q, v)))


# --------------------------------------------------------------------------- backend


def _backend_query_vectors(
    self: S3VectorsBackend,
    vector_bucket_name: str,
    index_name: str,
    index_arn: str,
    top_k: int,
    query_vector: list[float],
    flt: Any,
) -> tuple[Index, list[tuple[float, Any]]]:
    index = self.get_index(vector_bucket_name, index_name=index_name, index_arn=index_arn)
    if len(query_vector) != index.dimension:
        raise _validation(
            f"Query vector must have length {index.dimension}, but has length {len(query_vector)}"
        )
    if not all(_is_number(x) and math.isfinite(x) for x in query_vector):
        raise _validation("Query vector contains invalid values")
    non_filterable = frozenset(
        (getattr(index, "metadata_configuration", None) or {}).get("nonFilterableMetadataKeys") or []
    )
    metric = index.distance_metric
    q_norm = math.sqrt(math.fsum(x * x for x in query_vector))
    if metric == "cosine" and q_norm == 0.0:
        raise _validation("Query vector must not be a zero vector for the cosine distance metric")
    scored = []
    for vector in index.vectors.values():
        if flt is not None and not filter_matches(flt, vector.metadata, non_filterable):
            continue
        data = vector.data.get(index.data_type) or []
        if metric == "cosine":
            dist = _cosine_distance(query_vector, q_norm, data)
        else:
            dist = _euclidean_distance(query_vector, data)
        scored.append((dist, vector))
    scored.sort(key=lambda dv: (dv[0], dv[1].key))
    return index, scored[:top_k]


_orig_backend_create_index = S3VectorsBackend.create_index


def _backend_create_index(self: S3VectorsBackend, vector_bucket_name: str, vector_bucket_arn: str,
                          index_name: str, *args: Any, **kwargs: Any) -> None:
    bucket = self.get_vector_bucket(vector_bucket_name=vector_bucket_name, vector_bucket_arn=vector_bucket_arn)
    if any(ix.index_name == index_name for ix in bucket.indexes.values()):
        raise IndexAlreadyExists()
    _orig_backend_create_index(self, vector_bucket_name, vector_bucket_arn, index_name, *args, **kwargs)


# --------------------------------------------------------------------------- responses


def _response_query_vectors(self: S3VectorsResponse) -> ActionResult:
    vector_bucket_name = self._get_param("vectorBucketName")
    index_arn = self._get_param("indexArn")
    index_name = self._get_param("indexName")
    self._validate_index_params(index_arn, index_name, vector_bucket_name)
    top_k = self._get_param("topK")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K:
        raise _validation(
            "1 validation error detected. Value at '/topK' failed to satisfy constraint: "
            f"Member must be between 1 and {MAX_TOP_K}, inclusive"
        )
    if self._get_param("queryTexts"):
        raise _validation("queryTexts (full-text search) is not supported by moto_macp")
    query_vector = (self._get_param("queryVector") or {}).get("float32")
    if not isinstance(query_vector, list):
        raise _validation("queryVector.float32 is required")
    flt = self._get_param("filter")
    return_distance = self._get_bool_param("returnDistance", False)
    return_metadata = self._get_bool_param("returnMetadata", False)

    index, scored = _backend_query_vectors(
        self.s3vectors_backend, vector_bucket_name, index_name, index_arn, top_k, query_vector, flt
    )
    out = []
    for dist, vector in scored:
        item: dict[str, Any] = {"key": vector.key}
        if return_distance:
            item["distance"] = dist
        if return_metadata and vector.metadata:
            item["metadata"] = vector.metadata
        out.append(item)
    return ActionResult({"vectors": out, "distanceMetric": index.distance_metric})


_orig_response_create_index = S3VectorsResponse.create_index


def _response_create_index(self: S3VectorsResponse) -> ActionResult:
    result = _orig_response_create_index(self)
    config = self._get_param("metadataConfiguration")
    if config:
        bucket = self.s3vectors_backend.get_vector_bucket(
            vector_bucket_name=self._get_param("vectorBucketName"),
            vector_bucket_arn=self._get_param("vectorBucketArn"),
        )
        name = self._get_param("indexName")
        for index in bucket.indexes.values():
            if index.index_name == name:
                index.metadata_configuration = config
    return result


def _encode_token(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode("utf-8")).decode("ascii")


def _decode_token(token: str) -> str:
    try:
        return base64.urlsafe_b64decode(token.encode("ascii")).decode("utf-8")
    except Exception:  # noqa: BLE001 - any garbage token is a client error
        raise _validation("Invalid nextToken") from None


def _response_list_vectors(self: S3VectorsResponse) -> ActionResult:
    vector_bucket_name = self._get_param("vectorBucketName")
    index_arn = self._get_param("indexArn")
    index_name = self._get_param("indexName")
    self._validate_index_params(index_arn, index_name, vector_bucket_name)
    return_data = self._get_bool_param("returnData", False)
    return_metadata = self._get_bool_param("returnMetadata", False)
    max_results = self._get_param("maxResults")
    if max_results is None:
        max_results = LIST_DEFAULT_MAX_RESULTS
    if not 1 <= max_results <= LIST_MAX_RESULTS:
        raise _validation(
            "1 validation error detected. Value at '/maxResults' failed to satisfy constraint: "
            f"Member must be between 1 and {LIST_MAX_RESULTS}, inclusive"
        )
    segment_count = self._get_param("segmentCount")
    segment_index = self._get_param("segmentIndex")
    if (segment_count is None) != (segment_index is None):
        raise _validation("segmentCount and segmentIndex must be specified together")
    if segment_count is not None and not 0 <= segment_index < segment_count:
        raise _validation("segmentIndex must be less than segmentCount")
    token = self._get_param("nextToken")
    after = _decode_token(token) if token else None

    vectors = sorted(
        self.s3vectors_backend.list_vectors(
            vector_bucket_name=vector_bucket_name, index_arn=index_arn, index_name=index_name
        ),
        key=lambda v: v.key,
    )
    if segment_count is not None:
        vectors = [v for v in vectors if zlib.crc32(v.key.encode("utf-8")) % segment_count == segment_index]
    if after is not None:
        vectors = [v for v in vectors if v.key > after]
    page = vectors[:max_results]
    result: dict[str, Any] = {
        "vectors": [
            {
                "key": v.key,
                "data": v.data if return_data else None,
                "metadata": v.metadata if return_metadata else None,
            }
            for v in page
        ]
    }
    if len(vectors) > max_results:
        result["nextToken"] = _encode_token(page[-1].key)
    return ActionResult(result)


_LIST_LIMITS = {"put_vectors": ("vectors", 500), "get_vectors": ("keys", 100), "delete_vectors": ("keys", 500)}


def _with_list_limit(method: Any, param: str, limit: int) -> Any:
    def wrapper(self: S3VectorsResponse) -> ActionResult:
        value = self._get_param(param)
        if not isinstance(value, list) or not 1 <= len(value) <= limit:
            raise _validation(
                f"1 validation error detected. Value at '/{param}' failed to satisfy constraint: "
                f"Member must have length between 1 and {limit}, inclusive"
            )
        return method(self)

    wrapper.__name__ = method.__name__
    return wrapper


# --------------------------------------------------------------------------- creationTime


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _wrap_init_with_creation_time(cls: type) -> None:
    orig = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        orig(self, *args, **kwargs)
        self.creation_time = _now()

    __init__.__wrapped__ = orig  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[method-assign]


# --------------------------------------------------------------- DynamoDB transactions


class _CopyExceptTables:
    """Stands in for the `copy` module inside moto.dynamodb.models: a Table is "copied" as
    itself, so TransactWriteItems' whole-table backup costs nothing (point 7); everything
    else is deep-copied as before."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def deepcopy(self, x: Any, memo: Any = None) -> Any:
        return x if isinstance(x, Table) else self._real.deepcopy(x, memo)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _item_slot(backend: Any, op_type: str, op: dict[str, Any]) -> tuple[Table, DynamoType, DynamoType | None] | None:
    table = backend.tables.get(op.get("TableName"))
    key = op.get("Item") if op_type == "Put" else op.get("Key")
    if table is None or not isinstance(key, dict) or table.hash_key_attr not in key:
        return None
    rng = table.range_key_attr
    if rng is not None and rng not in key:
        return None
    return table, DynamoType(key[table.hash_key_attr]), DynamoType(key[rng]) if rng else None


def _wrap_transact_write_items(orig: Any) -> Any:
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        saved = []
        for entry in transact_items:
            if not isinstance(entry, dict) or len(entry) != 1:
                continue
            op_type, op = next(iter(entry.items()))
            slot = _item_slot(self, op_type, op) if isinstance(op, dict) else None
            if slot is not None:
                table, h, r = slot
                saved.append((table, h, r, ddb_models.copy.deepcopy(table.get_item(h, r))))
        try:
            orig(self, transact_items)
        except Exception:
            # Undo in reverse, so an item named twice ends in its first snapshot.
            for table, h, r, before in reversed(saved):
                if r is None:
                    table.items.pop(h, None)
                    if before is not None:
                        table.items[h] = before
                else:
                    table.items[h].pop(r, None)
                    if before is not None:
                        table.items[h][r] = before
                    if not table.items[h]:
                        del table.items[h]
            raise

    transact_write_items.__wrapped__ = orig  # type: ignore[attr-defined]
    return transact_write_items


# --------------------------------------------------------------------------- install

_installed = False


def install_extensions() -> None:
    """Patches moto's s3vectors service in this process. Idempotent; call before serving."""
    global _installed
    if _installed:
        return
    s3vectors_urls.url_paths["{0}/QueryVectors$"] = S3VectorsResponse.dispatch
    S3VectorsResponse.query_vectors = _response_query_vectors  # type: ignore[attr-defined]
    S3VectorsResponse.create_index = _response_create_index  # type: ignore[method-assign]
    S3VectorsResponse.list_vectors = _response_list_vectors  # type: ignore[method-assign]
    S3VectorsBackend.create_index = _backend_create_index  # type: ignore[method-assign]
    for name, (param, limit) in _LIST_LIMITS.items():
        setattr(S3VectorsResponse, name, _with_list_limit(getattr(S3VectorsResponse, name), param, limit))
    _wrap_init_with_creation_time(VectorBucket)
    _wrap_init_with_creation_time(Index)
    ddb_models.copy = _CopyExceptTables(ddb_models.copy)  # type: ignore[assignment]
    backend_cls = ddb_models.DynamoDBBackend
    backend_cls.transact_write_items = _wrap_transact_write_items(backend_cls.transact_write_items)  # type: ignore[method-assign]
    _installed = True


class SerializedApp:
    """Runs one request at a time through moto (see the module docstring, point 6)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        with self.lock:
            result = self.app(environ, start_response)
            try:
                return [b"".join(result)]
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()


def make_app(serialize: bool = True) -> Any:
    """moto's WSGI dispatcher with the extensions installed (optionally serialized)."""
    install_extensions()
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    app = DomainDispatcherApplication(create_backend_app)
    return SerializedApp(app) if serialize else app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (default)")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    parser.add_argument("--exit-on-stdin-eof", action="store_true",
                        help="also stop when stdin reaches EOF (spawn with a stdin pipe, so the server "
                             "dies with its parent)")
    parser.add_argument("--no-serialize", action="store_true",
                        help="let moto handle requests concurrently (unsafe: see point 6 of the docstring)")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    if not args.verbose:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)

    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if args.exit_on_stdin_eof:

        def watch_stdin() -> None:
            # os.read, not sys.stdin: a daemon thread blocked in a buffered read aborts the
            # interpreter at exit ("could not acquire lock for <stdin>").
            fd = sys.stdin.fileno()
            while os.read(fd, 65536):
                pass
            stop.set()

        threading.Thread(target=watch_stdin, name="stdin-eof", daemon=True).start()

    server = make_server(args.host, args.port, make_app(serialize=not args.no_serialize), threaded=True,
                         request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, name="moto", daemon=True)
    thread.start()
    print(f"listening on http://{args.host}:{server.server_port}", flush=True)
    while not stop.wait(0.5):
        pass
    server.shutdown()
    thread.join(timeout=10)
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
