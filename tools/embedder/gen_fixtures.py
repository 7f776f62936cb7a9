#!/usr/bin/env python3
"""Write the cross-check fixtures for the Rust port.

- tokenizer_fixture.json: ~200 strings -> WordPiece ids/tokens from the real HF `tokenizers`
  tokenizer of all-MiniLM-L6-v2 (from the base package's tokenizer.json, no special tokens added).
- embedding_fixture.json: ~20 strings -> token ids and the full final embedding of the shipped
  model (int8 rows dequantized, summed in float32, L2-normalised).
- search_fixture.json: a small made-up room (not from the eval set) and queries with the FTS5
  unicode61 tokens, BM25 scores, ideal(q), cosines, fused scores and the final ranking.

Usage: python gen_fixtures.py [--model model]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import minilm  # noqa: E402
import modelfile  # noqa: E402
import pipeline  # noqa: E402

TOKENIZER_STRINGS = [
    # plain text
    "", " ", "   \t\n  ", "hello", "Hello, world!", "The quick brown fox jumps over the lazy dog.",
    "checkout-api returned elevated 502/504s between 14:04 and 14:52 UTC",
    "Rolled back to the previous release; error rate returned to baseline.",
    "why did the database run out of connections?",
    "what change caused requests to queue", "unrecognised options are silently ignored at boot",
    "Don't panic: it's the cache's fault, isn't it?", "e-mail / on-call / follow-up / re-enable",
    "UPPER lower MiXeD CamelCase snake_case kebab-case SCREAMING_SNAKE",
    "DiskPressure OOMKilled CrashLoopBackOff ImagePullBackOff HikariPool-1",
    "AccessDenied iam:CreateUser backup-admin", "es_rejected_execution_exception",
    # identifiers
    "i-0abc12ef", "i-0c3f9e1a7b2d4c6f8", "ip-10-42-7-19", "ip-10-42-7-19.ec2.internal",
    "arn:aws:iam::123456789012:role/x", "arn:aws:iam::123456789012:role/ci-deployer",
    "arn:aws:s3:::acme-logs/2024/06/01/app.log.gz", "arn:aws:lambda:us-east-1:123456789012:function:resize",
    "arn:aws:rds:eu-west-1:000000000000:db:orders-prod", "AKIA4EXAMPLE7QWZ3XYZ", "sg-0d4e1f23", "vpc-0a1b2c3d4e5f67890",
    "snap-07d2e4a1b9c8f3e65", "vol-049df61146c4d7901", "subnet-12345678", "ami-0abcdef1234567890",
    "commit 7f3c2a1", "7f3c2a1", "e51c7d8", "a9e02f7c4b1d6e8f0a2b3c4d5e6f7a8b9c0d1e2f", "deadbeef", "0xDEADBEEF",
    "PR #8812", "#8812", "issue #57", "OPS-2210", "INC-4471", "SEC-219", "JIRA-12345:", "v2.31.0", "5.8.1-rc.2",
    "release-2024.07.16", "pod/checkout-api-7d9f8b6c5-x2k4j", "checkout-api-7d9f8b6c5-x2k4j",
    "kube-system/coredns-5d78c9869d-abcde", "orders-db-replica-2", "es-data-09", "us-west-2a", "eu-central-1",
    "10.0.0.1", "192.168.1.254:8080", "45.133.1.77", "::1", "2001:db8::ff00:42:8329", "fe80::1%eth0",
    "user@example.com", "ci-deployer@acme-corp.iam.gserviceaccount.com", "https://api.payflow.com/v1/charges?limit=10",
    "http://localhost:9200/_cat/indices?v", "s3://acme-exports/2024/06/", "/var/log/nginx/error.log",
    "C:\\Windows\\System32\\drivers\\etc\\hosts", "~/.aws/credentials", "./scripts/deploy.sh --env=prod",
    "manual__2024-06-17T08:02:00+00:00", "2024-03-12T14:07:31.123Z", "14:07 UTC", "2024-03-12", "12/03/2024",
    "DB_POOL_MAX=40", "DATABASE_POOL_MAX_SIZE", "JAVA_OPTS=-Xmx2g -XX:+UseG1GC", "max_connections = 500",
    "SELECT * FROM orders WHERE id = 42;", "kubectl rollout undo deployment/checkout-api -n checkout",
    "curl -sSL https://x.sh | bash", "{\"level\":\"error\",\"msg\":\"timeout\",\"ms\":30000}",
    "key=value&other=1", "<html><body>502 Bad Gateway</body></html>", "`backticks` and 'quotes' and \"double\"",
    "java.lang.OutOfMemoryError: Java heap space", "at com.acme.checkout.OrderService.place(OrderService.java:142)",
    "Traceback (most recent call last):", "ERROR 1040 (HY000): Too many connections",
    "HTTP/1.1 429 Too Many Requests", "p99=29.8s p50=420ms", "18.3%", "~30/day", "1,234,567.89", "3.14e-10",
    "$38/hour", "€120", "10€", "£5", "¥100", "100°C", "±5%", "½ cup", "x²", "H₂O", "α β γ Δ Ω", "π≈3.14159",
    "a+b=c", "a<b>c", "a|b", "a^b", "a~b", "a`b", "a$b", "a\\b", "a/b", "a_b", "a-b", "a.b", "a,b", "a:b", "a;b",
    "!!!", "...", "?!", "--", "—", "–", "…", "«quoted»", "„German“", "“curly”", "‘single’", "(parens) [brackets] {braces}",
    "¿Qué?", "¡Hola!", "§3.2", "©2024 Acme™", "®", "•bullet", "→ arrow", "✓ done", "✗ failed",
    # accents and other scripts
    "café", "Café", "CAFÉ", "naïve", "résumé", "Zürich", "São Paulo", "Ångström", "Ærøskøbing", "façade", "piñata",
    "Straße", "STRASSE", "İstanbul", "ıi", "Œuvre", "ﬁle ﬂow", "Ｆｕｌｌｗｉｄｔｈ", "ｶﾀｶﾅ",
    "e\u0301", "n\u0303", "a\u0308b", "Ελληνικά", "Привет, мир", "Здравствуйте", "שלום", "مرحبا", "नमस्ते", "ไทย",
    "中文字符", "日本語のテキスト", "東京タワー", "한국어", "안녕하세요", "漢字かなカナ", "𠀀𠀁", "abc中def",
    # emoji and symbols
    "🔥", "fire🔥", "🔥fire", "👍🏽", "👨‍👩‍👧", "🇺🇸", "✅ deployed", "⚠️ warning", "🚀🚀🚀", "❤", ":smile:", "^_^", "¯\\_(ツ)_/¯",
    # control / invisible characters
    "tab\tseparated\tvalues", "line1\nline2\r\nline3", "zero\u200bwidth", "soft\u00adhyphen", "nbsp\u00a0space",
    "bom\ufeffmark", "null\u0000byte", "bell\u0007char", "replacement\ufffdchar", "private\ue000use",
    "ideographic\u3000space", "em\u2003space", "rtl\u200fmark", "combining\u0301 alone", "\u0301",
    # long words
    "a" * 99, "a" * 100, "b" * 101, "x" * 150 + " ok", "supercalifragilisticexpialidocious",
    "pneumonoultramicroscopicsilicovolcanoconiosis", "antidisestablishmentarianism",
    "unique_stg_invoices_invoice_id", "ecb_fx_backfill", "hikaricp_connections_pending",
    "averyveryveryverylongidentifierwithoutanyseparatorsatall1234567890",
    "Q2Xy7Zk9Lm3Np5Rt8Vw1", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    "0123456789" * 11, "https://example.com/" + "p" * 120,
    # mixed
    "Node ip-10-42-7-19.ec2.internal evicted 3 pods (DiskPressure) at 14:12 UTC — see OPS-2210.",
    "GuardDuty: UnauthorizedAccess:IAMUser/TorIPCaller @ 02:53 UTC; CryptoCurrency:EC2/BitcoinTool.B!DNS",
    "fct_revenue shows ~6.9% more June 2024 revenue than the ledger ($13.87M vs $13.86M)",
    "Re-enable the Argo canary steps (10% -> 50% -> 100%)", "p99 ≥ 650ms ⇒ SLO breach",
    "The naïve café in Zürich served crème brûlée 🍮 at 14:00",
]

EMBEDDING_STRINGS = [
    "database connection pool exhausted",
    "checkout-api returned 504 gateway timeouts after the deploy",
    "rolled back to the previous version and errors stopped",
    "why did the canary not catch the regression?",
    "leaked AWS access key used from an unknown IP address",
    "i-0abc12ef",
    "arn:aws:iam::123456789012:role/ci-deployer",
    "commit 7f3c2a1",
    "DiskPressure on ip-10-42-7-19",
    "es_rejected_execution_exception",
    "the the the",
    "Café naïve Zürich",
    "🔥",
    "",
    "中文字符",
    "p99 latency went from 180ms to 650ms",
    "duplicate rows in the revenue table",
    "alert routed to a channel nobody reads",
    "x" * 150,
    "Kubernetes pods were OOMKilled and restarted repeatedly",
]

SEARCH_ROOM = [
    "Grafana shows p99 on GET /v1/cart rising from 90ms to 4.1s at 09:12 UTC; traffic is flat.",
    "cart-service pods log 'redis: connection pool timeout' about 900 times per minute against redis-sessions.",
    "Deploy log: cart-service v3.4.0 (commit b41d9e2, 'bump redis client') reached prod at 09:05 UTC.",
    "Hypothesis: the new redis client defaults to a pool of 10 connections instead of 100.",
    "Ruled out the network: cross-zone packet loss stayed below 0.01% during the window.",
    "Node ip-10-8-3-77 ran out of disk at 09:30 UTC; unrelated to cart-service, tracked in OPS-88.",
    "Rolled back cart-service to v3.3.2 at 09:41 UTC; p99 back to 95ms within two minutes.",
    "Follow-up: pin PoolSize=100 explicitly in the redis client config and alert on pool wait time.",
]
SEARCH_QUERIES = [
    "why were requests stuck waiting for the cache",
    "commit b41d9e2",
    "ip-10-8-3-77 disk",
    "how was the slowdown fixed",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(HERE, "model"))
    args = ap.parse_args()
    hf = minilm.load_tokenizer()
    meta = json.load(open(os.path.join(args.model, "model.json")))
    vocab = open(os.path.join(args.model, meta["vocab_file"]), encoding="utf-8").read().split("\n")[:-1]
    E = modelfile.read(os.path.join(args.model, meta["file"]))

    # cross-check: BertWordPieceTokenizer built from the shipped vocab.txt gives the same ids
    from eval import load_wordpiece

    wp = load_wordpiece(os.path.join(args.model, meta["vocab_file"]))

    cases = []
    for s in TOKENIZER_STRINGS:
        e = hf.encode(s, add_special_tokens=False)
        e2 = wp.encode(s, add_special_tokens=False)
        assert e.ids == e2.ids, (s, e.tokens, e2.tokens)
        assert [vocab[i] for i in e.ids] == e.tokens
        cases.append({"text": s, "ids": e.ids, "tokens": e.tokens})
    tok_fix = {
        "description": "BERT-uncased WordPiece of all-MiniLM-L6-v2 (HF tokenizers "
                       "BertNormalizer(clean_text, handle_chinese_chars, strip_accents=lowercase, lowercase) + "
                       "BertPreTokenizer + WordPiece(##, max_input_chars_per_word=100, [UNK]=100)). "
                       "ids WITHOUT [CLS]/[SEP]. The static embedder additionally drops id 100 ([UNK]).",
        "vocab_sha256": meta["vocab_sha256"],
        "cases": cases,
    }
    with open(os.path.join(HERE, "tokenizer_fixture.json"), "w", encoding="utf-8") as fh:
        json.dump(tok_fix, fh, ensure_ascii=False, indent=1)
        fh.write("\n")

    sm = pipeline.StaticModel(E, hf)
    embs = sm.encode(EMBEDDING_STRINGS)
    ecases = []
    for s, ids, v in zip(EMBEDDING_STRINGS, sm.token_ids(EMBEDDING_STRINGS), embs):
        raw = E[ids].sum(0) if ids else np.zeros(E.shape[1], np.float32)
        ecases.append({
            "text": s,
            "ids": ids,
            "raw_norm": float(np.linalg.norm(raw)),
            "norm": float(np.linalg.norm(v)),
            "first8": [round(float(x), 7) for x in v[:8]],
            "embedding": [round(float(x), 7) for x in v],
        })
    pairs = []
    for i in range(0, len(EMBEDDING_STRINGS) - 1, 2):
        pairs.append({"a": i, "b": i + 1, "cos": float(embs[i] @ embs[i + 1])})
    emb_fix = {
        "description": "Final embeddings of the shipped model: ids = WordPiece without [CLS]/[SEP], [UNK] dropped; "
                       "v = sum of dequantized rows (scale[i] * q[i][j], f32); out = v / ||v||, zero vector if "
                       "no ids or ||v|| = 0. Tolerance: |diff| < 1e-5 per component.",
        "model_file": meta["file"],
        "model_sha256": meta["sha256"],
        "dim": int(E.shape[1]),
        "cases": ecases,
        "cosine_pairs": pairs,
    }
    with open(os.path.join(HERE, "embedding_fixture.json"), "w", encoding="utf-8") as fh:
        json.dump(emb_fix, fh, ensure_ascii=False)
        fh.write("\n")

    # end-to-end search fixture (one FTS5 table holding just this room)
    idx = pipeline.BM25Index(SEARCH_ROOM)
    D = sm.encode(SEARCH_ROOM)
    rows = list(range(len(SEARCH_ROOM)))
    qcases = []
    for q in SEARCH_QUERIES:
        b = idx.scores(q, rows)
        ideal = idx.ideal(q)
        c = D @ sm.encode([q])[0]
        f = pipeline.coverage_fusion(c, b, ideal)
        order = pipeline.rank_order(f)
        qcases.append({
            "query": q,
            "fts5_terms": idx.query_terms(q),
            "idf": {t: idx.idf(t) for t in idx.query_terms(q)},
            "ideal": ideal,
            "bm25": [float(x) for x in b],
            "cos": [round(float(x), 7) for x in c],
            "fused": [round(float(x), 7) for x in f],
            "ranking": [int(i) for i in order],
        })
    s_fix = {
        "description": "Default ranking on a made-up room. rowid = index+1 (insertion order). FTS5 table holds "
                       "exactly these rows (N, avgdl below). bm25 = -bm25() of FTS5 with k1=1.2, b=0.75 for the "
                       "query '\"t1\" OR \"t2\" ...' over the distinct unicode61 terms (0 = not matched). "
                       f"fused = cos + {pipeline.FUSION_BETA} * (bm25 / ideal) ** {pipeline.FUSION_POWER}; ranking "
                       "= indices by fused descending, ties by rowid ascending.",
        "N": idx.N,
        "avgdl": idx.avgdl,
        "doc_tokens": idx.doc_tokens,
        "findings": SEARCH_ROOM,
        "queries": qcases,
    }
    with open(os.path.join(HERE, "search_fixture.json"), "w", encoding="utf-8") as fh:
        json.dump(s_fix, fh, ensure_ascii=False, indent=1)
        fh.write("\n")
    print(f"tokenizer cases {len(cases)}, embedding cases {len(ecases)}, search queries {len(qcases)}")


if __name__ == "__main__":
    main()
