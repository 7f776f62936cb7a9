//! The conformance suite against DynamoDB, S3 Vectors and S3 — in CI, moto_server with the
//! project's QueryVectors extension (tests/aws/moto_macp.py), started by scripts/test.sh.
//!
//! Every case is ignored by a plain `cargo test`: they need an emulator. scripts/aws-tests.sh
//! starts moto, sets `MACP_AWS_TEST_ENDPOINT` (e.g. `http://127.0.0.1:5000`) and runs them with
//! `--ignored`; run that way without the variable, they fail rather than pass. Each case gets its
//! own tables and buckets (a fresh name prefix), so cases never share state; credentials come
//! from the standard chain (any value works against moto). moto does not check presigned URLs'
//! bounds, so `bounded_urls` is not declared.

use std::sync::Arc;

use async_trait::async_trait;
use macp_aws::AwsBackend;
use macp_core::blob::PresignedRequest;
use macp_testkit::Transfer;

/// Uses presigned S3 URLs over real HTTP, as an agent would.
struct HttpTransfer(reqwest::Client);

#[async_trait]
impl Transfer for HttpTransfer {
    async fn put(&self, upload: &PresignedRequest, content_type: &str, body: Vec<u8>) -> u16 {
        let mut req = self.0.put(&upload.url).body(body);
        for (k, v) in &upload.headers {
            if !k.eq_ignore_ascii_case("content-type") && !k.eq_ignore_ascii_case("content-length") {
                req = req.header(k, v);
            }
        }
        req.header("content-type", content_type).send().await.map(|r| r.status().as_u16()).unwrap_or(599)
    }

    async fn get(&self, url: &str) -> (u16, Vec<u8>) {
        match self.0.get(url).send().await {
            Ok(r) => {
                let status = r.status().as_u16();
                (status, r.bytes().await.map(|b| b.to_vec()).unwrap_or_default())
            }
            Err(_) => (599, Vec::new()),
        }
    }
}

/// Scans every table, the bucket's object versions and every vector index for a text.
struct Raw(AwsBackend);

#[async_trait]
impl macp_testkit::Leftovers for Raw {
    async fn find(&self, needle: &str) -> Vec<String> {
        self.0.find_anywhere(needle).await.expect("scan the emulator")
    }
}

async fn aws() -> Option<macp_testkit::Backend> {
    let endpoint = std::env::var("MACP_AWS_TEST_ENDPOINT").ok().filter(|v| !v.is_empty())?;
    let prefix = format!("t{}-", ulid::Ulid::generate().to_string().to_lowercase());
    let builder = AwsBackend::builder()
        .endpoint_url(endpoint)
        .region(std::env::var("AWS_REGION").unwrap_or_else(|_| "us-west-2".into()))
        .table_prefix(prefix);
    let backend = builder.clone().connect().await.expect("connect to the emulator");
    backend.setup().await.expect("create tables and buckets");
    // "Reopening" is a second, independent connection to the same tables: fresh clients and an
    // empty in-process keyword cache, as a restarted server would have.
    let second = builder.connect().await.expect("connect again");
    let raw = Raw(backend.clone());
    let b = Arc::new(backend);
    Some(
        macp_testkit::Backend::new(b.clone())
            .with_leftovers(Arc::new(raw))
            .with_vector_index(b.clone())
            .with_blobs(b, Arc::new(HttpTransfer(reqwest::Client::new())))
            .with_reopen(move || -> Arc<dyn macp_core::Store> { Arc::new(second.clone()) }),
    )
}

macp_testkit::conformance_tests!(
    aws,
    features = [durable, shared, keywords, vectors, blobs],
    ignore = "needs an emulator: scripts/aws-tests.sh runs these with --ignored against moto",
);

/// A room moved from the embedded default (SQLite on disk) to AWS and back to another SQLite
/// data directory is the same room at every step, byte for byte (`macp export` / `macp import`).
#[test]
#[ignore = "needs an emulator: scripts/aws-tests.sh runs these with --ignored against moto"]
fn a_room_moves_from_sqlite_to_aws_and_back_intact() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    rt.block_on(async {
        let (first, last) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let durability = macp_local::Durability::Normal;
        let from = macp_local::testkit::backend(first.path(), durability);
        let back = macp_local::testkit::backend(last.path(), durability);
        let to = aws().await.expect("MACP_AWS_TEST_ENDPOINT is not set");
        macp_testkit::cases::a_room_moves_between_backends_intact(from, to, back).await;
    });
}
