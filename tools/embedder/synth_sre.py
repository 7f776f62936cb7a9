"""Template generator of synthetic cloud/SRE incident-investigation findings and questions.

Our own text, written for the distillation corpus only (it is never evaluated on). It mimics the
*genre* of MACP findings (timestamps, hosts, services, commits, ARNs, error messages, hypotheses,
evidence, root causes, remediations, dead ends) and the questions people ask about them, with a
varied vocabulary so that the fitted token vectors see domain words in many contexts.
Deterministic for a given seed.
"""
from __future__ import annotations

import random
import re

SERVICES = [
    "checkout-api", "payments-gateway", "auth-service", "search-api", "orders-service", "inventory-svc",
    "billing-worker", "notification-service", "user-profile-api", "cart-service", "pricing-engine",
    "shipping-api", "recommendation-svc", "ledger-service", "report-builder", "image-resizer",
    "session-store", "api-gateway", "graphql-edge", "feature-flag-service", "email-sender",
    "fraud-scoring", "catalog-api", "webhook-dispatcher", "ingest-pipeline", "metrics-collector",
]
DATASTORES = [
    "orders-db-primary", "users-db", "billing-pg", "analytics-warehouse", "redis-sessions", "redis-cache-01",
    "kafka-events", "es-cluster-logs", "mongo-catalog", "cassandra-ring-a", "mysql-legacy", "dynamodb table carts",
    "s3 bucket acme-exports", "rabbitmq-main", "etcd", "clickhouse-metrics", "memcached-pool",
]
DB_KINDS = ["Postgres", "MySQL", "Aurora", "Redis", "Elasticsearch", "Kafka", "MongoDB", "Cassandra", "DynamoDB",
            "Snowflake", "BigQuery", "ClickHouse"]
PEOPLE = ["agent-ana", "agent-bo", "agent-kim", "agent-omar", "agent-sara", "agent-tom", "agent-yuki", "agent-lee"]
TOOLS = ["Grafana", "Datadog", "Prometheus", "Kibana", "Sentry", "Honeycomb", "New Relic", "CloudWatch",
         "Splunk", "Loki", "Jaeger", "PagerDuty", "Opsgenie", "Lightstep"]
REGIONS = ["us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-2", "ap-northeast-1"]
ENVS = ["prod", "staging", "production", "prod-eu", "canary", "perf", "dev"]
TEAMS = ["platform", "payments", "search", "data", "security", "SRE", "mobile", "checkout", "infra", "growth"]
VENDORS = ["Stripe", "Twilio", "SendGrid", "Cloudflare", "Fastly", "Okta", "Auth0", "Fivetran", "Snowflake",
           "GitHub", "Atlassian", "Akamai"]
CONFIG_KEYS = ["MAX_POOL_SIZE", "DB_TIMEOUT_MS", "CACHE_TTL", "WORKER_THREADS", "RETRY_LIMIT", "READ_TIMEOUT",
               "KEEPALIVE_SECONDS", "BATCH_SIZE", "JVM_HEAP", "GOMAXPROCS", "QUEUE_CAPACITY", "FEATURE_NEW_PRICING"]
METRICS = ["p99 latency", "p95 latency", "error rate", "5xx ratio", "CPU utilisation", "memory usage",
           "request rate", "queue depth", "consumer lag", "GC pause time", "connection count", "disk usage",
           "thread pool saturation", "cache hit ratio", "replication lag", "IOPS", "open file descriptors"]
