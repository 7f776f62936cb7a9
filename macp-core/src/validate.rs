//! Input validation and normalisation, shared by every write.
//!
//! Normalisation is deliberately small and documented, because it decides when two agents'
//! inputs are "the same": tags and identifier types are lowercased, identifier values of
//! case-insensitive types (hostnames, emails, IPs, commit hashes, …) are lowercased, and
//! surrounding whitespace is dropped everywhere. Nothing is ever cut short: too long is refused.

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::ids::clip;
use crate::limits::Limits;
use crate::model::{Evidence, Identifier};

/// Identifier types whose values compare case-insensitively, so they are lowercased.
pub const CASE_INSENSITIVE_IDENTIFIER_TYPES: &[&str] = &[
    "hostname",
    "host",
    "fqdn",
    "domain",
    "dns",
    "email",
    "ip",
    "ipv4",
    "ipv6",
    "mac",
    "commit",
    "git_sha",
    "sha",
    "instance_id",
    "service",
    "k8s_namespace",
    "k8s_pod",
];

/// A required free-text field: trimmed, non-empty, at most `max` bytes, no NUL.
pub fn required_text(field: &str, s: &str, max: usize) -> Result<String> {
    let t = s.trim();
    if t.is_empty() {
        return Err(Error::invalid(field, format!("{field} must not be empty")));
    }
    bounded_text(field, t, max)
}

/// An optional free-text field: `None` and blank become `None`.
pub fn optional_text(field: &str, s: Option<&str>, max: usize) -> Result<Option<String>> {
    match s.map(str::trim) {
        None | Some("") => Ok(None),
        Some(t) => bounded_text(field, t, max).map(Some),
    }
}

fn bounded_text(field: &str, t: &str, max: usize) -> Result<String> {
    if t.len() > max {
        return Err(Error::too_long(field, max, t.len()));
    }
    if t.contains('\0') {
        return Err(Error::invalid(field, format!("{field} must not contain NUL characters")));
    }
    Ok(t.to_owned())
}

/// Tags: trimmed, lowercased, `[a-z0-9._:/-]`, deduplicated in order, within count and length.
pub fn tags(field: &str, input: &[String], limits: &Limits) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::with_capacity(input.len());
    for raw in input {
        let t = raw.trim().to_lowercase();
        if t.is_empty() {
            return Err(Error::invalid(field, "tags must not be empty strings"));
        }
        if t.len() > limits.max_tag_bytes {
            return Err(Error::too_long(field, limits.max_tag_bytes, t.len()));
        }
        if !t.chars().all(|c| c.is_ascii_alphanumeric() || "._:/-".contains(c)) {
            return Err(Error::invalid(
                field,
                format!(
                    "tag `{}` may only contain letters, digits and `. _ : / -` (e.g. root-cause, service:auth)",
                    clip(raw)
                ),
            ));
        }
        if !out.contains(&t) {
            out.push(t);
        }
    }
    if out.len() > limits.max_tags {
        return Err(Error::too_many(field, limits.max_tags, out.len()));
    }
    Ok(out)
}

/// A lowercase `[a-z0-9_]` label (identifier types, relationship types): spaces and hyphens
/// become underscores.
pub fn snake_label(field: &str, raw: &str, max: usize) -> Result<String> {
    let t: String =
        raw.trim().to_lowercase().chars().map(|c| if c == '-' || c == ' ' { '_' } else { c }).collect();
    if t.is_empty() {
        return Err(Error::invalid(field, format!("{field} must not be empty")));
    }
    if t.len() > max {
        return Err(Error::too_long(field, max, t.len()));
    }
    if !t.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
        return Err(Error::invalid(
            field,
            format!(
                "`{}` may only contain letters, digits and underscores (e.g. depends_on, hostname)",
                clip(raw)
            ),
        ));
    }
    Ok(t)
}

/// Normalises one identifier: type via [`snake_label`]; value trimmed, a trailing `.` dropped
/// from DNS names, lowercased for [`CASE_INSENSITIVE_IDENTIFIER_TYPES`].
pub fn normalize_identifier(raw: &Identifier, limits: &Limits) -> Result<Identifier> {
    let id_type = snake_label("identifiers.type", &raw.id_type, limits.max_identifier_type_bytes)?;
    let mut value = raw.value.trim().to_owned();
    if CASE_INSENSITIVE_IDENTIFIER_TYPES.contains(&id_type.as_str()) {
        value = value.to_lowercase();
        if matches!(id_type.as_str(), "hostname" | "host" | "fqdn" | "domain" | "dns") {
            while value.ends_with('.') {
                value.pop();
            }
        }
    }
    if value.is_empty() {
        return Err(Error::invalid("identifiers.value", "identifier values must not be empty"));
    }
    if value.len() > limits.max_identifier_value_bytes {
        return Err(Error::too_long("identifiers.value", limits.max_identifier_value_bytes, value.len()));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::invalid(
            "identifiers.value",
            "identifier values must not contain control characters",
        ));
    }
    Ok(Identifier { id_type, value })
}

