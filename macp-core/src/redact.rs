//! Redaction on write: every text that enters a room passes [`Redactor::text`] before it is
//! validated or measured, so secrets are never stored and never half-kept.
//!
//! - Secrets become typed placeholders, `[redacted:<kind>]`; [`Redactions`] counts them by kind
//!   and goes back in the write's answer, so the agent knows what it pasted.
//! - Spans the author marks `<private>…</private>` are removed (counted as `private`); an
//!   opening tag with no closing one is refused rather than guessed at.
//! - A length limit is always checked on the redacted text, never applied by cutting before
//!   redaction: a cut can split a credential so that no pattern matches any more, leaving half a
//!   secret on display.
//! - Kinds can be turned off, and operators add their own patterns ([`Redactor::disable`],
//!   [`Redactor::pattern`]). Quality is measured on a labelled corpus
//!   (`macp-core/tests/redaction-corpus.jsonl`; recall and false positives in BENCHMARKS.md).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The kinds the built-in rules find. `private` (a marked span) is not a kind and cannot be
/// turned off: the author asked for it.
pub const KINDS: &[&str] = &[
    "aws-access-key",
    "aws-secret-key",
    "github-token",
    "gitlab-token",
    "slack-token",
    "slack-webhook",
    "webhook",
    "api-key",
    "google-api-key",
    "npm-token",
    "vault-token",
    "aws-session-token",
    "jwt",
    "private-key",
    "bearer-token",
    "basic-auth",
    "secret",
];

/// Secrets redacted, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(transparent)]
pub struct Redactions(pub BTreeMap<String, u32>);

impl Redactions {
    /// Nothing was redacted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The total over every kind.
    pub fn total(&self) -> u32 {
        self.0.values().sum()
    }

    fn add(&mut self, kind: &str) {
        *self.0.entry(kind.to_owned()).or_default() += 1;
    }
}

/// A write's answer when its type is a stored record (a room, a decision, an agent): the record
/// as stored, with `redacted` beside its fields. Dereferences to the record.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Written<T> {
    /// The record as stored.
    #[serde(flatten)]
    pub value: T,
    /// Secrets redacted from this write, by kind.
    #[serde(default, skip_serializing_if = "Redactions::is_empty")]
    pub redacted: Redactions,
}

impl<T> Written<T> {
    /// The record alone.
    pub fn into_inner(self) -> T {
        self.value
    }
}

impl<T> std::ops::Deref for Written<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

/// An operator's pattern: every match becomes `[redacted:<kind>]`.
#[derive(Debug, Clone)]
struct Pattern {
    kind: String,
    re: regex_lite::Regex,
}

/// The redactor every write passes through (see the module docs). Cheap to share.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    off: BTreeSet<String>,
    extra: Vec<Pattern>,
}

impl Redactor {
    /// Every built-in kind on, no extra pattern.
    pub fn new() -> Self {
        Self::default()
    }

    /// Turns a built-in kind off (one of [`KINDS`]); an unknown kind is refused.
    pub fn disable(mut self, kind: &str) -> Result<Self> {
        if !KINDS.contains(&kind) {
            return Err(Error::invalid(
                "redact_off",
                format!("`{kind}` is not a kind of secret; the kinds are {}", KINDS.join(", ")),
            ));
        }
        self.off.insert(kind.to_owned());
        Ok(self)
    }

