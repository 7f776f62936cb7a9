//! DynamoDB item helpers, error mapping, and the requests every store file shares (transactions
//! with their cancellation reasons, reads and batch reads with retries, idempotency keys).

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, KeysAndAttributes, Put, PutRequest, TransactWriteItem, WriteRequest,
};
use macp_core::model::Identifier;
use macp_core::store::{IdempotencyKey, IdempotencyRecord, WriteOperation};
use macp_core::{Error, Result, RoomId, Timestamp};

use crate::AwsBackend;

/// A DynamoDB item.
pub(crate) type Item = HashMap<String, AttributeValue>;

pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(crate) fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(crate) fn json<T: Serialize>(v: &T) -> AttributeValue {
    AttributeValue::S(serde_json::to_string(v).unwrap_or_else(|_| "null".into()))
}

pub(crate) fn get_s<'a>(item: &'a Item, k: &str) -> Result<&'a str> {
    item.get(k).and_then(|v| v.as_s().ok()).map(String::as_str).ok_or_else(|| corrupt(k))
}

pub(crate) fn opt_s<'a>(item: &'a Item, k: &str) -> Option<&'a str> {
    item.get(k).and_then(|v| v.as_s().ok()).map(String::as_str)
}

pub(crate) fn get_n(item: &Item, k: &str) -> Result<i64> {
    item.get(k).and_then(|v| v.as_n().ok()).and_then(|v| v.parse().ok()).ok_or_else(|| corrupt(k))
}

pub(crate) fn opt_n(item: &Item, k: &str) -> Option<i64> {
    item.get(k).and_then(|v| v.as_n().ok()).and_then(|v| v.parse().ok())
}

pub(crate) fn doc<T: DeserializeOwned>(item: &Item) -> Result<T> {
    serde_json::from_str(get_s(item, "doc")?)
        .map_err(|e| Error::backend("dynamodb", false, format!("stored item is unreadable: {e}"), None))
}

fn corrupt(k: &str) -> Error {
    Error::backend("dynamodb", false, format!("stored item lacks a readable `{k}`"), None)
}

/// Codes AWS uses for transient failures.
const RETRYABLE: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "ThrottledException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "SlowDown",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "InternalServerError",
    "InternalFailure",
    "InternalServerException",
    "TransactionConflictException",
    "TransactionInProgressException",
];

/// Maps an SDK error: throttling, conflicts in flight, timeouts and 5xx are retryable; the
/// AWS error code is kept in the message.
pub(crate) fn aws_err<E>(service: &'static str, op: &str, e: SdkError<E, HttpResponse>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let (code, msg, retryable) = match &e {
        SdkError::ServiceError(ctx) => {
            let err = ctx.err();
            let code = err.code().unwrap_or("Unknown").to_owned();
            let retry = RETRYABLE.contains(&code.as_str()) || ctx.raw().status().as_u16() >= 500;
            (code, err.message().unwrap_or_default().to_owned(), retry)
        }
        SdkError::TimeoutError(_) => ("Timeout".into(), "the request timed out".into(), true),
        SdkError::DispatchFailure(d) => ("DispatchFailure".into(), format!("{d:?}"), true),
        SdkError::ResponseError(_) => ("ResponseError".into(), "unreadable response".into(), true),
        other => ("ConstructionFailure".into(), other.to_string(), false),
    };
    Error::backend(service, retryable, format!("{op} failed: {code}: {msg}"), Some(Box::new(e)))
}

