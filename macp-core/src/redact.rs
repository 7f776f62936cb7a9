//! Secret redaction for short texts a room shows everyone (section-marker labels first).
//!
//! Redaction always runs *before* any length cap: cutting first can split a credential so that
//! no pattern matches any more, leaving half a secret on display; redacting first replaces it
//! whole, and the cap then binds the redacted text (which may be longer than the original).

/// What replaces a secret.
fn mask(kind: &str) -> String {
    format!("[redacted:{kind}]")
}

/// Keys whose value is a secret in `key=value` or `key: value`.
const SECRET_KEYS: &[&str] = &[
    "password",
    "passwd",
    "pwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "access_key",
    "private_key",
    "credential",
];

/// Characters that wrap a word without being part of it.
fn is_wrapper(c: char) -> bool {
    matches!(c, '"' | '\'' | '`' | '(' | ')' | '[' | ']' | '{' | '}' | '<' | '>' | ',' | ';')
}

/// The kind of secret `word` is, if it is one on its own.
fn secret_kind(word: &str) -> Option<&'static str> {
    let alnum_upper = |s: &str| s.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    if (word.starts_with("AKIA") || word.starts_with("ASIA")) && word.len() == 20 && alnum_upper(&word[4..]) {
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

/// `text` with every recognised secret replaced by `[redacted:<kind>]`: cloud access keys,
/// GitHub, Slack and API tokens, JWTs, the word after `Bearer`, and the value of a
/// `password=…`/`token: …`-style pair. Whitespace is kept as it was.
pub fn redact_secrets(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut after_bearer = false;
    let mut value_is_secret = false;
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
        let core = raw.trim_matches(is_wrapper);
        let lead = raw.find(core).unwrap_or(0);
        let (pre, post) = (&raw[..lead], &raw[lead + core.len()..]);
        let replaced = if core.is_empty() {
            None
        } else if after_bearer || value_is_secret {
            Some(mask(if after_bearer { "bearer-token" } else { "secret" }))
        } else if let Some(kind) = secret_kind(core) {
            Some(mask(kind))
        } else if let Some(i) = core.find(['=', ':']) {
            let (key, value) = (&core[..i], &core[i + 1..]);
            let key_l = key.to_ascii_lowercase();
            if SECRET_KEYS.iter().any(|k| key_l.ends_with(k)) {
                if value.is_empty() {
                    // `password: hunter2`: the secret is the next word.
                    value_is_secret = true;
                    out.push_str(raw);
                    continue;
                }
                Some(format!("{key}{}{}", &core[i..=i], mask("secret")))
            } else {
                secret_kind(value).map(|kind| format!("{key}{}{}", &core[i..=i], mask(kind)))
            }
        } else {
            None
        };
        after_bearer = core.eq_ignore_ascii_case("bearer");
        value_is_secret = false;
        match replaced {
            Some(r) => {
                out.push_str(pre);
                out.push_str(&r);
                out.push_str(post);
            }
            None => out.push_str(raw),
        }
    }
    out
}

/// `text` redacted ([`redact_secrets`]), then cut to at most `max_chars` characters on a
/// character boundary (marked with `…`), in that order. The second value says whether it was
/// cut.
pub fn redact_then_cap(text: &str, max_chars: usize) -> (String, bool) {
    let clean = redact_secrets(text);
    if clean.chars().count() <= max_chars {
        return (clean, false);
    }
    let mut cut: String = clean.chars().take(max_chars.saturating_sub(1)).collect();
    cut.push('…');
    (cut, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_secret_shapes_are_replaced_whole() {
        let t = "rotated AKIAIOSFODNN7EXAMPLE and ghp_abcdefghijklmnopqrstuvwxyz0123 (Bearer abc.def) password=hunter2";
        let r = redact_secrets(t);
        assert_eq!(
            r,
            "rotated [redacted:aws-access-key] and [redacted:github-token] (Bearer [redacted:bearer-token]) \
             password=[redacted:secret]"
        );
    }

    #[test]
    fn a_key_then_its_value_as_the_next_word_is_redacted() {
        assert_eq!(redact_secrets("db token: s3cr3t now"), "db token: [redacted:secret] now");
    }

    #[test]
    fn plain_text_is_unchanged_whitespace_included() {
        let t = "mitigation  done,\troot cause next: orders-db failover at 14:02";
        assert_eq!(redact_secrets(t), t);
    }

    #[test]
    fn redaction_comes_before_the_cap_so_no_secret_prefix_survives() {
        // The key straddles the cap: cutting first would leave "AKIAIOSF…", which no longer
        // matches and would be shown.
        let label = format!("{} AKIAIOSFODNN7EXAMPLE", "x".repeat(110));
        let (out, cut) = redact_then_cap(&label, 120);
        assert!(cut);
        assert!(!out.contains("AKIA"), "{out}");
        assert_eq!(out.chars().count(), 120);
    }
}
