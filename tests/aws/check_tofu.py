#!/usr/bin/env python3
"""Checks that the OpenTofu module in deploy/tofu declares what macp-aws expects.

macp-aws/schema.json is the contract: the Rust setup operation creates exactly those DynamoDB
tables, and this script fails if the module drifts from it. It parses every .tf file with
python-hcl2 (no tofu/terraform binary, no AWS account) and checks:

  * the tables: name <prefix variable><table>, hash and range keys, attribute names and types,
    every LSI and GSI with its keys and projection, the TTL attribute, billing mode,
    point-in-time recovery and server-side encryption; no table that schema.json does not list;
  * the S3 Vectors index: data type and distance metric as schema.json says, dimension taken from
    a number variable with the expected default, no filterable metadata key made non-filterable;
  * the region variable's validation list equals schema.json's s3_vectors_regions;
  * the AWS provider is pinned to a version that has the S3 Vectors resources;
  * every S3 bucket blocks public access (all four settings) and has default encryption;
  * the server's IAM policy grants the table actions on each table and its indexes, object
    read/write in the artifact bucket, vector read/write on the index, InvokeModel on the
    embedding model only, and nothing on "*";
  * at least two instances (the autoscaling group's min and desired size, var.instance_count's
    default and validation), replaced by instance refresh keeping at least half healthy;
  * TLS by default: the HTTPS listener has a certificate, port 80 only redirects to HTTPS, and
    a plain HTTP listener that forwards exists only under a precondition on allow_plain_http
    (default false).

Usage (from anywhere; paths resolve from this file):

    python tests/aws/check_tofu.py [--tofu-dir DIR] [--schema FILE]

Prints one summary line and exits 0 when everything matches; prints one line per problem and
exits 1 otherwise.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TOFU_DIR = ROOT / "deploy" / "tofu"
DEFAULT_SCHEMA = ROOT / "macp-aws" / "schema.json"

# The first AWS provider release with aws_s3vectors_vector_bucket and aws_s3vectors_index.
MIN_PROVIDER = (6, 24, 0)
# Used when schema.json does not say (it describes tables and the index, not the model).
DEFAULT_EMBEDDING_MODEL = "amazon.titan-embed-text-v2:0"
DEFAULT_DIMENSION = 256

# BatchWriteItem and DeleteItem: a room whose retention ran out is purged (macp-aws/src/store/rooms.rs).
TABLE_ACTIONS = {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query",
                 "dynamodb:BatchWriteItem", "dynamodb:DeleteItem"}
INDEX_ACTIONS = {"dynamodb:Query"}
# Erasure deletes every version of an artifact's object (macp-aws/src/blobs.rs) and its vector.
OBJECT_ACTIONS = {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"}
VECTOR_ACTIONS = {"s3vectors:PutVectors", "s3vectors:GetVectors", "s3vectors:QueryVectors", "s3vectors:DeleteVectors"}

try:
    import hcl2
except ImportError:  # pragma: no cover - environment problem, not drift
    sys.exit(
        "check_tofu: python-hcl2 is not installed; run `bash scripts/setup-e2e.sh` and use the "
        "python it prints (tests/e2e/requirements.txt pins python-hcl2)"
    )

REF = re.compile(r"^\$\{([^{}]+)\}$")


def ref(value: object) -> str | None:
    """`${aws_x.y.z}` -> `aws_x.y.z`; anything else -> None."""
    if isinstance(value, str):
        m = REF.match(value)
        if m:
            return m.group(1).strip()
    return None


class Module:
    """Every top-level block of the .tf files in one directory."""

    def __init__(self, directory: Path):
        self.files = sorted(directory.glob("*.tf"))
        self.resources: dict[str, dict[str, dict]] = {}
        self.data: dict[str, dict[str, dict]] = {}
        self.variables: dict[str, dict] = {}
        self.locals: dict[str, object] = {}
        self.providers: dict[str, dict] = {}
        self.required_providers: dict[str, object] = {}
        self.errors: list[str] = []
        opts = hcl2.SerializationOptions(
            strip_string_quotes=True, explicit_blocks=False, with_comments=False
        )
        for path in self.files:
            try:
                with path.open(encoding="utf-8") as f:
                    doc = hcl2.load(f, serialization_options=opts)
            except Exception as e:  # noqa: BLE001 - any parse failure is a finding
                self.errors.append(f"{path.name}: cannot parse: {e}")
                continue
            self._add(path.name, doc)

    def _add(self, file: str, doc: dict) -> None:
        for kind, store in (("resource", self.resources), ("data", self.data)):
            for block in doc.get(kind, []):
                for rtype, by_label in block.items():
                    for label, body in by_label.items():
                        if label in store.setdefault(rtype, {}):
                            self.errors.append(f"{file}: {kind} {rtype}.{label} is declared twice")
                        store[rtype][label] = body
        for block in doc.get("variable", []):
            for name, body in block.items():
                self.variables[name] = body
        for block in doc.get("locals", []):
            self.locals.update(block)
        for block in doc.get("provider", []):
            for name, body in block.items():
                self.providers[name] = body
        for block in doc.get("terraform", []):
            for req in block.get("required_providers", []):
                self.required_providers.update(req)

    def resource(self, rtype: str) -> dict[str, dict]:
        return self.resources.get(rtype, {})

    def resolve(self, value: object, depth: int = 0) -> object:
        """Substitutes `${var.x}` (its default) and `${local.x}` where those are literals."""
        if not isinstance(value, str) or depth > 8:
            return value
        whole = ref(value)
        if whole is not None:
            target = self._lookup(whole)
            if target is not None:
                return self.resolve(target, depth + 1)
            return value

        def sub(m: re.Match) -> str:
            target = self._lookup(m.group(1).strip())
            if isinstance(target, (str, int, float)) and not isinstance(target, bool):
                return str(self.resolve(target, depth + 1))
            return m.group(0)

        return re.sub(r"\$\{([A-Za-z0-9_.]+)\}", sub, value)

    def _lookup(self, expr: str) -> object:
        if expr.startswith("var."):
            var = self.variables.get(expr[4:])
            return None if var is None else var.get("default")
        if expr.startswith("local."):
            return self.locals.get(expr[6:])
        return None


class Checker:
    def __init__(self, module: Module, schema: dict):
        self.m = module
        self.schema = schema
        self.problems: list[str] = list(module.errors)
        self.facts: list[str] = []
        self.table_labels: dict[str, str] = {}  # schema table name -> resource label

    def fail(self, msg: str) -> None:
        self.problems.append(msg)

    # -- tables ---------------------------------------------------------------------------

    def check_tables(self) -> None:
        tables = self.m.resource("aws_dynamodb_table")
        want = self.schema["tables"]
        prefixes: set[str] = set()
        found: dict[str, str] = {}
        for label, body in tables.items():
            where = f"aws_dynamodb_table.{label}"
            for meta in ("count", "for_each", "dynamic"):
                if meta in body:
                    self.fail(f"{where}: uses `{meta}`; declare each table literally so it can be checked")
            name = body.get("name")
            m = re.fullmatch(r"\$\{((?:var|local)\.[A-Za-z0-9_-]+)\}([A-Za-z0-9_.-]+)", str(name))
            if not m:
                self.fail(
                    f"{where}: name is {name!r}; expected \"${{var.<prefix>}}<table>\" "
                    f"(macp-aws names tables <prefix><name>)"
                )
                continue
            prefix, table = m.groups()
            prefixes.add(prefix)
            kind, pname = prefix.split(".", 1)
            declared = self.m.variables if kind == "var" else self.m.locals
            if pname not in declared:
                self.fail(f"{where}: name uses {prefix}, which is not declared")
            if table in found:
                self.fail(f"{where}: table {table!r} is also declared by aws_dynamodb_table.{found[table]}")
                continue
            found[table] = label
            if table not in want:
                self.fail(f"{where}: declares table {table!r}, which macp-aws/schema.json does not list")
        if len(prefixes) > 1:
            self.fail(f"tables use different name prefixes: {', '.join(sorted(prefixes))}")
        for table in want:
            if table not in found:
                self.fail(f"table {table!r} from macp-aws/schema.json is not declared (no aws_dynamodb_table named ${{var.<prefix>}}{table})")
        for table, spec in want.items():
            if table in found:
                self.table_labels[table] = found[table]
                self._check_table(table, spec, tables[found[table]])
        n_lsi = sum(len(s.get("local_secondary_indexes", [])) for s in want.values())
        n_gsi = sum(len(s.get("global_secondary_indexes", [])) for s in want.values())
        prefix = next(iter(prefixes), "?")
        self.facts.append(f"{len(found)} tables named ${{{prefix}}}<name> with {n_lsi} LSI and {n_gsi} GSIs")

    def _check_table(self, table: str, spec: dict, body: dict) -> None:
        where = f"table {table}"
        hk, rk = body.get("hash_key"), body.get("range_key")
        if hk != spec["hash_key"]:
            self.fail(f"{where}: hash_key is {hk!r}, schema.json says {spec['hash_key']!r}")
        if rk != spec.get("range_key"):
            self.fail(f"{where}: range_key is {rk!r}, schema.json says {spec.get('range_key')!r}")

        attrs: dict[str, str] = {}
        for a in body.get("attribute", []):
            n, t = a.get("name"), a.get("type")
            if n in attrs:
                self.fail(f"{where}: attribute {n!r} is declared twice")
            attrs[n] = t
        want_attrs = spec["attributes"]
        for n, t in want_attrs.items():
            if n not in attrs:
                self.fail(f"{where}: attribute {n!r} ({t}) is missing")
            elif attrs[n] != t:
                self.fail(f"{where}: attribute {n!r} has type {attrs[n]!r}, schema.json says {t!r}")
        for n in attrs:
            if n not in want_attrs:
                self.fail(f"{where}: attribute {n!r} is not in schema.json")

        billing = body.get("billing_mode")
        if billing != self.schema["billing_mode"]:
            self.fail(f"{where}: billing_mode is {billing!r}, schema.json says {self.schema['billing_mode']!r}")
        if not _enabled(body, "point_in_time_recovery"):
            self.fail(f"{where}: point_in_time_recovery is not enabled")
        if not _enabled(body, "server_side_encryption"):
            self.fail(f"{where}: server_side_encryption is not enabled")
        ttl = [t.get("attribute_name") for t in body.get("ttl", []) if t.get("enabled") is True]
        want_ttl = spec.get("ttl_attribute")
        if (ttl[0] if ttl else None) != want_ttl:
            self.fail(f"{where}: TTL is on {ttl[0] if ttl else None!r}, schema.json says {want_ttl!r}")

        lsis = {}
        for i in body.get("local_secondary_index", []):
            lsis[i.get("name")] = {
                "range_key": i.get("range_key"),
                "projection": i.get("projection_type"),
                "non_key_attributes": i.get("non_key_attributes"),
            }
        self._compare_indexes(where, "local", lsis, spec.get("local_secondary_indexes", []), ("range_key",))

        gsis = {}
        for i in body.get("global_secondary_index", []):
            hash_key, range_key = i.get("hash_key"), i.get("range_key")
            for ks in i.get("key_schema", []):
                if ks.get("key_type") == "HASH":
                    hash_key = ks.get("attribute_name") if hash_key is None else hash_key
                elif ks.get("key_type") == "RANGE":
                    range_key = ks.get("attribute_name") if range_key is None else range_key
            gsis[i.get("name")] = {
                "hash_key": hash_key,
                "range_key": range_key,
                "projection": i.get("projection_type"),
                "non_key_attributes": i.get("non_key_attributes"),
            }
        self._compare_indexes(
            where, "global", gsis, spec.get("global_secondary_indexes", []), ("hash_key", "range_key")
        )

    def _compare_indexes(self, where, kind, have: dict, want: list, keys: tuple) -> None:
        want_by_name = {w["name"]: w for w in want}
        for name, w in want_by_name.items():
            h = have.get(name)
            if h is None:
                self.fail(f"{where}: {kind} secondary index {name!r} is missing")
                continue
            for k in keys:
                if h.get(k) != w.get(k):
                    self.fail(f"{where}: {kind} secondary index {name!r} has {k} {h.get(k)!r}, schema.json says {w.get(k)!r}")
            if h["projection"] != w["projection"]:
                self.fail(f"{where}: {kind} secondary index {name!r} projects {h['projection']!r}, schema.json says {w['projection']!r}")
            if w.get("non_key_attributes") is not None and sorted(h["non_key_attributes"] or []) != sorted(w["non_key_attributes"]):
                self.fail(f"{where}: {kind} secondary index {name!r} non_key_attributes differ from schema.json")
        for name in have:
            if name not in want_by_name:
                self.fail(f"{where}: {kind} secondary index {name!r} is not in schema.json")

    # -- vectors --------------------------------------------------------------------------

    def check_vectors(self) -> None:
        vec = self.schema["vectors"]
        buckets = self.m.resource("aws_s3vectors_vector_bucket")
        indexes = self.m.resource("aws_s3vectors_index")
        if len(buckets) != 1:
            self.fail(f"expected one aws_s3vectors_vector_bucket, found {len(buckets)}")
        if len(indexes) != 1:
            self.fail(f"expected one aws_s3vectors_index, found {len(indexes)}")
            return
        label, body = next(iter(indexes.items()))
        where = f"aws_s3vectors_index.{label}"
        bucket_ref = ref(body.get("vector_bucket_name")) or ""
        if not any(bucket_ref == f"aws_s3vectors_vector_bucket.{b}.vector_bucket_name" for b in buckets):
            self.fail(f"{where}: vector_bucket_name should reference the vector bucket resource, is {body.get('vector_bucket_name')!r}")
        for field, want in (("data_type", vec["data_type"]), ("distance_metric", vec["distance_metric"])):
            raw = body.get(field)
            value = self.m.resolve(raw)
            if value != want:
                self.fail(f"{where}: {field} is {raw!r} (= {value!r}), schema.json says {want!r}")
        dim_raw = body.get("dimension")
        dim_var = ref(dim_raw)
        want_dim = vec.get("dimension", DEFAULT_DIMENSION)
        if dim_var is None or not dim_var.startswith("var."):
            self.fail(f"{where}: dimension should come from a variable, is {dim_raw!r}")
        else:
            var = self.m.variables.get(dim_var[4:])
            if var is None:
                self.fail(f"{where}: dimension uses {dim_var}, which is not declared")
            else:
                if var.get("type") != "number":
                    self.fail(f"variable {dim_var[4:]}: type should be number, is {var.get('type')!r}")
                if var.get("default") != want_dim:
                    self.fail(f"variable {dim_var[4:]}: default is {var.get('default')!r}, expected {want_dim}")
                self.facts.append(
                    f"vector index {self.m.resolve(body.get('data_type'))}/{self.m.resolve(body.get('distance_metric'))} "
                    f"dimension {dim_var} (default {var.get('default')})"
                )
        for mc in body.get("metadata_configuration", []):
            hidden = set(mc.get("non_filterable_metadata_keys") or [])
            clash = hidden & set(vec.get("filterable_metadata", []))
            if clash:
                self.fail(f"{where}: makes {sorted(clash)} non-filterable; schema.json needs them filterable")

    def check_index_name(self) -> None:
        """The module must create the index under the name macp-aws computes for Titan at each
        dimension (schema.json's vectors.index_names, which a Rust unit test also pins)."""
        want = self.schema["vectors"].get("index_names", {})
        indexes = self.m.resource("aws_s3vectors_index")
        if not want or len(indexes) != 1:
            self.fail("schema.json vectors.index_names is missing, or the module has no single index")
            return
        raw = next(iter(indexes.values())).get("index_name")
        for model_id, name in want.items():
            dim = model_id.rsplit("@", 1)[1]
            got = _eval_name(self.m, raw, {"var.embedding_dimension": dim})
            if got != name:
                self.fail(f"vector index name for {model_id}: the module makes {got!r}, macp-aws looks for {name!r}")
        self.facts.append(f"index names agree with macp-aws for {len(want)} Titan dimensions")

    # -- region and provider --------------------------------------------------------------

    def check_region(self) -> None:
        want = self.schema["s3_vectors_regions"]
        aws = self.m.providers.get("aws")
        if aws is None:
            self.fail('no provider "aws" block: cannot tell which variable sets the region')
            return
        region_ref = ref(aws.get("region"))
        if region_ref is None or not region_ref.startswith("var."):
            self.fail(f'provider "aws": region should be a variable, is {aws.get("region")!r}')
            return
        name = region_ref[4:]
        var = self.m.variables.get(name)
        if var is None:
            self.fail(f'provider "aws" uses var.{name}, which is not declared')
            return
        lists = []
        for v in var.get("validation", []):
            cond = str(v.get("condition", ""))
            m = re.search(r"contains\(\s*\[(.*?)\]\s*,\s*var\." + re.escape(name) + r"\s*\)", cond, re.S)
            if m:
                lists.append(re.findall(r'"([^"]*)"', m.group(1)))
        if len(lists) != 1:
            self.fail(f"variable {name}: expected one validation `contains([...], var.{name})`, found {len(lists)}")
            return
        have = lists[0]
        dupes = sorted({r for r in have if have.count(r) > 1})
        if dupes:
            self.fail(f"variable {name}: validation lists {dupes} more than once")
        missing = [r for r in want if r not in have]
        extra = [r for r in have if r not in want]
        if missing:
            self.fail(f"variable {name}: validation lacks {missing} (in schema.json s3_vectors_regions)")
        if extra:
            self.fail(f"variable {name}: validation allows {extra}, not in schema.json s3_vectors_regions")
        default = var.get("default")
        if default not in have:
            self.fail(f"variable {name}: default {default!r} is not in its own validation list")
        self.facts.append(f"var.{name} (default {default}) validated against the {len(want)} S3 Vectors regions")

    def check_provider_version(self) -> None:
        aws = self.m.required_providers.get("aws")
        if not isinstance(aws, dict) or not aws.get("version"):
            self.fail("terraform.required_providers.aws has no version constraint")
            return
        constraint = str(aws["version"])
        floor = None
        for part in constraint.split(","):
            m = re.match(r"\s*(>=|~>|=)?\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?\s*$", part)
            if m and m.group(1) in (">=", "~>", "=", None):
                floor = tuple(int(x or 0) for x in m.groups()[1:])
        if floor is None:
            self.fail(f"aws provider constraint {constraint!r} has no lower bound")
        elif floor < MIN_PROVIDER:
            self.fail(
                f"aws provider constraint {constraint!r} admits versions before "
                f"{'.'.join(map(str, MIN_PROVIDER))}, which lack aws_s3vectors_*"
            )
        else:
            self.facts.append(f"aws provider {constraint}")

    # -- buckets --------------------------------------------------------------------------

    def check_buckets(self) -> None:
        buckets = self.m.resource("aws_s3_bucket")
        if not buckets:
            self.fail("no aws_s3_bucket: the artifact bucket is missing")
            return
        pabs = self.m.resource("aws_s3_bucket_public_access_block")
        sses = self.m.resource("aws_s3_bucket_server_side_encryption_configuration")
        for label in buckets:
            targets = {f"aws_s3_bucket.{label}.id", f"aws_s3_bucket.{label}.bucket"}
            blocks = [b for b in pabs.values() if ref(b.get("bucket")) in targets]
            if not blocks:
                self.fail(f"aws_s3_bucket.{label}: no aws_s3_bucket_public_access_block")
            for b in blocks:
                for flag in ("block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets"):
                    if b.get(flag) is not True:
                        self.fail(f"aws_s3_bucket.{label}: public access block has {flag} = {json.dumps(b.get(flag))}, must be true")
            if not any(ref(s.get("bucket")) in targets for s in sses.values()):
                self.fail(f"aws_s3_bucket.{label}: no aws_s3_bucket_server_side_encryption_configuration")
        self.facts.append(f"{len(buckets)} S3 bucket(s) with public access blocked")

    # -- IAM ------------------------------------------------------------------------------

    def _statements(self) -> list[dict]:
        docs = self.m.data.get("aws_iam_policy_document", {})
        attached = []
        for rtype in ("aws_iam_role_policy", "aws_iam_policy"):
            for label, body in self.m.resource(rtype).items():
                r = ref(body.get("policy")) or ""
                m = re.fullmatch(r"data\.aws_iam_policy_document\.([A-Za-z0-9_-]+)\.json", r)
                if not m or m.group(1) not in docs:
                    self.fail(f"{rtype}.{label}: policy should be an aws_iam_policy_document's .json, is {body.get('policy')!r}")
                    continue
                attached.append(m.group(1))
        if not attached:
            self.fail("no aws_iam_role_policy or aws_iam_policy: the server has no permissions")
        out = []
        for name in attached:
            for st in docs[name].get("statement", []):
                if st.get("effect", "Allow") != "Allow":
                    continue
                actions = st.get("actions", [])
                resources = st.get("resources", [])
                if not isinstance(actions, list) or not isinstance(resources, list):
                    self.fail(f"aws_iam_policy_document.{name}: statement {st.get('sid')!r} has non-literal actions or resources")
                    continue
                for a in actions:
                    if a == "*" or str(a).endswith(":*"):
                        self.fail(f"aws_iam_policy_document.{name}: statement {st.get('sid')!r} grants {a!r}")
                for r in resources:
                    if r == "*":
                        self.fail(f"aws_iam_policy_document.{name}: statement {st.get('sid')!r} grants on resource '*'")
                if "not_actions" in st or "not_resources" in st:
                    self.fail(f"aws_iam_policy_document.{name}: statement {st.get('sid')!r} uses not_actions/not_resources")
                out.append({"sid": st.get("sid"), "actions": set(actions), "resources": list(resources)})
        return out

    def _granted(self, statements, resource_ok, actions: set) -> bool:
        covered = set()
        for st in statements:
            if any(resource_ok(r) for r in st["resources"]):
                covered |= st["actions"]
        return actions <= covered

    def check_iam(self) -> None:
        sts = self._statements()
        if not sts:
            return
        for table, label in sorted(self.table_labels.items()):
            arn = f"${{aws_dynamodb_table.{label}.arn}}"
            if not self._granted(sts, lambda r, arn=arn: r == arn, TABLE_ACTIONS):
                self.fail(f"IAM: table {table}: no Allow of {sorted(TABLE_ACTIONS)} on {arn}")
            spec = self.schema["tables"][table]
            names = [i["name"] for i in spec.get("local_secondary_indexes", []) + spec.get("global_secondary_indexes", [])]
            if names:
                for idx in names:
                    ok = lambda r, arn=arn, idx=idx: r in (f"{arn}/index/*", f"{arn}/index/{idx}")
                    if not self._granted(sts, ok, INDEX_ACTIONS):
                        self.fail(f"IAM: table {table}: index {idx!r} is not queryable (no dynamodb:Query on {arn}/index/*)")
        buckets = self.m.resource("aws_s3_bucket")
        artifact = [
            b for b in buckets
            if self._granted(sts, lambda r, b=b: r.startswith(f"${{aws_s3_bucket.{b}.arn}}/"), OBJECT_ACTIONS)
        ]
        if not artifact:
            self.fail(f"IAM: no aws_s3_bucket with {sorted(OBJECT_ACTIONS)} on its objects (the artifact bucket)")
        indexes = self.m.resource("aws_s3vectors_index")
        vbuckets = self.m.resource("aws_s3vectors_vector_bucket")
        for label, body in indexes.items():
            arn = f"${{aws_s3vectors_index.{label}.index_arn}}"
            name = _static_prefix(str(self.m.resolve(body.get("index_name"))))
            bucket_ref = ref(body.get("vector_bucket_name")) or ""
            bucket_arns = [
                f"${{aws_s3vectors_vector_bucket.{v}.vector_bucket_arn}}/index/"
                for v in vbuckets
                if bucket_ref == f"aws_s3vectors_vector_bucket.{v}.vector_bucket_name"
            ]

            def ok(r, arn=arn, name=name, bucket_arns=bucket_arns):
                if r == arn:
                    return True
                for b in bucket_arns:
                    if r.startswith(b):
                        # `<bucket>/index/<pattern>`: the pattern must cover the index's name.
                        return _covers(r[len(b):], name)
                return False

            if not self._granted(sts, ok, VECTOR_ACTIONS):
                self.fail(
                    f"IAM: vector index {label} (name {name[0]}{'…' if not name[1] else ''}): no Allow of "
                    f"{sorted(VECTOR_ACTIONS)} on {arn} or a <vector bucket>/index/ pattern covering it"
                )
        model = self.schema.get("embedding_model", DEFAULT_EMBEDDING_MODEL)
        invoke = [st for st in sts if any(a.startswith("bedrock:") for a in st["actions"])]
        if not invoke:
            self.fail("IAM: no bedrock:InvokeModel for the embedding model")
        for st in invoke:
            for r in st["resources"]:
                resolved = str(self.m.resolve(r))
                if not resolved.endswith(f":foundation-model/{model}"):
                    self.fail(f"IAM: statement {st['sid']!r} grants bedrock on {r!r}; only foundation-model/{model} is needed")
        self.facts.append(
            f"IAM covers {len(self.table_labels)} tables and their indexes, bucket {', '.join(artifact) or '?'}, "
            f"vector index {', '.join(indexes) or '?'}, {model}"
        )

    # -- listeners ------------------------------------------------------------------------

    def check_listeners(self) -> None:
        """Bearer tokens never cross the network in clear by default: an HTTP listener that
        forwards exists only under a precondition on var.allow_plain_http (default false), an
        HTTPS listener carries the certificate, and with it port 80 only redirects to HTTPS."""
        listeners = self.m.resource("aws_lb_listener")
        plain = self.m.variables.get("allow_plain_http")
        if plain is None or plain.get("default") is not False:
            self.fail("variable allow_plain_http must exist and default to false (TLS by default)")
        forwards, redirects, tls = [], [], []
        for label, body in listeners.items():
            actions = body.get("default_action", [])
            actions = actions if isinstance(actions, list) else [actions]
            kinds = {a.get("type") for a in actions if isinstance(a, dict)}
            proto = body.get("protocol")
            if proto == "HTTPS":
                tls.append(label)
                if "certificate_arn" not in body:
                    self.fail(f"aws_lb_listener.{label}: HTTPS without certificate_arn")
            elif "forward" in kinds:
                forwards.append(label)
                conds = [
                    str(p.get("condition"))
                    for lc in body.get("lifecycle", [])
                    for p in (lc.get("precondition", []) if isinstance(lc, dict) else [])
                ]
                if not any("var.allow_plain_http" in c for c in conds):
                    self.fail(
                        f"aws_lb_listener.{label}: forwards plain {proto} without a precondition on "
                        "var.allow_plain_http: tokens would cross the network in clear by default"
                    )
            elif "redirect" in kinds:
                redirects.append(label)
                to = [r for a in actions if isinstance(a, dict) for r in a.get("redirect", [])]
                if not to or any(r.get("protocol") != "HTTPS" for r in to):
                    self.fail(f"aws_lb_listener.{label}: redirects, but not to HTTPS")
        if not tls:
            self.fail("no HTTPS aws_lb_listener: the load balancer cannot serve TLS")
        if not redirects:
            self.fail("no aws_lb_listener redirecting HTTP to HTTPS")
        self.facts.append(
            f"TLS by default ({len(tls)} HTTPS listener, port 80 redirects; plain HTTP only with allow_plain_http)"
        )

    def check_scale_out(self) -> None:
        """Any instance answers any request, so the group runs at least two and replaces them
        without an outage: min_size and desired_capacity at least 2 (var.instance_count, whose
        default and validation say so), instance refresh keeping at least half healthy."""
        groups = self.m.resource("aws_autoscaling_group")
        if not groups:
            self.fail("no aws_autoscaling_group")
        count = self.m.variables.get("instance_count", {})
        floor = re.search(r"var\.instance_count\s*>=\s*(\d+)", str(count.get("validation", "")))
        for label, body in groups.items():
            for attr in ("min_size", "desired_capacity"):
                v = body.get(attr)
                if isinstance(v, (int, float)):
                    ok = v >= 2
                else:
                    ok = "var.instance_count" in str(v) and (count.get("default") or 0) >= 2 and (
                        floor is not None and int(floor.group(1)) >= 2
                    )
                if not ok:
                    self.fail(f"aws_autoscaling_group.{label}: {attr} = {v!r} allows fewer than two instances")
            prefs = [p for r in body.get("instance_refresh", []) for p in r.get("preferences", [])]
            healthy = [p.get("min_healthy_percentage") for p in prefs]
            if not healthy or not all(isinstance(h, (int, float)) and h >= 50 for h in healthy):
                self.fail(
                    f"aws_autoscaling_group.{label}: instance refresh must keep at least 50% healthy "
                    f"(min_healthy_percentage {healthy or 'unset'})"
                )
        self.facts.append(f"{len(groups)} autoscaling group(s) of at least two instances, rolling at >= 50% healthy")

    def run(self) -> bool:
        self.check_scale_out()
        self.check_tables()
        self.check_vectors()
        self.check_index_name()
        self.check_region()
        self.check_provider_version()
        self.check_buckets()
        self.check_iam()
        self.check_listeners()
        return not self.problems


def _eval_name(m: Module, value: object, env: dict[str, str], depth: int = 0) -> str | None:
    """Evaluates a string expression built from literals, `${var.x}` (from `env`, else its
    default), `${local.x}` and the functions `sha256(...)` and `substr(s, offset, length)`: just
    enough HCL for a resource name. None when it uses anything else."""
    if not isinstance(value, str) or depth > 8:
        return None

    def atom(expr: str) -> str | None:
        expr = expr.strip()
        if expr.startswith('"') and expr.endswith('"'):
            return _eval_name(m, expr[1:-1], env, depth + 1)
        if expr in env:
            return env[expr]
        if expr.startswith(("var.", "local.")):
            target = m._lookup(expr)
            return None if target is None else _eval_name(m, str(target), env, depth + 1)
        call = re.fullmatch(r"(\w+)\((.*)\)", expr, re.S)
        if call:
            fn, args = call.group(1), _split_args(call.group(2))
            if fn == "sha256" and len(args) == 1:
                inner = atom(args[0])
                return None if inner is None else hashlib.sha256(inner.encode()).hexdigest()
            if fn == "substr" and len(args) == 3:
                inner = atom(args[0])
                if inner is None:
                    return None
                start, length = int(args[1]), int(args[2])
                return inner[start:] if length == -1 else inner[start:start + length]
        return None

    out, i = [], 0
    while i < len(value):
        j = value.find("${", i)
        if j < 0:
            out.append(value[i:])
            break
        out.append(value[i:j])
        depth_b, k = 0, j + 2
        while k < len(value):  # the matching close brace, past nested ${...} and quotes
            if value.startswith("${", k):
                depth_b += 1
                k += 2
                continue
            if value[k] == "}":
                if depth_b == 0:
                    break
                depth_b -= 1
            k += 1
        part = atom(value[j + 2:k])
        if part is None:
            return None
        out.append(part)
        i = k + 1
    return "".join(out)


def _split_args(s: str) -> list[str]:
    """Splits a call's arguments on top-level commas."""
    args, depth, quoted, cur = [], 0, False, ""
    for c in s:
        if c == '"':
            quoted = not quoted
        elif not quoted and c in "({":
            depth += 1
        elif not quoted and c in ")}":
            depth -= 1
        if c == "," and depth == 0 and not quoted:
            args.append(cur)
            cur = ""
        else:
            cur += c
    args.append(cur)
    return [a.strip() for a in args]


def _static_prefix(value: str) -> tuple[str, bool]:
    """The literal start of a string expression, and whether that is the whole string."""
    i = value.find("${")
    return (value, True) if i < 0 else (value[:i], False)


def _covers(pattern: str, name: tuple[str, bool]) -> bool:
    """Whether an IAM resource name pattern (`*` and `?` wildcards) matches the index name.

    When the name is only known up to a prefix, the pattern must be that prefix (or a shorter
    literal) followed by `*`.
    """
    literal, whole = name
    if whole:
        return fnmatch.fnmatchcase(literal, pattern)
    if not pattern.endswith("*") or any(c in pattern[:-1] for c in "*?"):
        return False
    return literal.startswith(pattern[:-1])


def _enabled(body: dict, block: str) -> bool:
    blocks = body.get(block, [])
    return any(b.get("enabled") is True for b in blocks) if isinstance(blocks, list) else False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tofu-dir", type=Path, default=DEFAULT_TOFU_DIR, help="module directory (default: deploy/tofu)")
    p.add_argument("--schema", type=Path, default=DEFAULT_SCHEMA, help="contract (default: macp-aws/schema.json)")
    args = p.parse_args(argv)

    if not args.tofu_dir.is_dir():
        print(f"check_tofu: FAIL: {args.tofu_dir} is not a directory", file=sys.stderr)
        return 1
    try:
        schema = json.loads(args.schema.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        print(f"check_tofu: FAIL: cannot read {args.schema}: {e}", file=sys.stderr)
        return 1
    module = Module(args.tofu_dir)
    if not module.files:
        print(f"check_tofu: FAIL: no .tf files in {args.tofu_dir}", file=sys.stderr)
        return 1

    checker = Checker(module, schema)
    if checker.run():
        print(f"check_tofu: OK: {len(module.files)} files match {args.schema.name}: " + "; ".join(checker.facts))
        return 0
    for problem in checker.problems:
        print(f"check_tofu: FAIL: {problem}", file=sys.stderr)
    print(f"check_tofu: {len(checker.problems)} problem(s) in {args.tofu_dir} against {args.schema}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