/// The AWS error code of an SDK error, if the service answered one.
pub(crate) fn code_of<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> Option<&str> {
    match e {
        SdkError::ServiceError(ctx) => ctx.err().code(),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Requests shared by the store files.

/// Attempts of an optimistic write before giving up with a retryable error.
pub(crate) const ATTEMPTS: usize = 64;

pub(crate) fn key2(
    hk: &str,
    hv: impl Into<String>,
    rk: &str,
    rv: impl Into<String>,
) -> HashMap<String, AttributeValue> {
    HashMap::from([(hk.to_owned(), s(hv)), (rk.to_owned(), s(rv))])
}

fn idem_sk(key: &str) -> String {
    format!("IDEMP#{key}")
}

pub(crate) fn ident_sk(i: &Identifier) -> String {
    format!("IDENT#{}#{}", i.id_type, i.value)
}

pub(crate) async fn backoff(attempt: usize) {
    // Jitter from the clock's low bits keeps racing writers from retrying in lockstep.
    let jitter = (Timestamp::now().as_millis() % 7) as u64;
    tokio::time::sleep(Duration::from_millis((attempt as u64).min(20) * 3 + jitter)).await;
}

/// A partition query that resumes after `after` (with `paged`, which compares the range key to
/// `:a`). DynamoDB rejects empty strings as key values, so "from the start" drops the range
/// condition instead of comparing with `""`.
pub(crate) fn range_after(
    room_id: RoomId,
    paged: &'static str,
    after: Option<String>,
) -> (&'static str, HashMap<String, AttributeValue>) {
    let mut values = HashMap::from([(":r".to_owned(), s(room_id.to_string()))]);
    match after.filter(|a| !a.is_empty()) {
        Some(after) => {
            values.insert(":a".into(), s(after));
            (paged, values)
        }
        None => ("room_id = :r", values),
    }
}

pub(crate) fn gave_up(what: &str) -> Error {
    Error::backend(
        "dynamodb",
        true,
        format!("{what}: too much contention, gave up after {ATTEMPTS} attempts; retry"),
        None,
    )
}

/// What a cancelled transaction says per item: `Some(code)` for items that failed.
pub(crate) fn cancellation(
    e: &aws_sdk_dynamodb::error::SdkError<
        TransactWriteItemsError,
        aws_smithy_runtime_api::client::orchestrator::HttpResponse,
    >,
) -> Option<Vec<Option<String>>> {
    match e {
        aws_sdk_dynamodb::error::SdkError::ServiceError(ctx) => match ctx.err() {
            TransactWriteItemsError::TransactionCanceledException(t) => Some(
                t.cancellation_reasons()
                    .iter()
                    .map(|r| r.code().filter(|c| *c != "None").map(str::to_owned))
                    .collect(),
            ),
            _ => None,
        },
        _ => None,
    }
}

pub(crate) fn put(table: &str, item: Item, condition: Option<&str>) -> TransactWriteItem {
    let mut p = Put::builder().table_name(table).set_item(Some(item));
    if let Some(c) = condition {
        p = p.condition_expression(c);
    }
    TransactWriteItem::builder()
        .put(p.build().unwrap_or_else(|_| unreachable!("table and item are set")))
        .build()
}

/// The outcome of a transaction: committed, or cancelled with per-item codes.
pub(crate) enum Tx {
    Done,
    Cancelled(Vec<Option<String>>),
}

/// Whether item `i` of a cancelled transaction failed its condition.
pub(crate) fn check_failed(reasons: &[Option<String>], i: usize) -> bool {
    reasons.get(i).is_some_and(|r| r.as_deref() == Some("ConditionalCheckFailed"))
}

impl AwsBackend {
    pub(crate) async fn transact(&self, items: Vec<TransactWriteItem>, what: &str) -> Result<Tx> {
        match self.ddb.transact_write_items().set_transact_items(Some(items)).send().await {
            Ok(_) => Ok(Tx::Done),
            Err(e) => match cancellation(&e) {
                Some(reasons) => Ok(Tx::Cancelled(reasons)),
                None => Err(aws_err("dynamodb", what, e)),
            },
        }
    }

    pub(crate) async fn get_item(
        &self,
        table: &str,
        key: HashMap<String, AttributeValue>,
        what: &str,
    ) -> Result<Option<Item>> {
        let out = self
            .ddb
            .get_item()
            .table_name(table)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| aws_err("dynamodb", what, e))?;
        Ok(out.item)
    }

    /// BatchGetItem over any number of keys, retrying unprocessed keys.
    pub(crate) async fn batch_get(
        &self,
        table: &str,
        keys: Vec<HashMap<String, AttributeValue>>,
    ) -> Result<Vec<Item>> {
        let mut out = Vec::new();
        for chunk in keys.chunks(100) {
            let mut pending = chunk.to_vec();
            let mut attempt = 0;
            while !pending.is_empty() {
                let ka = KeysAndAttributes::builder()
                    .set_keys(Some(pending.clone()))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| Error::backend("dynamodb", false, e.to_string(), None))?;
                let resp = self
                    .ddb
                    .batch_get_item()
                    .request_items(table, ka)
                    .send()
                    .await
                    .map_err(|e| aws_err("dynamodb", "BatchGetItem", e))?;
                if let Some(mut r) = resp.responses {
                    out.extend(r.remove(table).unwrap_or_default());
                }
                pending = resp
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(table))
                    .map(|k| k.keys)
                    .unwrap_or_default();
                if !pending.is_empty() {
                    attempt += 1;
                    if attempt > ATTEMPTS {
                        return Err(gave_up("BatchGetItem"));
                    }
                    backoff(attempt).await;
                }
            }
        }
        Ok(out)
    }

    /// One BatchWriteItem of `requests` (at most 25) to `table`, sent again for what DynamoDB
    /// leaves unprocessed (throttling) until nothing is left; `what` names the task in errors.
    pub(crate) async fn batch_write(
        &self,
        table: &str,
        mut requests: Vec<WriteRequest>,
        what: &str,
    ) -> Result<()> {
        for attempt in 0..ATTEMPTS {
            if requests.is_empty() {
                return Ok(());
            }
            let resp = self
                .ddb
                .batch_write_item()
                .request_items(table, requests)
                .send()
                .await
                .map_err(|e| aws_err("dynamodb", &format!("BatchWriteItem ({what})"), e))?;
            requests = resp.unprocessed_items.and_then(|mut u| u.remove(table)).unwrap_or_default();
            if !requests.is_empty() {
                backoff(attempt).await;
            }
        }
        Err(gave_up(what))
    }

    /// Puts `items` into `table`, 25 per BatchWriteItem. Unconditional: an item with the same
    /// key is replaced whole.
    pub(crate) async fn batch_put(&self, table: &str, items: Vec<Item>, what: &str) -> Result<()> {
        let mut requests = items
            .into_iter()
            .map(|item| {
                PutRequest::builder()
                    .set_item(Some(item))
                    .build()
                    .map(|p| WriteRequest::builder().put_request(p).build())
                    .map_err(|e| Error::backend("dynamodb", false, e.to_string(), None))
            })
            .collect::<Result<Vec<_>>>()?;
        while !requests.is_empty() {
            let rest = requests.split_off(requests.len().min(25));
            self.batch_write(table, requests, what).await?;
            requests = rest;
        }
        Ok(())
    }

    /// Queries a partition (optionally an index), following pages until `stop` says enough.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn query_all(
        &self,
        table: &str,
        index: Option<&str>,
        key_condition: &str,
        filter: Option<&str>,
        names: HashMap<String, String>,
        values: HashMap<String, AttributeValue>,
        forward: bool,
        consistent: bool,
        mut keep: impl FnMut(&Item) -> bool,
        limit: usize,
    ) -> Result<Vec<Item>> {
        let mut out = Vec::new();
        let mut start = None;
        loop {
            let mut q = self
                .ddb
                .query()
                .table_name(table)
                .key_condition_expression(key_condition)
                .set_expression_attribute_values(Some(values.clone()))
                .scan_index_forward(forward)
                .consistent_read(consistent)
                .set_exclusive_start_key(start.take());
            if !names.is_empty() {
                q = q.set_expression_attribute_names(Some(names.clone()));
            }
            if let Some(i) = index {
                q = q.index_name(i);
            }
            if let Some(f) = filter {
                q = q.filter_expression(f);
            }
            let resp = q.send().await.map_err(|e| aws_err("dynamodb", "Query", e))?;
            for item in resp.items.unwrap_or_default() {
                if keep(&item) {
                    out.push(item);
                    if out.len() >= limit {
                        return Ok(out);
                    }
                }
            }
            match resp.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(out),
            }
        }
    }

    async fn key_record(&self, room: RoomId, key: &str) -> Result<Option<IdempotencyRecord>> {
        let Some(item) = self
            .get_item(
                &self.names.findings,
                key2("room_id", room.to_string(), "finding_id", idem_sk(key)),
                "GetItem",
            )
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(IdempotencyRecord {
            key: key.to_owned(),
            operation: WriteOperation::parse(get_s(&item, "operation")?)
                .ok_or_else(|| Error::backend("dynamodb", false, "unknown idempotency operation", None))?,
            fingerprint: get_s(&item, "fingerprint")?.to_owned(),
            result_id: get_s(&item, "result_id")?.to_owned(),
            created_at: Timestamp::from_millis(get_n(&item, "created_at")?),
        }))
    }

    pub(crate) fn key_put(&self, room: RoomId, c: &IdempotencyKey) -> TransactWriteItem {
        let item = HashMap::from([
            ("room_id".to_owned(), s(room.to_string())),
            ("finding_id".to_owned(), s(idem_sk(&c.key))),
            ("operation".to_owned(), s(c.operation.as_str())),
            ("fingerprint".to_owned(), s(c.fingerprint.clone())),
            ("result_id".to_owned(), s(c.result_id.clone())),
            ("created_at".to_owned(), n(c.created_at.as_millis())),
        ]);
        put(&self.names.findings, item, Some("attribute_not_exists(finding_id)"))
    }

    /// The replay record if `idempotency` is already taken (a cheap check before a transaction).
    pub(crate) async fn replayed(
        &self,
        room: RoomId,
        idempotency: Option<&IdempotencyKey>,
    ) -> Result<Option<IdempotencyRecord>> {
        match idempotency {
            Some(c) => self.key_record(room, &c.key).await,
            None => Ok(None),
        }
    }

    pub(crate) async fn require_key(
        &self,
        room: RoomId,
        idempotency: Option<&IdempotencyKey>,
    ) -> Result<IdempotencyRecord> {
        self.replayed(room, idempotency)
            .await?
            .ok_or_else(|| Error::backend("dynamodb", true, "idempotency idempotency vanished; retry", None))
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput;
    use aws_smithy_mocks::{RuleMode, mock, mock_client};

    use super::*;

    fn backend(ddb: aws_sdk_dynamodb::Client) -> AwsBackend {
        let conf =
            aws_config::SdkConfig::builder().behavior_version(aws_config::BehaviorVersion::latest()).build();
        AwsBackend {
            ddb,
            s3: aws_sdk_s3::Client::new(&conf),
            s3v: aws_sdk_s3vectors::Client::new(&conf),
            bedrock: aws_sdk_bedrockruntime::Client::new(&conf),
            names: crate::AwsBuilder::new().names(),
            emulated: false,
            keywords: Default::default(),
        }
    }

    fn keys(n: usize) -> Vec<Item> {
        (0..n).map(|i| key2("room_id", "r", "finding_id", format!("f{i:03}"))).collect()
    }

    /// Search hydrates hits with BatchGetItem; DynamoDB may answer part of a batch and hand the
    /// rest back as UnprocessedKeys (throttling, 16 MB responses), which must be asked again.
    #[tokio::test]
    async fn batch_get_asks_again_for_unprocessed_keys_and_chunks_by_100() {
        let table = "macp-findings";
        let first = mock!(Client::batch_get_item)
            .match_requests(move |r| {
                r.request_items().and_then(|m| m.get(table)).is_some_and(|k| k.keys().len() == 100)
            })
            .then_output(move || {
                let answered = keys(100)[..60].to_vec();
                let rest =
                    KeysAndAttributes::builder().set_keys(Some(keys(100)[60..].to_vec())).build().unwrap();
                BatchGetItemOutput::builder().responses(table, answered).unprocessed_keys(table, rest).build()
            });
        let retry = mock!(Client::batch_get_item)
            .match_requests(move |r| {
                r.request_items().and_then(|m| m.get(table)).is_some_and(|k| k.keys() == &keys(100)[60..])
            })
            .then_output(move || {
                BatchGetItemOutput::builder().responses(table, keys(100)[60..].to_vec()).build()
            });
        let tail = mock!(Client::batch_get_item)
            .match_requests(move |r| {
                r.request_items().and_then(|m| m.get(table)).is_some_and(|k| k.keys().len() == 20)
            })
            .then_output(move || {
                BatchGetItemOutput::builder().responses(table, keys(120)[100..].to_vec()).build()
            });
        let ddb = mock_client!(aws_sdk_dynamodb, RuleMode::Sequential, [&first, &retry, &tail]);
        let got = backend(ddb).batch_get(table, keys(120)).await.unwrap();
        assert_eq!((first.num_calls(), retry.num_calls(), tail.num_calls()), (1, 1, 1));
        let mut ids: Vec<String> = got.iter().map(|i| get_s(i, "finding_id").unwrap().to_owned()).collect();
        ids.sort();
        assert_eq!(ids, (0..120).map(|i| format!("f{i:03}")).collect::<Vec<_>>(), "every key once");
    }
}