    /// Adds a pattern (regular-expression syntax of the `regex-lite` crate); its matches are
    /// replaced by `[redacted:<kind>]`. `kind` is lower-case letters, digits and `-`.
    pub fn pattern(mut self, kind: &str, pattern: &str) -> Result<Self> {
        let ok = !kind.is_empty()
            && kind.len() <= 40
            && kind.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            return Err(Error::invalid(
                "redact_pattern",
                format!("the kind `{kind}` must be 1 to 40 lower-case letters, digits or `-`"),
            ));
        }
        let re = regex_lite::Regex::new(pattern).map_err(|e| {
            Error::invalid("redact_pattern", format!("the pattern for `{kind}` is invalid: {e}"))
        })?;
        if re.is_match("") {
            return Err(Error::invalid(
                "redact_pattern",
                format!("the pattern for `{kind}` matches empty text"),
            ));
        }
        self.extra.push(Pattern { kind: kind.to_owned(), re });
        Ok(self)
    }

    /// `text` as stored: private spans removed, secrets replaced, counted into `found`.
    /// `field` names the text in an error (an unclosed `<private>`).
    pub fn text(&self, text: &str, field: &str, found: &mut Redactions) -> Result<String> {
        let public = strip_private(text, field, found)?;
        Ok(self.secrets(public, found))
    }

    /// `text` with its secrets replaced, counted into `found` (`<private>` markup not read).
    fn secrets(&self, mut public: String, found: &mut Redactions) -> String {
        // The operator's patterns first: what they name is theirs to label, and the built-in
        // rules then leave their placeholders alone.
        for p in &self.extra {
            let n = p.re.find_iter(&public).count();
            if n > 0 {
                public = p.re.replace_all(&public, format!("[redacted:{}]", p.kind).as_str()).into_owned();
                *found.0.entry(p.kind.clone()).or_default() += n as u32;
            }
        }
        let mut ctx = Ctx { off: &self.off, found };
        let keys = private_keys(&public, &mut ctx);
        // Certificates and public keys are published on purpose: their lines are not read as
        // secrets (a line of a public key can look like one).
        let mut out = String::with_capacity(keys.len());
        let mut at = 0;
        for (start, end) in public_blocks(&keys) {
            out.push_str(&redact_secrets_with(&keys[at..start], &mut ctx));
            out.push_str(&keys[start..end]);
            at = end;
        }
        out.push_str(&redact_secrets_with(&keys[at..], &mut ctx));
        out
    }

    /// [`Self::text`] in place.
    pub fn apply(&self, text: &mut String, field: &str, found: &mut Redactions) -> Result<()> {
        *text = self.text(text, field, found)?;
        Ok(())
    }

    /// [`Self::text`] on an optional text.
    pub fn apply_opt(&self, text: &mut Option<String>, field: &str, found: &mut Redactions) -> Result<()> {
        if let Some(t) = text {
            self.apply(t, field, found)?;
        }
        Ok(())
    }

    /// An entity's properties: every string, keys included (see [`Self::apply_json`]).
    pub fn properties(
        &self,
        properties: &mut serde_json::Map<String, serde_json::Value>,
        found: &mut Redactions,
    ) -> Result<()> {
        let mut v = serde_json::Value::Object(std::mem::take(properties));
        self.apply_json(&mut v, "properties", found)?;
        if let serde_json::Value::Object(m) = v {
            *properties = m;
        }
        Ok(())
    }

    /// Every string inside a JSON value (entity properties), keys included.
    pub fn apply_json(&self, v: &mut serde_json::Value, field: &str, found: &mut Redactions) -> Result<()> {
        use serde_json::Value;
        match v {
            Value::String(s) => self.apply(s, field, found),
            Value::Array(a) => a.iter_mut().try_for_each(|x| self.apply_json(x, field, found)),
            Value::Object(m) => {
                let taken = std::mem::take(m);
                for (k, mut x) in taken {
                    // A value under a secret-named key is a secret whatever it looks like.
                    if is_secret_key(&k) && !self.off.contains("secret") && !x.is_null() {
                        found.add("secret");
                        x = Value::String("[redacted:secret]".into());
                    } else {
                        self.apply_json(&mut x, field, found)?;
                    }
                    let key = self.text(&k, field, found)?;
                    if m.contains_key(&key) {
                        return Err(Error::invalid(
                            field,
                            format!(
                                "two keys read `{key}` once redacted; rename one so that neither is lost"
                            ),
                        ));
                    }
                    m.insert(key, x);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// A write's texts pass the redactor through this: one implementation per input, listing every
/// text the input carries, so that a new field cannot be forgotten in one of several places.
pub trait Redact {
    /// Redacts every text of `self` in place, counting into `found`.
    fn redact(&mut self, r: &Redactor, found: &mut Redactions) -> Result<()>;
}

impl Redactor {
    /// A name that is matched or addressed as written (a file name, an agent id, a tag, a
    /// relationship type) cannot take a placeholder: one that holds a secret is refused, with
    /// the kind, and nothing is written.
    pub fn refuse_secret(&self, text: &str, field: &str) -> Result<()> {
        let mut found = Redactions::default();
        self.text(text, field, &mut found)?;
        match found.0.keys().next() {
            None => Ok(()),
            Some(kind) => Err(Error::invalid(
                field,
                format!("`{field}` holds what looks like a secret ({kind}); name it without the secret"),
            )),
        }
    }

    /// An identifier's value: redacted, and when anything was, followed by a short fingerprint
    /// of the original (`[redacted:aws-access-key]#1f2e3d4c`), so that two different leaked
    /// keys stay two entities and the same key found twice still resolves to one.
    pub fn identifier(&self, value: &mut String, field: &str, found: &mut Redactions) -> Result<()> {
        let before = found.total();
        let clean = self.text(value, field, found)?;
        if found.total() != before {
            use sha2::Digest;
            // Over the value as identifiers are compared (trimmed, any case), so the same key
            // written twice resolves to one entity.
            let d = sha2::Sha256::digest(value.trim().to_lowercase().as_bytes());
            *value = format!("{clean}#{:02x}{:02x}{:02x}{:02x}", d[0], d[1], d[2], d[3]);
        } else {
            *value = clean;
        }
        Ok(())
    }
}

impl Redact for crate::model::Evidence {
    fn redact(&mut self, r: &Redactor, found: &mut Redactions) -> Result<()> {
        r.apply(&mut self.reference, "evidence.reference", found)?;
        r.apply_opt(&mut self.description, "evidence.description", found)
    }
}

impl Redact for crate::service::PostFinding {
    fn redact(&mut self, r: &Redactor, found: &mut Redactions) -> Result<()> {
        self.tags.iter().try_for_each(|t| r.refuse_secret(t, "tags"))?;
        r.apply(&mut self.content, "content", found)?;
        self.evidence.iter_mut().try_for_each(|e| e.redact(r, found))
    }
}

impl Redact for crate::service::AddEntity {
    fn redact(&mut self, r: &Redactor, found: &mut Redactions) -> Result<()> {
        r.apply(&mut self.name, "name", found)?;
        for i in &mut self.identifiers {
            r.identifier(&mut i.value, "identifiers.value", found)?;
        }
        r.properties(&mut self.properties, found)
    }
}

impl Redact for crate::service::AddRelationship {
    fn redact(&mut self, r: &Redactor, found: &mut Redactions) -> Result<()> {
        r.refuse_secret(&self.relationship_type, "relationship_type")?;
        r.apply_opt(&mut self.description, "description", found)?;
        self.evidence.iter_mut().try_for_each(|e| e.redact(r, found))
    }
}

impl Redact for crate::service::RegisterArtifact {
    fn redact(&mut self, r: &Redactor, found: &mut Redactions) -> Result<()> {
        r.apply_opt(&mut self.description, "description", found)
    }
}

impl Redact for crate::service::AskDecision {
    fn redact(&mut self, r: &Redactor, found: &mut Redactions) -> Result<()> {
        r.apply(&mut self.question, "question", found)?;
        self.options.iter_mut().try_for_each(|o| r.apply(o, "options", found))
    }
}

impl Redact for crate::service::Erase {
    fn redact(&mut self, r: &Redactor, found: &mut Redactions) -> Result<()> {
        r.apply(&mut self.reason, "reason", found)
    }
}

impl Redact for crate::service::AnswerDecision {
    fn redact(&mut self, r: &Redactor, found: &mut Redactions) -> Result<()> {
        r.apply(&mut self.answer, "answer", found)
    }
}

impl Redact for crate::service::CreateRoom {
    fn redact(&mut self, r: &Redactor, found: &mut Redactions) -> Result<()> {
        self.tags.iter().try_for_each(|t| r.refuse_secret(t, "tags"))?;
        r.apply_opt(&mut self.name, "name", found)?;
        r.apply(&mut self.objective, "objective", found)
    }
}

impl Redact for crate::service::SteerRoom {
    fn redact(&mut self, r: &Redactor, found: &mut Redactions) -> Result<()> {
        r.apply_opt(&mut self.objective, "objective", found)?;
        r.apply_opt(&mut self.marker, "marker", found)
    }
}

impl Redact for crate::service::CloseRoom {
    fn redact(&mut self, r: &Redactor, found: &mut Redactions) -> Result<()> {
        r.apply_opt(&mut self.resolution, "resolution", found)
    }
}

impl Redact for crate::service::DeclareStatus {
    fn redact(&mut self, r: &Redactor, found: &mut Redactions) -> Result<()> {
        r.apply_opt(&mut self.reason, "reason", found)
    }
}

impl Redact for crate::service::JoinRoom {
    fn redact(&mut self, r: &Redactor, _found: &mut Redactions) -> Result<()> {
        if let Some(a) = &self.agent_id {
            r.refuse_secret(a.as_str(), "agent_id")?;
        }
        self.agent_type.iter().try_for_each(|t| r.refuse_secret(t, "agent_type"))
    }
}

impl Redact for crate::service::RequestUpload {
    fn redact(&mut self, r: &Redactor, _found: &mut Redactions) -> Result<()> {
        // The file name becomes the object's key, which the upload must match: refused, not
        // rewritten.
        r.refuse_secret(&self.filename, "filename")
    }
}

impl Redact for crate::service::ClaimWork {
    fn redact(&mut self, r: &Redactor, found: &mut Redactions) -> Result<()> {
        r.apply(&mut self.subject, "subject", found)
    }
}

struct Ctx<'a> {
    off: &'a BTreeSet<String>,
    found: &'a mut Redactions,
}

impl Ctx<'_> {
    /// `[redacted:<kind>]` counted, or `original` when the kind is off.
    fn mask(&mut self, kind: &str, original: &str) -> String {
        if self.off.contains(kind) {
            return original.to_owned();
        }
        self.found.add(kind);
        format!("[redacted:{kind}]")
    }
}

const OPEN: &str = "<private>";
const CLOSE: &str = "</private>";

/// `text` without its `<private>…</private>` spans (tags matched without regard to case).
fn strip_private(text: &str, field: &str, found: &mut Redactions) -> Result<String> {
    if !text.contains('<') {
        return Ok(text.to_owned());
    }
    // ASCII lower-casing keeps every byte offset, so `lower`'s indices are `text`'s.
    let lower = text.to_ascii_lowercase();
    if !lower.contains(OPEN) && !lower.contains(CLOSE) {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(i) = lower[at..].find(OPEN).map(|i| at + i) {
        if lower[at..i].contains(CLOSE) {
            return Err(Error::invalid(field, "a `</private>` closes no `<private>`: mark the span again"));
        }
        out.push_str(&text[at..i]);
        let Some(j) = lower[i + OPEN.len()..].find(CLOSE).map(|j| i + OPEN.len() + j) else {
            return Err(Error::invalid(
                field,
                "a `<private>` span is not closed with `</private>`: nothing was stored; close it, or the whole \
                 rest of the text would have been dropped",
            ));
        };
        found.add("private");
        at = j + CLOSE.len();
    }
    if lower[at..].contains(CLOSE) {
        return Err(Error::invalid(field, "a `</private>` closes no `<private>`: mark the span again"));
    }
    out.push_str(&text[at..]);
    Ok(out)
}

/// PEM private keys, whole: from `-----BEGIN … PRIVATE KEY-----` to its `-----END … -----`
/// (also inside JSON, where the line breaks are `\n`), or to the end of the key material when
/// a paste lost its end line. A block with no key material in it (`<omitted>`) is left alone.
fn private_keys(text: &str, ctx: &mut Ctx<'_>) -> String {
    const BEGIN: &str = "-----BEGIN ";
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while let Some(i) = text[at..].find(BEGIN).map(|i| at + i) {
        let head_end = text[i + BEGIN.len()..].find("-----").map(|e| i + BEGIN.len() + e + 5);
        let is_private = head_end.is_some_and(|e| text[i..e].contains("PRIVATE KEY"));
        let Some(head_end) = head_end.filter(|_| is_private) else {
            out.push_str(&text[at..i + BEGIN.len()]);
            at = i + BEGIN.len();
            continue;
        };
        let end = match text[head_end..].find("-----END ") {
            Some(e) => {
                let e = head_end + e + "-----END ".len();
                text[e..].find("-----").map_or(text.len(), |x| e + x + 5)
            }
            None => text[head_end..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || "+/=\\\r\n ".contains(c)))
                .map_or(text.len(), |x| head_end + x),
        };
        let material = text[head_end..end]
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '+' || c == '/' || c == '='))
            .any(|run| run.len() >= 40);
        out.push_str(&text[at..i]);
        if material {
            out.push_str(&ctx.mask("private-key", &text[i..end]));
        } else {
            out.push_str(&text[i..end]);
        }
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// The spans of `-----BEGIN X-----` … `-----END X-----` blocks that hold no private key.
fn public_blocks(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].find("-----BEGIN ").map(|i| at + i) {
        let Some(h) = text[i + 11..].find("-----").map(|h| i + 11 + h) else { break };
        let label = &text[i + 11..h];
        let end_marker = format!("-----END {label}-----");
        const PUBLIC: &[&str] = &[
            "CERTIFICATE",
            "PUBLIC KEY",
            "RSA PUBLIC KEY",
            "CERTIFICATE REQUEST",
            "NEW CERTIFICATE REQUEST",
            "X509 CRL",
            "PGP PUBLIC KEY BLOCK",
            "PGP SIGNATURE",
            "SSH2 PUBLIC KEY",
        ];
        let base64 = |b: &str| b.chars().all(|c| c.is_ascii_alphanumeric() || "+/=\r\n\\ ".contains(c));
        match text[h..].find(&end_marker) {
            Some(e) if PUBLIC.contains(&label) && base64(&text[h + 5..h + e]) => {
                let end = h + e + end_marker.len();
                out.push((i, end));
                at = end;
            }
            _ => at = h + 5,
        }
    }
    out
}

/// Keys whose value is a secret in `key=value`, `key: value`, `"key": "value"`, a URL query, a
/// cookie or a command-line flag. A key matches as itself or as the last part of a longer name
/// (`DB_PASSWORD`, `x-api-key`, `auth.adminPassword`, `PGPASSWORD`).
const SECRET_KEYS: &[&str] = &[
    "password",
    "passwd",
    "pwd",
    "pass",
    "secret",
    "token",
    "api_key",
    "apikey",
    "api-key",
    "access_key",
    "accountkey",
    "sharedaccesskey",
    "private_key",
    "credential",
    "credentials",
    "auth",
    "authorization",
    "signature",
    "sig",
    "sid",
    "session",
    "sessionid",
    "jsessionid",
    "phpsessid",
    "remember_me",
    "secret_key",
    "secret_key_base",
    "signing_key",
    "encryption_key",
    "master_key",
    "app_key",
    "app-key",
    "application_key",
    "application-key",
    "requirepass",
    "masterauth",
    "account_key",
    "account-key",
    "routing_key",
    "integration_key",
    "license_key",
    "client_key",
    "client-key",
    "key-data",
    "key_data",
    "oauth2_proxy",
];

/// Keys whose value is a secret whatever it looks like (short of a placeholder); after the
/// others (`token: …`) a value must look like a credential, since prose says "token: see the
/// vault" too.
fn is_password_key(key: &str) -> bool {
    named(
        key.trim_matches(|c: char| !c.is_ascii_alphanumeric()),
        &["password", "passwd", "pwd", "pass", "pw", "requirepass", "masterauth"],
    )
}

/// `key` (any case) is one of `names`, or ends with one after a boundary: `_`, `-` or `.`, a
/// camel-case hump (`adminPassword`), or anywhere in an upper-case environment name
/// (`PGPASSWORD`). Allocates nothing: it runs for every word of every text.
fn named(key: &str, names: &[&str]) -> bool {
    let k = key.as_bytes();
    let env = k.iter().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_');
    names.iter().any(|n| {
        let n = n.as_bytes();
        if k.len() < n.len() || !k[k.len() - n.len()..].eq_ignore_ascii_case(n) {
            return false;
        }
        let at = k.len() - n.len();
        at == 0
            || env
            || matches!(k[at - 1], b'_' | b'-' | b'.')
            || (k[at].is_ascii_uppercase() && k[at - 1].is_ascii_lowercase())
    })
}

fn is_secret_key(key: &str) -> bool {
    let k = key.trim_matches(|c: char| matches!(c, '"' | '\'' | '`' | '{' | '[' | '(' | ','));
    !k.is_empty() && named(k, SECRET_KEYS)
}

/// Looks like a credential rather than a word: six characters or more, with a digit or both
/// cases, and not a reference to one.
fn credential_like(w: &str) -> bool {
    let w = w.trim_matches(|c| c == '"' || c == '\'');
    let digit = w.chars().any(|c| c.is_ascii_digit());
    // Both cases past the first letter: `Creation` is a word, `hBXVF1Y2` is not.
    let cases =
        w.chars().skip(1).any(|c| c.is_ascii_uppercase()) && w.chars().any(|c| c.is_ascii_lowercase());
    w.len() >= 6 && (digit || cases) && !placeholder(w)
}

/// Unmistakably not a word: eight characters or more with upper and lower case and a digit.
fn strong_credential(w: &str) -> bool {
    w.len() >= 8
        && !w.contains(['=', ':'])
        && w.chars().any(|c| c.is_ascii_uppercase())
        && w.chars().any(|c| c.is_ascii_lowercase())
        && w.chars().any(|c| c.is_ascii_digit())
        && !w.contains("://")
        && !placeholder(w)
}

/// A reference to a secret or a stand-in for one, not the secret: `${VAR}`, `$(cmd)`, `<token>`,
/// `{{ … }}`, `%(x)s`, `[REDACTED]`, `********`, `null`, `-`, an environment name
/// (`CHANGEME_IN_VAULT`), or code that fetches it (`os.environ["X"]`).
fn placeholder(w: &str) -> bool {
    let w = w.trim_matches(|c| c == '"' || c == '\'' || c == ',' || c == ';');
    let is = |words: &[&str]| words.iter().any(|x| w.eq_ignore_ascii_case(x));
    let starts = |p: &str| w.len() >= p.len() && w.as_bytes()[..p.len()].eq_ignore_ascii_case(p.as_bytes());
    w.is_empty()
        || w.starts_with('$')
        || w.starts_with("{{")
        || w.starts_with("%(")
        || w.starts_with('<')
        || w.starts_with('[')
        || w.contains("[redacted:")
        || is(&["-", "null", "none", "nil", "true", "false", "redacted", "changeme"])
        || (w.len() >= 3 && w.chars().all(|c| matches!(c, '*' | 'x' | 'X' | '.' | '•')))
        || (w.contains('_') && w.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        || call(w)
        || w.contains("[\"")
        || w.contains("['")
        || w.starts_with("ENC[")
        || w.starts_with("#{")
        || w.starts_with("%%")
        || w.starts_with('!')
        || w.starts_with('+')
        || w.contains("••")
        || w.contains("***")
        || w.contains("/secrets/")
        || is(&["yes", "no", "sensitive", "filtered", "hidden", "omitted"])
        || ["op://", "vault:", "ssm:", "arn:", "secretsmanager:", "file:"].iter().any(|p| starts(p))
        || (w.starts_with('/')
            && w[1..].contains('/')
            && !w.contains(['+', '='])
            && w.split('/').all(|s| s.len() < 24))
        || reference(w)
        || dummy(w)
}

/// A call that fetches a secret (`os.environ.get("X")`, `getenv('X')`): an identifier path
/// before the first `(`.
fn call(w: &str) -> bool {
    w.split_once('(').is_some_and(|(f, _)| {
        !f.is_empty() && f.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == ':')
    })
}

/// Code that names where a secret comes from (`process.env.API_KEY`, `data.x.secret_string`,
/// `random_password.db.result`): dotted identifiers led by a lower-case one.
fn reference(w: &str) -> bool {
    let parts: Vec<&str> = w.split('.').collect();
    let ident = |p: &str| {
        p.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    parts.len() >= 2
        && parts.iter().all(|p| ident(p) && !p.chars().any(|c| c.is_ascii_digit()))
        && parts[0].chars().all(|c| c.is_ascii_lowercase() || c == '_')
}

/// A stand-in shaped like a token: `ghp_xxxxxxxx…`, `xoxb-your-bot-token-here`, `sk-…example`.
fn dummy(w: &str) -> bool {
    let body = w.rsplit(['_', '-']).next().unwrap_or(w).as_bytes();
    let few = body.len() >= 8 && {
        let first = body[0];
        let second = body.iter().find(|b| **b != first).copied().unwrap_or(first);
        body.iter().all(|b| *b == first || *b == second)
    };
    let has = |d: &str| w.as_bytes().windows(d.len()).any(|x| x.eq_ignore_ascii_case(d.as_bytes()));
    few || ["your", "here", "example", "xxxx", "changeme", "placeholder", "dummy"].iter().any(|d| has(d))
}

/// Characters that wrap a word without being part of it: quotes and brackets on both sides,
/// and sentence punctuation after it.
fn leading(c: char) -> bool {
    matches!(c, '"' | '\'' | '`' | '(' | '[' | '{' | '<') || (!c.is_ascii() && !c.is_alphanumeric())
}

fn trailing(c: char) -> bool {
    matches!(c, '"' | '\'' | '`' | ')' | ']' | '}' | '>' | ',' | ';' | '.' | '!' | '?')
        || (!c.is_ascii() && !c.is_alphanumeric())
}

/// The kind of secret `word` is, if it is one on its own.
fn secret_kind(word: &str) -> Option<&'static str> {
    let word = word.strip_suffix(':').unwrap_or(word);
    shape(word).filter(|_| !dummy(word))
}

/// [`secret_kind`] before ruling out stand-ins.
fn shape(word: &str) -> Option<&'static str> {
    let upper_alnum = |s: &str| s.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    let token_chars = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let aws_prefix = ["AKIA", "ASIA", "AIDA", "AROA", "ABIA", "ACCA"];
    if word.len() == 20 && aws_prefix.iter().any(|p| word.starts_with(p)) && upper_alnum(&word[4..]) {
        return Some("aws-access-key");
    }
    let prefixed = |prefixes: &[&str], min: usize| {
        prefixes.iter().any(|p| word.starts_with(p)) && word.len() >= min && token_chars(word)
    };
    if prefixed(&["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"], 20) {
        return Some("github-token");
    }
    if prefixed(&["glpat-", "gldt-", "glrt-", "glptt-"], 20) {
        return Some("gitlab-token");
    }
    if prefixed(&["xoxb-", "xoxp-", "xoxa-", "xoxr-", "xoxs-", "xoxe-"], 15) {
        return Some("slack-token");
    }
    if word.starts_with("https://hooks.slack.com/services/") && word.len() > 45 {
        return Some("slack-webhook");
    }
    // OpenAI (`sk-`, `sk-proj-`), Anthropic (`sk-ant-`), Stripe secret and restricted keys,
    // webhook signing secrets, SendGrid.
    if prefixed(&["sk-", "sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_"], 20) {
        return Some("api-key");
    }
    if word.starts_with("SG.")
        && word.len() >= 60
        && word[3..].chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Some("api-key");
    }
    if word.starts_with("AIza") && word.len() == 39 && token_chars(word) {
        return Some("google-api-key");
    }
    if word.starts_with("npm_") && word.len() == 40 && token_chars(word) {
        return Some("npm-token");
    }
    if prefixed(&["dckr_pat_", "pypi-"], 24) {
        return Some("api-key");
    }
    if prefixed(&["dop_v1_", "doo_v1_", "dor_v1_", "hcaik_", "hcxik_", "AGE-SECRET-KEY-1"], 40) {
        return Some("api-key");
    }
    if word.starts_with("dt0c01.") && word.len() >= 60 {
        return Some("api-key");
    }
    if word.starts_with("AKCp") && word.len() >= 60 && token_chars(word) {
        return Some("api-key");
    }
    if word.starts_with("oy2")
        && word.len() == 46
        && word.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    {
        return Some("api-key");
    }
    // Firebase Cloud Messaging server keys.
    if word.starts_with("AAAA") && word.contains(":APA91b") && word.len() >= 100 {
        return Some("api-key");
    }
    // A Telegram bot token: `bot<id>:<35 characters>` (in its API URLs) or bare.
    if let Some((id, tok)) = word.trim_start_matches("bot").split_once(':')
        && id.len() >= 8
        && id.chars().all(|c| c.is_ascii_digit())
        && tok.len() == 35
        && token_chars(tok)
    {
        return Some("api-key");
    }
    if ["https://discord.com/api/webhooks/", "https://discordapp.com/api/webhooks/"]
        .iter()
        .any(|p| word.starts_with(p))
        && word.len() > 60
    {
        return Some("webhook");
    }
    if (word.starts_with("hvs.") || word.starts_with("hvb.")) && word.len() >= 24 && token_chars(&word[4..]) {
        return Some("vault-token");
    }
    // AWS temporary credentials' session token (base64 of a known header).
    if (word.starts_with("FwoGZXIvYXdz") || word.starts_with("IQoJb3JpZ2lu")) && word.len() >= 100 {
        return Some("aws-session-token");
    }
    if word.bytes().filter(|b| *b == b'.').count() != 2 {
        return aws_secret(word);
    }
    let parts: Vec<&str> = word.split('.').collect();
    let b64 = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if parts.len() == 3 && parts[0].starts_with("eyJ") && parts[1].len() >= 4 && parts.iter().all(|p| b64(p))
    {
        return Some("jwt");
    }
    // A Discord bot token: three base64url parts, the first the bot's id.
    if parts.len() == 3
        && parts[0].len() >= 24
        && parts[1].len() == 6
        && parts[2].len() >= 27
        && parts.iter().all(|p| b64(p))
        && parts[0].starts_with(['M', 'N', 'O'])
    {
        return Some("api-key");
    }
    aws_secret(word)
}