/// Normalises, deduplicates and sorts a list of identifiers, within the count limit.
pub fn identifiers(input: &[Identifier], limits: &Limits) -> Result<Vec<Identifier>> {
    let mut out = input.iter().map(|i| normalize_identifier(i, limits)).collect::<Result<Vec<_>>>()?;
    out.sort();
    out.dedup();
    if out.len() > limits.max_identifiers {
        return Err(Error::too_many("identifiers", limits.max_identifiers, out.len()));
    }
    Ok(out)
}

/// Validates evidence items: refs and descriptions bounded, the list within its limit.
pub fn evidence(input: &[Evidence], limits: &Limits) -> Result<Vec<Evidence>> {
    if input.len() > limits.max_evidence {
        return Err(Error::too_many("evidence", limits.max_evidence, input.len()));
    }
    input
        .iter()
        .map(|e| {
            Ok(Evidence {
                kind: e.kind,
                reference: required_text("evidence.ref", &e.reference, limits.max_evidence_ref_bytes)?,
                description: optional_text(
                    "evidence.description",
                    e.description.as_deref(),
                    limits.max_description_bytes,
                )?,
                captured_at: e.captured_at,
            })
        })
        .collect()
}

/// An idempotency key: 1 to 128 bytes of printable ASCII without spaces.
pub fn idempotency_key(key: Option<&str>, limits: &Limits) -> Result<Option<String>> {
    let Some(k) = key else { return Ok(None) };
    if k.is_empty() {
        return Err(Error::invalid("idempotency_key", "idempotency_key must not be empty; omit it instead"));
    }
    if k.len() > limits.max_idempotency_key_bytes {
        return Err(Error::too_long("idempotency_key", limits.max_idempotency_key_bytes, k.len()));
    }
    if !k.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(Error::invalid(
            "idempotency_key",
            "idempotency_key may only contain printable ASCII without spaces (a UUID works well)",
        ));
    }
    Ok(Some(k.to_owned()))
}

/// Entity properties: a JSON object whose serialisation fits the limit.
pub fn properties(props: &Map<String, Value>, limits: &Limits) -> Result<()> {
    let size = serde_json::to_vec(props).map(|v| v.len()).unwrap_or(usize::MAX);
    if size > limits.max_properties_bytes {
        return Err(Error::too_long("properties", limits.max_properties_bytes, size));
    }
    Ok(())
}

/// A page size: `None` means the default; zero or more than `max` is refused.
pub fn page_size(field: &str, requested: Option<usize>, default: usize, max: usize) -> Result<usize> {
    match requested {
        None => Ok(default),
        Some(0) => Err(Error::invalid(field, format!("{field} must be at least 1"))),
        Some(n) if n > max => Err(Error::InvalidInput {
            field: field.to_owned(),
            message: format!("{field} is {n}; the largest page is {max}. Ask for less and follow the cursor"),
            limit: Some(max as u64),
        }),
        Some(n) => Ok(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ident(t: &str, v: &str) -> Identifier {
        Identifier { id_type: t.into(), value: v.into() }
    }

    #[test]
    fn case_insensitive_identifier_values_converge() {
        let l = Limits::default();
        assert_eq!(
            normalize_identifier(&ident(" Hostname ", "IP-10-0-1-7.EC2.Internal."), &l).unwrap(),
            ident("hostname", "ip-10-0-1-7.ec2.internal")
        );
        // ARNs are case-sensitive: kept as given.
        assert_eq!(
            normalize_identifier(&ident("ARN", "arn:aws:iam::1:role/Admin"), &l).unwrap().value,
            "arn:aws:iam::1:role/Admin"
        );
        assert_eq!(normalize_identifier(&ident("git-sha", "ABC"), &l).unwrap(), ident("git_sha", "abc"));
    }

    #[test]
    fn tags_are_normalised_deduplicated_and_refused_over_limits() {
        let l = Limits::default();
        let t = tags("tags", &["Root-Cause".into(), "root-cause".into(), "triage".into()], &l).unwrap();
        assert_eq!(t, vec!["root-cause", "triage"]);
        assert!(tags("tags", &["has space".into()], &l).is_err());
        let many: Vec<String> = (0..17).map(|i| format!("t{i}")).collect();
        assert_eq!(tags("tags", &many, &l).unwrap_err().limit(), Some(16));
    }

    #[test]
    fn page_sizes_refuse_zero_and_oversize() {
        assert_eq!(page_size("limit", None, 50, 200).unwrap(), 50);
        assert!(page_size("limit", Some(0), 50, 200).is_err());
        assert_eq!(page_size("limit", Some(201), 50, 200).unwrap_err().limit(), Some(200));
    }
}
