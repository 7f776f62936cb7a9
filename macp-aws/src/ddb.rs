//! DynamoDB item helpers and error mapping.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use macp_core::{Error, Result};
use serde::Serialize;
use serde::de::DeserializeOwned;

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