ERRORS = [
    "connection refused", "read timeout", "context deadline exceeded", "too many connections",
    "OOMKilled", "CrashLoopBackOff", "ImagePullBackOff", "503 Service Unavailable", "504 Gateway Timeout",
    "502 Bad Gateway", "429 Too Many Requests", "SSL handshake failed", "certificate has expired",
    "no space left on device", "deadlock detected", "lock wait timeout exceeded", "NullPointerException",
    "java.lang.OutOfMemoryError: Java heap space", "ECONNRESET", "DNS resolution failed", "broken pipe",
    "permission denied", "AccessDenied", "ThrottlingException", "InvalidClientTokenId", "segmentation fault",
    "duplicate key value violates unique constraint", "relation does not exist", "readiness probe failed",
    "liveness probe failed", "FailedScheduling: 0/12 nodes are available", "Evicted: the node was low on memory",
]
CHANGES = [
    "config refactor", "dependency upgrade", "schema migration", "feature flag rollout", "JVM upgrade",
    "base image bump", "TLS library update", "ORM version bump", "index change", "autoscaling policy change",
    "network policy change", "load balancer listener change", "IAM policy change", "logging library swap",
    "connection pool rewrite", "cache key format change", "retry policy change", "kernel upgrade",
    "Helm chart update", "terraform module upgrade", "query rewrite", "serializer change",
]
CAUSE_MECH = [
    "the pool was capped at {n} connections so requests queued until they timed out",
    "a missing index turned every lookup into a sequential scan",
    "the cache was flushed and every request fell through to the database",
    "the new version leaked file descriptors until the process hit its ulimit",
    "a long-running transaction held locks that blocked writes",
    "the autoscaler could not add nodes because the instance quota was exhausted",
    "the certificate rotation job failed and the old certificate expired",
    "the health check path started returning 500 so the load balancer drained every target",
    "a hot partition concentrated {n}% of writes on a single shard",
    "memory limits were set below the working set so pods were OOM killed",
    "garbage collection pauses exceeded the upstream timeout",
    "a DNS TTL of {n} seconds kept clients pointed at the old endpoint",
    "the consumer group rebalanced continuously and stopped making progress",
    "a debug flag left in the build logged every request body synchronously",
    "the rate limiter was keyed per pod instead of per customer",
    "thread pool exhaustion made the service stop accepting new work",
    "an unbounded query returned millions of rows and exhausted heap",
]
REMEDIATIONS = [
    "roll back {svc} to {ver}", "raise {key} to {n} in the Helm values", "add an alert on {metric}",
    "rotate the credentials and revoke the old keys", "add jittered exponential backoff to client retries",
    "move the batch job off the primary onto a replica", "add a circuit breaker in front of {svc}",
    "increase the node group max size and request a quota raise", "add a unique constraint and dedup the table",
    "enable connection pooling through PgBouncer", "set memory requests equal to limits for {svc}",
    "write a runbook for this failure mode", "pin the dependency version until the upstream fix ships",
    "add a readiness gate so traffic only shifts after warm-up", "shorten the DNS TTL before migrations",
]
ADJ_BAD = ["elevated", "degraded", "spiking", "saturated", "flapping", "stalled", "unstable", "intermittent"]
TIME_WORDS = ["shortly after the deploy", "during the incident window", "before the alert fired",
              "at peak traffic", "overnight", "over the weekend", "right after the failover", "during the backfill"]


