//! Secret redaction for short texts a room shows everyone (section-marker labels first).
//!
//! A length limit is always checked on the redacted text, never applied by cutting before
//! redaction: a cut can split a credential so that no pattern matches any more, leaving half a
//! secret on display.

/// What replaces a secret.
fn mask(kind: &str) -> String {
    format!("[redacted:{kind}]")
}

/// Keys whose value is a secret in `key=value`, `key: value`, `"key": "value"` or a URL query.
const SECRET_KEYS: &[&str] = &[
    "password",
    "passwd",
    "pwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "api-key",
    "access_key",
    "private_key",
    "credential",
    "credentials",
    "auth",
    "authorization",
];

fn is_secret_key(key: &str) -> bool {
    let k = key
        .trim_matches(|c: char| matches!(c, '"' | '\'' | '`' | '{' | '[' | '(' | ','))
        .to_ascii_lowercase();
    !k.is_empty()
        && SECRET_KEYS
            .iter()
            .any(|s| k == *s || k.ends_with(&format!("_{s}")) || k.ends_with(&format!("-{s}")))
}

/// Characters that wrap a word without being part of it: quotes and brackets on both sides,
/// and sentence punctuation after it.
fn leading(c: char) -> bool {
    matches!(c, '"' | '\'' | '`' | '(' | '[' | '{' | '<')
}

fn trailing(c: char) -> bool {
    matches!(c, '"' | '\'' | '`' | ')' | ']' | '}' | '>' | ',' | ';' | '.' | '!' | '?')
}

/// The kind of secret `word` is, if it is one on its own.
fn secret_kind(word: &str) -> Option<&'static str> {
    let upper_alnum = |s: &str| s.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    if (word.starts_with("AKIA") || word.starts_with("ASIA")) && word.len() == 20 && upper_alnum(&word[4..]) {
        return Some("aws-access-key");
    }
    let prefixed =
        |prefixes: &[&str], min: usize| prefixes.iter().any(|p| word.starts_with(p)) && word.len() >= min;
    if prefixed(&["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"], 20) {
        return Some("github-token");
    }
    if prefixed(&["xoxb-", "xoxp-", "xoxa-", "xoxr-", "xoxs-"], 15) {
        return Some("slack-token");
    }
    if prefixed(&["sk-", "sk_live_", "rk_live_"], 20) {
        return Some("api-key");
    }
    let parts: Vec<&str> = word.split('.').collect();
    let b64 = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if parts.len() == 3 && parts[0].starts_with("eyJ") && parts.iter().all(|p| b64(p)) {
        return Some("jwt");
    }
    None
}

/// One word (no whitespace, wrappers removed) with the secrets in it masked.
fn redact_word(w: &str) -> String {
    if let Some(kind) = secret_kind(w) {
        return mask(kind);
    }
    // `scheme://user:password@host…`: the password.
    if let Some(i) = w.find("://") {
        let rest = &w[i + 3..];
        if let Some(at) = rest.find('@')
            && let Some(colon) = rest[..at].find(':')
        {
            return format!("{}{}{}", &w[..i + 3 + colon + 1], mask("secret"), redact_word(&rest[at..]));
        }
    }
    // `key=value` pairs, several joined by `?`, `&` or `;` (a URL query), or `key:value`.
    let mut out = String::with_capacity(w.len());
    let mut rest = w;
    while !rest.is_empty() {
        let end = rest.find(['?', '&', ';']).map_or(rest.len(), |i| i + 1);
        let (part, tail) = rest.split_at(end);
        rest = tail;
        let (body, sep) = match part.char_indices().last() {
            Some((i, '?' | '&' | ';')) => (&part[..i], &part[i..]),
            _ => (part, ""),
        };
        match body.find(['=', ':']) {
            Some(i) if i > 0 && i + 1 < body.len() => {
                let (key, value) = (&body[..i], &body[i + 1..]);
                let quote = value.starts_with('"') || value.starts_with('\'');
                let masked = if is_secret_key(key) {
                    Some(mask("secret"))
                } else {
                    secret_kind(value.trim_matches(|c| c == '"' || c == '\'')).map(mask)
                };
                match masked {
                    Some(m) => {
                        out.push_str(&body[..=i]);
                        if quote {
                            out.push_str(&value[..1]);
                        }
                        out.push_str(&m);
                    }
                    None => out.push_str(body),
                }
            }
            _ => out.push_str(body),
        }
        out.push_str(sep);
    }
    out
}