/// An AWS secret access key on its own: 40 characters of base64 with upper and lower case and a
/// digit (hex ids, hashes and ULIDs have one case; base64 blobs are longer).
fn aws_secret(word: &str) -> Option<&'static str> {
    if word.len() == 40
        && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '/' || c == '+')
        && word.chars().any(|c| c.is_ascii_uppercase())
        && word.chars().any(|c| c.is_ascii_lowercase())
        && word.chars().any(|c| c.is_ascii_digit())
    {
        return Some("aws-secret-key");
    }
    None
}

/// The value of a secret-named key, masked; `None` when it is a placeholder or, for a key that
/// is not a password's (`weak`), does not look like a credential.
fn value_of_key(value: &str, weak: bool, ctx: &mut Ctx<'_>) -> Option<String> {
    let bare = value.trim_matches(|c| c == '"' || c == '\'');
    if let Some(k) = secret_kind(bare) {
        return Some(ctx.mask(k, bare));
    }
    if !secret_value(bare, weak) {
        return None;
    }
    Some(ctx.mask("secret", bare))
}

/// Whether the value of a secret-named key is a secret: never a placeholder; after a password's
/// key anything but a plain word or number (`Welcome`, `sensitive`, `24`); after another key
/// (`weak`) only what looks like a credential.
fn secret_value(v: &str, weak: bool) -> bool {
    // `ref+awssm://prod/db#password`: where the secret is, not the secret.
    if placeholder(v) || (v.contains("://") && !v.contains('@')) {
        return false;
    }
    if weak {
        return credential_like(v);
    }
    let letters = v.chars().all(|c| c.is_ascii_alphabetic());
    let word = letters && v.len() <= 12 && v.chars().skip(1).all(|c| c.is_ascii_lowercase());
    let number = v.chars().all(|c| c.is_ascii_digit());
    !v.is_empty() && !word && !number
}