def _hex(rng, n):
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _slot(rng, name):
    if name == "svc":
        return rng.choice(SERVICES)
    if name == "svc2":
        return rng.choice(SERVICES)
    if name == "db":
        return rng.choice(DATASTORES)
    if name == "dbk":
        return rng.choice(DB_KINDS)
    if name == "who":
        return rng.choice(PEOPLE)
    if name == "tool":
        return rng.choice(TOOLS)
    if name == "region":
        return rng.choice(REGIONS)
    if name == "env":
        return rng.choice(ENVS)
    if name == "team":
        return rng.choice(TEAMS)
    if name == "vendor":
        return rng.choice(VENDORS)
    if name == "key":
        return rng.choice(CONFIG_KEYS)
    if name == "metric":
        return rng.choice(METRICS)
    if name == "err":
        return rng.choice(ERRORS)
    if name == "change":
        return rng.choice(CHANGES)
    if name == "mech":
        return _fill(rng, rng.choice(CAUSE_MECH))
    if name == "fix":
        return _fill(rng, rng.choice(REMEDIATIONS))
    if name == "bad":
        return rng.choice(ADJ_BAD)
    if name == "when":
        return rng.choice(TIME_WORDS)
    if name == "t":
        return f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} UTC"
    if name == "date":
        return f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if name == "n":
        return str(rng.choice([2, 3, 4, 5, 8, 10, 12, 16, 20, 25, 30, 40, 50, 64, 100, 128, 200, 500]))
    if name == "pct":
        return f"{rng.randint(1, 99)}.{rng.randint(0, 9)}%"
    if name == "ms":
        return f"{rng.choice([12, 40, 85, 120, 180, 250, 420, 800, 1200, 3000, 9000, 30000])}ms"
    if name == "ver":
        return f"v{rng.randint(1, 9)}.{rng.randint(0, 40)}.{rng.randint(0, 12)}"
    if name == "commit":
        return _hex(rng, 7)
    if name == "pr":
        return f"PR #{rng.randint(100, 9999)}"
    if name == "ticket":
        return f"{rng.choice(['OPS', 'INC', 'SEC', 'DATA', 'PERF', 'SRE'])}-{rng.randint(10, 9999)}"
    if name == "host":
        k = rng.randint(0, 3)
        if k == 0:
            return f"ip-10-{rng.randint(0, 255)}-{rng.randint(0, 255)}-{rng.randint(1, 254)}"
        if k == 1:
            return f"{rng.choice(['web', 'worker', 'db', 'cache', 'kafka', 'es-data', 'node'])}-{rng.randint(1, 40):02d}"
        if k == 2:
            return f"i-0{_hex(rng, 16)}"
        return f"{rng.choice(['gke', 'eks', 'aks'])}-pool-{rng.randint(1, 9)}-{_hex(rng, 5)}"
    if name == "ip":
        return f"{rng.randint(11, 223)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    if name == "arn":
        acct = "".join(rng.choice("0123456789") for _ in range(12))
        k = rng.randint(0, 3)
        if k == 0:
            return f"arn:aws:iam::{acct}:role/{rng.choice(['deploy', 'ci-runner', 'lambda-exec', 'admin', 'readonly'])}"
        if k == 1:
            return f"arn:aws:s3:::{rng.choice(['acme-logs', 'acme-backups', 'data-lake-raw', 'exports'])}"
        if k == 2:
            return f"arn:aws:lambda:{rng.choice(REGIONS)}:{acct}:function:{rng.choice(['resize', 'notify', 'etl'])}"
        return f"arn:aws:rds:{rng.choice(REGIONS)}:{acct}:db:{rng.choice(['orders', 'users', 'billing'])}"
    if name == "akey":
        return "AKIA" + "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(16))
    if name == "sg":
        return f"sg-0{_hex(rng, 8)}"
    if name == "endpoint":
        return rng.choice(["GET /v1/orders", "POST /v2/checkout", "GET /api/search", "PUT /users/{id}",
                           "POST /oauth/token", "GET /healthz", "POST /webhooks/stripe", "GET /v3/catalog/items"])
    if name == "dur":
        return rng.choice(["2 minutes", "five minutes", "40 minutes", "an hour", "three hours", "two days", "90 seconds"])
    raise KeyError(name)


_SLOT = re.compile(r"\{(\w+)\}")


def _fill(rng, tpl: str) -> str:
    return _SLOT.sub(lambda m: _slot(rng, m.group(1)), tpl)