/// `text` with every recognised secret replaced by `[redacted:<kind>]`: cloud access keys,
/// GitHub, Slack and API tokens, JWTs, the word after `Bearer`, a URL's password, and the value
/// of a `password=…`, `token: …`, `"secret": "…"` or `?token=…` pair. Whitespace is kept as it
/// was.
pub fn redact_secrets(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    // The next word is a secret of this kind (after `Bearer`, or `password:`).
    let mut pending: Option<&'static str> = None;
    // The last word was a bare secret key: a following `=` or `:` makes the next word its value.
    let mut bare_key = false;
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
        let start = raw.find(|c: char| !leading(c)).unwrap_or(raw.len());
        let stop = raw
            .rfind(|c: char| !trailing(c))
            .map_or(start, |i| i + raw[i..].chars().next().map_or(1, char::len_utf8));
        let (pre, core, post) =
            if start < stop { (&raw[..start], &raw[start..stop], &raw[stop..]) } else { (raw, "", "") };
        if core.is_empty() {
            out.push_str(raw);
            continue;
        }
        if core == "=" || core == ":" {
            if bare_key {
                pending = Some("secret");
            }
            bare_key = false;
            out.push_str(raw);
            continue;
        }
        if let Some(kind) = pending.take() {
            out.push_str(pre);
            out.push_str(&mask(kind));
            out.push_str(post);
            bare_key = false;
            continue;
        }
        if core.eq_ignore_ascii_case("bearer") {
            pending = Some("bearer-token");
            out.push_str(raw);
            continue;
        }
        // `password:` / `token=`: the value is the next word.
        if let Some(key) = core.strip_suffix(':').or_else(|| core.strip_suffix('='))
            && is_secret_key(key)
        {
            pending = Some("secret");
            out.push_str(raw);
            continue;
        }
        bare_key = is_secret_key(core);
        out.push_str(pre);
        out.push_str(&redact_word(core));
        out.push_str(post);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_secret_shapes_are_replaced_whole() {
        let t = "rotated AKIAIOSFODNN7EXAMPLE and ghp_abcdefghijklmnopqrstuvwxyz0123 (Bearer abc.def) password=hunter2";
        assert_eq!(
            redact_secrets(t),
            "rotated [redacted:aws-access-key] and [redacted:github-token] (Bearer [redacted:bearer-token]) \
             password=[redacted:secret]"
        );
    }

    #[test]
    fn sentence_punctuation_does_not_hide_a_secret() {
        assert_eq!(redact_secrets("key AKIAIOSFODNN7EXAMPLE."), "key [redacted:aws-access-key].");
        assert_eq!(
            redact_secrets("jwt eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl, then"),
            "jwt [redacted:jwt], then"
        );
    }

    #[test]
    fn a_key_and_its_value_in_every_spelling() {
        assert_eq!(redact_secrets("db token: s3cr3t now"), "db token: [redacted:secret] now");
        assert_eq!(redact_secrets("password = hunter2 ok"), "password = [redacted:secret] ok");
        assert_eq!(redact_secrets(r#"{"password": "x"}"#), r#"{"password": "[redacted:secret]"}"#);
        assert_eq!(redact_secrets(r#"{"password":"x"}"#), r#"{"password":"[redacted:secret]"}"#);
        assert_eq!(redact_secrets("DB_PASSWORD=x"), "DB_PASSWORD=[redacted:secret]");
    }

    #[test]
    fn urls_lose_their_passwords_and_secret_parameters() {
        assert_eq!(redact_secrets("https://h/?token=x&page=2"), "https://h/?token=[redacted:secret]&page=2");
        assert_eq!(
            redact_secrets("postgres://app:pa55@db:5432/x"),
            "postgres://app:[redacted:secret]@db:5432/x"
        );
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