/// One word (no whitespace, wrappers removed) with the secrets in it masked.
fn redact_word(w: &str, ctx: &mut Ctx<'_>) -> String {
    // `${POSTGRES_PASSWORD:?must be set}`, `{{ .Values.password }}`: a template, whole.
    if ["$", "{{", "%(", "#{", "%%"].iter().any(|p| w.starts_with(p)) {
        return w.to_owned();
    }
    // A JWT run into what follows it (`cat token` output, then the prompt).
    if w.starts_with("eyJ") {
        let end = w.find(|c: char| !(c.is_ascii_alphanumeric() || "-_.".contains(c))).unwrap_or(w.len());
        if end < w.len() && secret_kind(&w[..end]) == Some("jwt") {
            return ctx.mask("jwt", &w[..end]) + &redact_word(&w[end..], ctx);
        }
    }
    if let Some(kind) = secret_kind(w) {
        return ctx.mask(kind, w.strip_suffix(':').unwrap_or(w)) + if w.ends_with(':') { ":" } else { "" };
    }
    // `scheme://user:password@host…`: the password; `scheme://token@host`: the token.
    if let Some(i) = w.find("://") {
        let rest = &w[i + 3..];
        let path = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = rest[..path].rfind('@') {
            let userinfo = &rest[..at];
            // A URL's password is one whatever it looks like (`postgres://app:secret@db`),
            // unless it is a placeholder (`redis://:<password>@cache`).
            if let Some(colon) = userinfo.find(':')
                && let pass = &userinfo[colon + 1..]
                && !pass.is_empty()
                && !placeholder(pass)
            {
                let m = ctx.mask(secret_kind(pass).unwrap_or("secret"), pass);
                let host = redact_word(&rest[at..], ctx);
                return format!("{}{m}{host}", &w[..i + 3 + colon + 1]);
            }
            if let Some(kind) = secret_kind(userinfo) {
                let m = ctx.mask(kind, userinfo);
                let host = redact_word(&rest[at..], ctx);
                return format!("{}{m}{host}", &w[..i + 3]);
            }
        }
    }
    // `key=value` pairs, several joined by `?`, `&`, `;` or `,` (a URL query, a cookie, a CSV
    // line), or `key:value`; a value that is itself `key=value` is looked into.
    let mut out = String::with_capacity(w.len());
    let mut rest = w;
    // `?` starts a query only in a URL or a path (a password may hold one).
    let url = w.contains('/');
    while !rest.is_empty() {
        let end = if url { rest.find(['?', '&', ';', ',']) } else { rest.find(['&', ';', ',']) }
            .map_or(rest.len(), |i| i + 1);
        let (part, tail) = rest.split_at(end);
        rest = tail;
        let (body, sep) = match part.char_indices().last() {
            Some((i, '?' | '&' | ';' | ',')) => (&part[..i], &part[i..]),
            _ => (part, ""),
        };
        out.push_str(&pair(body, ctx));
        out.push_str(sep);
    }
    out
}

