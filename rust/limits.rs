//! The largest sizes and names a caller may give, and their checks: the one home of every
//! limit (API.md section 8, round 3; README "Limits").
//!
//! Every size a caller sends is checked here before anything is sized by it, so no call can
//! ask for an allocation the machine cannot make (`k = 2**45` once aborted the process in
//! `fusion::fuse`). The binding exports the constants and `check_namespace`; the Python
//! facade (`memini.limits`) reads them from there for both backends, and the server's
//! OpenAPI document states them, so each number is written once, here.
//!
//! A refusal is `Error::InvalidArgument` naming the argument and its maximum.

use crate::error::{Error, Result};

/// Results of one search or recall (`k`): a page a caller reads, not an export (`list`
/// pages through everything).
pub const MAX_K: u64 = 10_000;
/// Candidates per leg and namespace of a recall (`pool`): ten times the largest `k`.
pub const MAX_POOL: u64 = 100_000;
/// `limit`, `offset` and `keep_max`: 2**31-1, above any row count one call can return
/// (a limit <= 0 still means "no cap" where the method says so).
pub const MAX_LIMIT: u64 = 2_147_483_647;
/// Queries of one `vector_search_many` call.
pub const MAX_QUERIES: u64 = 1_024;
/// Characters of a query string (`keyword_search`, `recall`): a question, not a document;
/// each query is also stored on the event rows of a served call.
pub const MAX_QUERY_CHARS: u64 = 4_096;
/// Namespaces one `recall` names (before `linked=True` adds the linked ones).
pub const MAX_NAMESPACES: u64 = 64;
/// Characters of a namespace name.
pub const MAX_NAMESPACE_CHARS: u64 = 256;

/// Refuses `value` above `max`, naming `what`.
///
/// # Errors
/// `InvalidArgument` when `value > max`.
pub fn at_most(what: &str, value: u64, max: u64) -> Result<()> {
    if value <= max {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{what} must be at most {max}, got {value}"
        )))
    }
}

/// `k` of a search or recall: 1 ..= [`MAX_K`].
///
/// # Errors
/// `InvalidArgument` outside that range.
pub fn k(k: usize) -> Result<()> {
    if k < 1 {
        return Err(Error::invalid("k must be >= 1"));
    }
    at_most("k", as_u64(k), MAX_K)
}

/// A `limit` or `offset` (<= 0 allowed: the methods give it a meaning) up to [`MAX_LIMIT`].
///
/// # Errors
/// `InvalidArgument` above the maximum.
pub fn limit(what: &str, value: i64) -> Result<()> {
    at_most(what, u64::try_from(value).unwrap_or(0), MAX_LIMIT)
}

/// A query string of at most [`MAX_QUERY_CHARS`] characters.
///
/// # Errors
/// `InvalidArgument` when longer.
pub fn query(text: &str) -> Result<()> {
    // a char is at most 4 bytes: a short text needs no count
    if as_u64(text.len()) <= MAX_QUERY_CHARS {
        return Ok(());
    }
    let chars = as_u64(text.chars().count());
    if chars <= MAX_QUERY_CHARS {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "query must be at most {MAX_QUERY_CHARS} characters, got {chars} (search with the \
         question, not the document)"
    )))
}

/// Refuses a namespace name that is not 1 ..= [`MAX_NAMESPACE_CHARS`] characters, holds a
/// control character (Unicode Cc: NUL, newlines, ...), a format or invisible character
/// (Cf: zero-width spaces and joiners, bidirectional overrides, the BOM, ...) or a line or
/// paragraph separator (Zl, Zp), or is only whitespace. Such names print misleadingly (a
/// right-to-left override, U+202E, shows `org/a` + U+202E + `b/c` as another name) or not at
/// all.
///
/// # Errors
/// `InvalidArgument` naming the rule broken (and the offending character's code point).
pub fn namespace(ns: &str) -> Result<()> {
    if ns.is_empty() {
        return Err(Error::invalid("namespace must be a non-empty string"));
    }
    let chars = as_u64(ns.chars().count());
    if chars > MAX_NAMESPACE_CHARS {
        return Err(Error::invalid(format!(
            "namespace must be at most {MAX_NAMESPACE_CHARS} characters, got {chars}"
        )));
    }
    if let Some((i, c)) = ns.chars().enumerate().find(|(_, c)| invisible(*c)) {
        return Err(Error::invalid(format!(
            "namespace must not contain control or invisible characters, found U+{:04X} at \
             character {i} (use printable characters)",
            u32::from(c)
        )));
    }
    if ns.chars().all(char::is_whitespace) {
        return Err(Error::invalid(
            "namespace must not be only whitespace (name it with printable characters)",
        ));
    }
    Ok(())
}

/// Unicode categories Cc, Cf, Zl and Zp (Unicode 15.1): what a namespace must not hold.
fn invisible(c: char) -> bool {
    c.is_control() || {
        let u = u32::from(c);
        FORMAT
            .binary_search_by(|&(lo, hi)| {
                if hi < u {
                    std::cmp::Ordering::Less
                } else if lo > u {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_ok()
    }
}

/// The ranges of categories Cf, Zl and Zp (Unicode 15.1), ascending; the Python tests check
/// them against `unicodedata` over every assigned code point.
const FORMAT: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x2028, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

fn as_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_up_to_the_maximum_pass() {
        assert!(k(1).is_ok() && k(10_000).is_ok());
        assert!(k(0).is_err() && k(10_001).is_err());
        assert!(limit("limit", -1).is_ok() && limit("limit", 2_147_483_647).is_ok());
        let e = limit("offset", 2_147_483_648).unwrap_err().to_string();
        assert!(e.contains("offset must be at most 2147483647"), "{e}");
        assert!(query(&"é".repeat(4_096)).is_ok() && query(&"a".repeat(4_097)).is_err());
    }

    #[test]
    fn namespaces_are_printable_names() {
        for good in ["a", "org/a b", "日本", "x".repeat(256).as_str(), " a "] {
            assert!(namespace(good).is_ok(), "{good:?}");
        }
        for bad in [
            "",
            "a\0b",
            "a\nb",
            "   ",
            "\u{3000}",
            "a\u{200B}",
            "a\u{202E}b",
            "\u{FEFF}a",
            "a\u{2028}",
            "a\u{E0041}",
            "x".repeat(257).as_str(),
        ] {
            assert!(namespace(bad).is_err(), "{bad:?}");
        }
        assert!(FORMAT.windows(2).all(|w| w[0].1 < w[1].0));
    }
}