TEMPLATES = [
    # triage / symptoms
    "{tool} alert fired at {t}: {svc} {metric} {bad} at {pct} over 5 minutes.",
    "PagerDuty paged the {team} on-call at {t} because {svc} returned {err} for {pct} of requests.",
    "{metric} on {endpoint} jumped from {ms} to {ms} starting {t}; traffic volume was normal.",
    "The edge load balancer shows mostly {err} responses from {svc}, with a smaller share of {err}.",
    "Error budget burn rate for {svc} reached {n}x, which triggered the fast-burn alert.",
    "Synthetic checks from three regions started failing at {t} with {err}.",
    "Request volume is flat, so this is not a traffic surge; the slowdown is on our side.",
    "{svc} pods log '{err}' about {n} times per minute against {db}.",
    "Only {region} is affected; other regions look healthy in {tool}.",
    "Dashboards show {metric} on {db} {bad} since {t}, while {svc} latency is unchanged.",
    # evidence
    "Deploy log: {svc} {ver} (commit {commit}, '{change}') rolled out to {env} between {t} and {t}.",
    "The {change} merged in {pr} landed {dur} before the first errors.",
    "Kubernetes events show {svc} pods restarting with {err}; restart count reached {n} per pod.",
    "kubectl describe shows the readiness probe timing out after {ms} on {host}.",
    "The HPA scaled {svc} from {n} to {n} replicas, but new pods stayed Pending with {err}.",
    "{db} had {n} active sessions at peak, far below its max_connections of {n}.",
    "Slow query log on {db} shows a query taking {ms} on average after the {change}.",
    "Replication lag on {db} reached {dur} during the backfill; reads from the replica were stale.",
    "Security group {sg} was modified at {t} to allow 0.0.0.0/0 on port 22.",
    "The role {arn} was assumed {n} times from an unknown IP address {ip}.",
    "Heap dump of {svc} shows the cache holding {n} million entries, most of them never read again.",
    "Flame graph shows {pct} of CPU time in JSON serialisation inside {svc}.",
    "Packet capture on {host} shows TCP resets from the upstream after {ms} of idle time.",
    "Error rate from {vendor} API stayed at baseline; their latency was {ms} at p99 throughout.",
    "The Kafka consumer group for {svc} has a lag of {n} thousand messages and is still growing.",
    "Redis evicted {n} thousand keys per second after memory reached maxmemory on {db}.",
    "TLS handshake errors started when the certificate for {svc} expired at {t}.",
    "DNS lookups for {svc} returned the old load balancer address for {dur} after the migration.",
    "Load test in {env} at twice production traffic kept {metric} under {ms}.",
    # hypotheses
    "Possible that {vendor} is degraded: {svc} shows more {err} responses from their API.",
    "Suspect the {change} in {commit}; the timing lines up with the first errors within {dur}.",
    "Hypothesis: {mech}.",
    "Could this be a noisy neighbour on {host}? CPU steal time was {pct} during the window.",
    "Maybe the cache stampede after the flush is what overloaded {db}.",
    "It might be a memory leak introduced in {ver}; RSS grows steadily until the pod is killed.",
    # dead ends
    "Not the network: packet loss between zones was below {pct} the whole time.",
    "The {change} cannot be the cause, it was deployed to {env} only and prod never received it.",
    "Checked the node pool autoscaler; it behaved correctly and is not related to the errors.",
    # root cause
    "Root cause: {mech}.",
    "Root cause confirmed: the {change} in {ver} meant that {mech}.",
    "The outage was caused by the {change}: {mech}.",
    "Primary cause is the {change}; a secondary factor is that {mech}.",
    # remediation / follow-up
    "Mitigation at {t}: rolled back {svc} to {ver}; errors returned to baseline within {dur}.",
    "Rolled back {svc} with kubectl rollout undo at {t}; latency recovered {dur} later.",
    "Restarted {svc} pods and flushed the connection pool; the error rate dropped to {pct}.",
    "Failover of {db} to the standby completed at {t} and writes resumed.",
    "Disabled the feature flag at {t}, which stopped the errors immediately.",
    "Follow-up ({ticket}): {fix}.",
    "Action item for the {team} team: {fix}.",
    "Remediation: {fix}, and {fix}.",
    "We should {fix} so this does not happen again.",
    "Customer impact: {n} failed orders and about {pct} of checkout attempts over {dur}.",
    # generic prose
    "{svc} depends on {db} for every request, so any slowdown there shows up as {err} at the edge.",
    "The timeout on the load balancer is {ms}, shorter than the {ms} timeout in {svc}.",
    "The job uses the {dbk} bulk API and holds a lock on the table for {dur}.",
    "{svc} caches responses for {dur}; stale entries explain why some users still saw old prices.",
]

QUESTIONS = [
    "why did {svc} start returning {err}?",
    "when did the errors start and which service was first affected?",
    "which deploy introduced the problem?",
    "how many requests failed and for how long?",
    "what follow-up actions were agreed?",
    "why were pods restarting on {host}?",
    "what changed in the configuration of {svc}?",
    "is {db} healthy?",
    "who owns {svc} and was the {team} team paged?",
    "what is the current {metric} of {svc}?",
    "which version of {svc} is running in {env}?",
    "does the error rate correlate with the {change}?",
    "show the evidence for the {change} hypothesis",
    "list the remediation steps for {svc}",
]


def generate(n: int, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    out, seen = [], set()
    tries = 0
    while len(out) < n and tries < n * 20:
        tries += 1
        if rng.random() < 0.12:
            tpl = rng.choice(QUESTIONS)
        else:
            tpl = rng.choice(TEMPLATES)
        s = _fill(rng, tpl)
        if rng.random() < 0.15:
            s = s + " " + _fill(rng, rng.choice(TEMPLATES))
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


if __name__ == "__main__":
    for s in generate(20, seed=7):
        print("-", s)