/// `key=value` or `key:value` with the value masked when the key names a secret or the value is
/// one; anything else as it was (with any pair inside the value looked into).
fn pair(body: &str, ctx: &mut Ctx<'_>) -> String {
    if let Some(p) = pgpass(body, ctx) {
        return p;
    }
    let Some(i) = body.find(['=', ':']).filter(|i| *i > 0 && i + 1 < body.len()) else {
        return match secret_kind(body) {
            Some(k) => ctx.mask(k, body),
            None => inside(body, ctx),
        };
    };
    let (key, value) = (&body[..i], &body[i + 1..]);
    // Ruby's `"password"=>"…"`.
    let (i, value) = match value.strip_prefix('>') {
        Some(v) if !v.is_empty() => (i + 1, v),
        _ => (i, value),
    };
    let quote = &value[..value.chars().next().map_or(0, char::len_utf8)];
    let quoted = quote == "\"" || quote == "'";
    let masked = if is_secret_key(key) {
        value_of_key(value, !is_password_key(key), ctx)
    } else if secret_kind(key) == Some("aws-access-key") && credential_like(value) {
        // `AKIA…:secret` (SES SMTP credentials in `sasl_passwd`, `id:secret` pairs).
        Some(ctx.mask("aws-secret-key", value))
    } else if let Some((pass, host)) = value.split_once('@')
        && body.as_bytes()[i] == b':'
        && key.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
        && credential_like(pass)
    {
        // `user:password@tcp(host)` (a Go DSN), `user:password@host`.
        Some(format!("{}@{host}", ctx.mask("secret", pass)))
    } else {
        let bare = value.trim_matches(|c| c == '"' || c == '\'');
        secret_kind(bare).map(|k| ctx.mask(k, bare))
    };
    match masked {
        Some(m) => {
            let close = if quoted && value.len() > 1 && value.ends_with(quote) { quote } else { "" };
            format!("{}{}{m}{close}", &body[..=i], if quoted { quote } else { "" })
        }
        // `--from-literal=password=…`, `//registry.npmjs.org/:_authToken=…`; a value with no
        // `=` is not looked into (an ARN is colons all the way).
        None if value.contains('=') => format!("{}{}", &body[..=i], pair(value, ctx)),
        None => inside(body, ctx),
    }
}

/// Known token shapes inside a word of code or markup (`('sk_live_…',`, `"SG.…")`): the pieces
/// between quotes, brackets and commas.
fn inside(body: &str, ctx: &mut Ctx<'_>) -> String {
    let delim = |c: char| "'\"()[]{}<>,`/".contains(c);
    if !body.contains(delim) {
        return body.to_owned();
    }
    let mut out = String::with_capacity(body.len());
    let mut piece = String::new();
    let flush = |piece: &mut String, out: &mut String, ctx: &mut Ctx<'_>| {
        match secret_kind(piece) {
            Some(k) => out.push_str(&ctx.mask(k, piece)),
            None => out.push_str(piece),
        }
        piece.clear();
    };
    for c in body.chars() {
        if delim(c) {
            flush(&mut piece, &mut out, ctx);
            out.push(c);
        } else {
            piece.push(c);
        }
    }
    flush(&mut piece, &mut out, ctx);
    out
}

/// `<name>value</name>` where `name` names a secret: the value masked.
fn xml_element(raw: &str, ctx: &mut Ctx<'_>) -> Option<String> {
    let rest = raw.strip_prefix('<')?;
    let (name, rest) = rest.split_once('>')?;
    let (value, close) = rest.split_once("</")?;
    if !close.starts_with(name) || !is_secret_key(name) || !secret_value(value, !is_password_key(name)) {
        return None;
    }
    Some(format!("<{name}>{}</{close}", ctx.mask(secret_kind(value).unwrap_or("secret"), value)))
}

/// A `.pgpass` line, `host:port:database:user:password`: the password.
fn pgpass(body: &str, ctx: &mut Ctx<'_>) -> Option<String> {
    if body.bytes().filter(|b| *b == b':').count() < 4 {
        return None;
    }
    let f: Vec<&str> = body.splitn(5, ':').collect();
    let port =
        f.get(1).is_some_and(|p| *p == "*" || (!p.is_empty() && p.chars().all(|c| c.is_ascii_digit())));
    let host = f.first().is_some_and(|h| *h == "*" || h.chars().any(|c| c.is_ascii_alphabetic() || c == '.'));
    if f.len() != 5
        || !port
        || !host
        || f[0].contains('/')
        || f[4].contains(':')
        || !secret_value(f[4], false)
    {
        return None;
    }
    let cut = body.len() - f[4].len();
    Some(format!("{}{}", &body[..cut], ctx.mask("secret", f[4])))
}

/// Schemes of an `Authorization` header: the credential is the word after them.
fn auth_scheme(word: &str) -> Option<&'static str> {
    match word.to_ascii_lowercase().as_str() {
        "bearer" => Some("bearer-token"),
        "basic" => Some("basic-auth"),
        "token" | "digest" | "negotiate" | "aws4-hmac-sha256" | "ssws" | "splunk" | "apikey"
        | "api-token" | "api-key" | "key" => Some("secret"),
        _ => None,
    }
}

/// A command-line flag whose next word is a password (`-p`, `--password`, `-Password`, `-a`,
/// `-w`, `--token`, …): `Some(short)`, where a short flag's value must look like a credential
/// (`-p 6379` is a port).
fn secret_flag(word: &str) -> Option<bool> {
    if !word.starts_with('-') || word.contains('=') {
        return None;
    }
    let name = word.trim_start_matches('-');
    if matches!(name, "p" | "a" | "w" | "P") {
        return Some(true);
    }
    let pass = ["pass", "password", "passwd", "pwd"].iter().any(|p| name.to_ascii_lowercase().ends_with(p));
    (name.len() > 1 && (is_secret_key(name) || pass) && !name.ends_with("-stdin") && !name.ends_with("-file"))
        .then_some(false)
}

/// `text` with every recognised secret replaced by `[redacted:<kind>]` (every built-in kind
/// on): cloud keys, GitHub, GitLab, Slack and API tokens, JWTs, PEM private keys, the
/// credential after an `Authorization` scheme, a URL's password, the value of a `password=…`,
/// `token: …`, `"secret": "…"`, `?token=…` pair or a `--password` flag. Whitespace is kept as
/// it was.
/// `<private>` markup is not read here (see [`Redactor::text`]).
pub fn redact_secrets(text: &str) -> String {
    Redactor::new().secrets(text.to_owned(), &mut Redactions::default())
}

fn redact_secrets_with(text: &str, ctx: &mut Ctx<'_>) -> String {
    let mut out = String::with_capacity(text.len());
    // The next word is a secret of this kind (after `password:`, or `Authorization: Basic`);
    // `weak`: only if it looks like a credential (after `token:`, a lone `Bearer`, a flag).
    let mut pending: Option<(&'static str, bool)> = None;
    // The last word was a bare secret key (`Some(weak)`): a following `=` or `:` makes the next
    // word its value.
    let mut bare_key: Option<bool> = None;
    // The last word was `-u`/`--user`: a `user:password` after it loses its password.
    let mut user_flag = false;
    // A command whose password is the n-th word after this one (`rabbitmqctl add_user NAME
    // PASS`, `htpasswd -b FILE USER PASS`).
    let mut positional: Option<u8> = None;
    let mut prev_word = "";
    // `echo 'S3cret' | sudo -S …` / `| docker login --password-stdin`: the echoed word, where
    // it sits in `out`, until the line shows it is read as a password.
    let mut echoed: Option<(usize, usize, String)> = None;
    let mut after_echo = false;
    // Words left in a sentence about a password ("the admin password for grafana is …"),
    // in which a strongly credential-looking word is taken for it.
    let mut pw_window = 0u8;
    // The last word ended a key's name that needs its first half (`API key:`).
    let mut prev_qualifies = false;
    let mut rest = text;
    while !rest.is_empty() {
        let ws = rest.len() - rest.trim_start().len();
        out.push_str(&rest[..ws]);
        rest = &rest[ws..];
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let (raw, tail) = rest.split_at(end);
        rest = tail;
        if raw.is_empty() {
            continue;
        }
        // A Python string prefix (`f"Bearer …`) wraps the word as a quote does.
        let prefix = match raw.as_bytes() {
            [b'f' | b'b' | b'r', b'"' | b'\'', ..] => 1,
            _ => 0,
        };
        let start = raw[prefix..].find(|c: char| !leading(c)).map_or(raw.len(), |i| i + prefix);
        let stop = raw
            .rfind(|c: char| !trailing(c))
            .map_or(start, |i| i + raw[i..].chars().next().map_or(1, char::len_utf8));
        let (pre, core, post) =
            if start < stop { (&raw[..start], &raw[start..stop], &raw[stop..]) } else { (raw, "", "") };
        if core.is_empty() || core.starts_with("[redacted:") {
            // `{{ .Values.apiKey }}` and the like: what follows is a template, not a value.
            pending = None;
            out.push_str(raw);
            continue;
        }
        // A word ending with `:` is a key, not a value: YAML's `- name: DB_PASSWORD` then
        // `value: …` keeps waiting for the value; any other key ends the wait.
        if pending.is_some() && core.ends_with(':') && core != "value:" && auth_scheme(core).is_none() {
            pending = None;
        }
        if pending.is_some() && core == "value:" {
            out.push_str(raw);
            continue;
        }
        if core == "=" || core == ":" {
            if let Some(weak) = bare_key {
                pending = Some(("secret", weak));
            }
            bare_key = None;
            out.push_str(raw);
            continue;
        }
        // `Authorization: Basic …`: the scheme stays, the credential after it goes.
        if let Some(kind) = auth_scheme(core) {
            // After `Authorization:`, not after `bearer` ("every bearer token issued …").
            if pending.is_some_and(|(k, _)| k == "secret") {
                pending = Some((kind, false));
                out.push_str(raw);
                continue;
            }
            if kind == "bearer-token" {
                pending = Some((kind, true));
                out.push_str(raw);
                continue;
            }
        }
        pw_window = pw_window.saturating_sub(1);
        if echoed.as_ref().is_some_and(|(s, _, _)| out[*s..].contains('\n')) {
            echoed = None;
        }
        if matches!(core, "-S" | "--password-stdin" | "--stdin")
            && let Some((s, e, word)) = echoed.take()
            // Only if the echoed word is still there as it was (nothing masked it since).
            && out.get(s..e) == Some(word.as_str())
        {
            out.replace_range(s..e, &ctx.mask("secret", &word));
        }
        if std::mem::take(&mut after_echo) && secret_value(core, false) && !core.starts_with('-') {
            let s = out.len() + pre.len();
            echoed = Some((s, s + core.len(), core.to_owned()));
        }
        if core == "echo" {
            after_echo = true;
        }
        let command = std::mem::replace(
            &mut prev_word,
            if matches!(core, "rabbitmqctl" | "htpasswd") { core } else { "" },
        );
        match positional {
            Some(0) => {
                positional = None;
                if secret_value(core, false) {
                    out.push_str(pre);
                    out.push_str(&ctx.mask("secret", core));
                    out.push_str(post);
                    continue;
                }
            }
            Some(n) if !core.starts_with('-') => positional = Some(n - 1),
            _ => {}
        }
        if matches!(core, "add_user" | "change_password") && command == "rabbitmqctl" {
            positional = Some(1);
        } else if command == "htpasswd" && core.starts_with("-b") {
            positional = Some(if core.contains('n') { 1 } else { 2 });
        }
        // A type between a key and its value (`const DB_PASSWORD: &str = "…"`).
        if pending.is_some()
            && matches!(core, "&str" | "str" | "string" | "String" | "&'static" | "char*" | "[]byte")
        {
            out.push_str(raw);
            continue;
        }
        if let Some((kind, weak)) = pending.take() {
            // `<add key="SmtpPassword" value="…" />`: the value attribute's value; the
            // attribute's name and quotes stay.
            let (lead, value) = match core.strip_prefix("value=") {
                Some(v) => ("value=", v),
                None => ("", core),
            };
            let open = &value[..value.len() - value.trim_start_matches(['"', '\'']).len()];
            let inner = &value[open.len()..];
            // A quoted value ends at its closing quote, punctuation included (`"S3cret!"`).
            let quote =
                open.chars().next().or_else(|| pre.chars().last().filter(|c| matches!(c, '"' | '\'')));
            let tail = format!("{}{post}", &inner[inner.trim_end_matches(['"', '\'']).len()..]);
            let bare_end = inner.trim_end_matches(['"', '\'']);
            let (bare, rest) = match quote.and_then(|q| tail.find(q)) {
                Some(k) if k > 0 => (format!("{bare_end}{}", &tail[..k]), &tail[k..]),
                _ => (bare_end.to_owned(), tail.as_str()),
            };
            let template = placeholder(raw.trim_start_matches(['"', '\'']));
            let shape = secret_kind(&bare);
            if !template && (shape.is_some() || secret_value(&bare, weak)) {
                let masked = ctx.mask(shape.unwrap_or(kind), &bare);
                for part in [pre, lead, open, masked.as_str(), rest] {
                    out.push_str(part);
                }
                bare_key = None;
                continue;
            }
        }
        if std::mem::take(&mut user_flag)
            && let Some(cut) = core.find([':', '%'])
            && credential_like(&core[cut + 1..])
        {
            // `curl -u user:password`, `smbclient -U 'DOMAIN\user%password'`.
            out.push_str(pre);
            out.push_str(&core[..=cut]);
            out.push_str(&ctx.mask("secret", &core[cut + 1..]));
            out.push_str(post);
            continue;
        }
        if matches!(core, "-u" | "-U" | "--user") {
            user_flag = true;
            out.push_str(raw);
            continue;
        }
        if secret_flag(core).is_some() {
            // Weak even for `--password`: "Using --password via the CLI is insecure".
            pending = Some(("secret", true));
            out.push_str(raw);
            continue;
        }
        // `<password>…</password>` (Maven settings, XML configs).
        if let Some(x) = xml_element(raw, ctx) {
            out.push_str(&x);
            continue;
        }
        // `-pS3cret` (mysql): a password glued to its flag.
        if let Some(glued) = core.strip_prefix("-p")
            && credential_like(glued)
        {
            out.push_str(pre);
            out.push_str("-p");
            out.push_str(&ctx.mask("secret", glued));
            out.push_str(post);
            continue;
        }
        // `password:` / `token=`: the value is the next word; so after `API key:`.
        if let Some(key) = core.strip_suffix(':').or_else(|| core.strip_suffix('='))
            && (is_secret_key(key)
                || (key.eq_ignore_ascii_case("key") && std::mem::take(&mut prev_qualifies)))
        {
            pending = Some(("secret", !is_password_key(key)));
            out.push_str(raw);
            continue;
        }
        // "the partner's API key is …", "WPA2 key …": a sentence naming a key.
        if core.eq_ignore_ascii_case("key") && prev_qualifies {
            pw_window = 6;
        }
        prev_qualifies = [
            "api", "access", "secret", "private", "signing", "license", "wpa2", "wifi", "unseal", "recovery",
        ]
        .iter()
        .any(|q| core.eq_ignore_ascii_case(q));
        if pw_window > 0 && strong_credential(core) {
            out.push_str(pre);
            out.push_str(&ctx.mask("secret", core));
            out.push_str(post);
            pw_window = 0;
            continue;
        }
        // A word with `=` or `:` inside is a pair, not a key waiting for its value.
        let lone = !core.contains(['=', ':']);
        if let Some(name) = core.strip_prefix("key=").map(|n| n.trim_matches('"'))
            && is_secret_key(name)
        {
            pending = Some(("secret", !is_password_key(name)));
        }
        let password = lone && is_password_key(core);
        bare_key = (lone && is_secret_key(core)).then_some(!password);
        if password {
            // `password Falcon%falcon2566&` (.netrc): a credential-looking next word; and a
            // sentence about a password names it within a few words.
            pending = Some(("secret", true));
            pw_window = 8;
        }
        out.push_str(pre);
        out.push_str(&redact_word(core, ctx));
        out.push_str(post);
    }
    out
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn known_secret_shapes_are_replaced_whole() {
        let t = "rotated AKIA2E0A8F3B244C9986 and ghp_abcdefghijklmnopqrstuvwxyz0123 (Bearer abc.def.ghi123) password=hunter2";
        assert_eq!(
            redact_secrets(t),
            "rotated [redacted:aws-access-key] and [redacted:github-token] (Bearer [redacted:bearer-token]) \
             password=[redacted:secret]"
        );
    }

    #[test]
    fn sentence_punctuation_does_not_hide_a_secret() {
        assert_eq!(redact_secrets("key AKIA2E0A8F3B244C9986."), "key [redacted:aws-access-key].");
        assert_eq!(
            redact_secrets("jwt eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl, then"),
            "jwt [redacted:jwt], then"
        );
    }

    #[test]
    fn a_key_and_its_value_in_every_spelling() {
        assert_eq!(redact_secrets("db token: s3cr3t now"), "db token: [redacted:secret] now");
        assert_eq!(redact_secrets("password = hunter2 ok"), "password = [redacted:secret] ok");
        assert_eq!(redact_secrets(r#"{"password": "x7"}"#), r#"{"password": "[redacted:secret]"}"#);
        assert_eq!(redact_secrets(r#"{"password":"x7"}"#), r#"{"password":"[redacted:secret]"}"#);
        assert_eq!(redact_secrets("DB_PASSWORD=x7"), "DB_PASSWORD=[redacted:secret]");
    }

    #[test]
    fn urls_lose_their_passwords_and_secret_parameters() {
        assert_eq!(
            redact_secrets("https://h/?token=9f8e7d6c5b&page=2"),
            "https://h/?token=[redacted:secret]&page=2"
        );
        assert_eq!(
            redact_secrets("postgres://app:pa55@db:5432/x"),
            "postgres://app:[redacted:secret]@db:5432/x"
        );
    }

    #[test]
    fn a_password_piped_to_a_command_that_reads_it_is_masked_and_nothing_else_moves() {
        assert_eq!(redact_secrets("echo 'S3cr3t-pw9' | sudo -S ls"), "echo '[redacted:secret]' | sudo -S ls");
        // The echoed word is a token already masked: the later `-S` changes nothing (it once
        // pointed at a stale range, cutting text or panicking).
        let t = "echo ghp_abcdefghijklmnopqrstuvwxyz0123456789 é | sudo -S ls";
        assert_eq!(redact_secrets(t), "echo [redacted:github-token] é | sudo -S ls");
        let t = "echo AKIA2E0A8F3B244C9986 | docker login --password-stdin";
        assert_eq!(redact_secrets(t), "echo [redacted:aws-access-key] | docker login --password-stdin");
    }

    #[test]
    fn an_attributes_value_is_masked_and_its_name_and_quotes_stay() {
        assert_eq!(
            redact_secrets(r#"<add key="SmtpPassword" value="S3cr3tPw9!" />"#),
            r#"<add key="SmtpPassword" value="[redacted:secret]" />"#
        );
        let template = r##"<add key="SmtpPassword" value="#{SmtpPassword}#" />"##;
        assert_eq!(redact_secrets(template), template);
    }

    #[test]
    fn only_known_public_blocks_are_left_whole() {
        let cert = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ2h5c2ljYWxseUFXU1NlY3JldEtleTAwMDAwMDAw\n-----END CERTIFICATE-----";
        assert_eq!(redact_secrets(cert), cert);
        let notes = "-----BEGIN NOTES-----\npassword=S3cretPw9 AKIA2E0A8F3B244C9986\n-----END NOTES-----";
        assert_eq!(
            redact_secrets(notes),
            "-----BEGIN NOTES-----\npassword=[redacted:secret] [redacted:aws-access-key]\n-----END NOTES-----"
        );
    }

    #[test]
    fn text_around_secrets_in_any_script_is_kept_and_never_split() {
        assert_eq!(redact_secrets("«AKIA2E0A8F3B244C9986» ok"), "«[redacted:aws-access-key]» ok");
        assert_eq!(redact_secrets("“ghp_abcdefghijklmnopqrstuvwxyz0123456789”"), "“[redacted:github-token]”");
        for t in ["日本語のテキスト：問題なし", "naïve café — résumé", "ключ: значение"]
        {
            assert_eq!(redact_secrets(t), t);
        }
    }

    #[test]
    fn a_urls_password_goes_whatever_it_looks_like() {
        assert_eq!(redact_secrets("postgres://app:secret@db/x"), "postgres://app:[redacted:secret]@db/x");
        assert_eq!(redact_secrets("redis://:<password>@cache:6379"), "redis://:<password>@cache:6379");
        // Counted once: the host part is read only for the branch that keeps it.
        let mut found = Redactions::default();
        let out = Redactor::new()
            .text("https://git@github.com/x?token=ghp_abcdefghijklmnopqrstuvwxyz0123456789", "t", &mut found)
            .unwrap();
        assert_eq!(out, "https://git@github.com/x?token=[redacted:github-token]");
        assert_eq!(found.total(), 1);
    }

    #[test]
    fn plain_text_is_unchanged_whitespace_included() {
        for t in [
            "mitigation  done,\troot cause next: orders-db failover at 14:02",
            "the token was rotated at 14:00; the password policy is fine",
            "https://grafana.example/d/abc?orgId=1&from=now-1h",
        ] {
            assert_eq!(redact_secrets(t), t);
        }
    }
}
