//! Object-store errors as library errors: a missing object is `NotFound`; everything else,
//! after the client's retries, is `Io` naming the URL, the operation and the HTTP status or
//! transport error. Messages are one line, bounded, and scrubbed of credential values.

use std::time::Duration;

use crate::error::{Error, ErrorKind};

/// Longest detail kept from a client error (response bodies can be long).
const MAX_DETAIL: usize = 600;

/// `text` on one line, without the values in `secrets`, cut to a bounded length.
pub(crate) fn one_line(text: &str, secrets: &[&str]) -> String {
    let mut s: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for secret in secrets {
        if !secret.is_empty() {
            s = s.replace(secret, "***");
        }
    }
    if s.len() > MAX_DETAIL {
        let mut cut = MAX_DETAIL;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str(" …");
    }
    s
}

/// The error of operation `op` ("GET", "HEAD", "PUT", …) on `url`.
pub(crate) fn from_store(
    url: &str,
    op: &str,
    retries: usize,
    e: &object_store::Error,
    secrets: &[&str],
) -> Error {
    let detail = one_line(&e.to_string(), secrets);
    match e {
        object_store::Error::NotFound { .. } => {
            Error::new(ErrorKind::NotFound, format!("{url}: no such object ({op})"))
        }
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => Error::new(
            ErrorKind::Io,
            format!("{url}: {op} refused (check the credentials): {detail}"),
        ),
        _ => {
            let hint = if detail.contains("403") {
                " (access denied: check the credentials)"
            } else {
                ""
            };
            Error::new(
                ErrorKind::Io,
                format!("{url}: {op} failed (after up to {retries} retries){hint}: {detail}"),
            )
        }
    }
}

/// The error of an operation that did not finish within its budget.
pub(crate) fn timed_out(url: &str, op: &str, budget: Duration, timeout: Duration) -> Error {
    Error::new(
        ErrorKind::Io,
        format!(
            "{url}: {op} timed out: no complete answer within {} ms (timeout_ms={} per request, \
             retries included)",
            budget.as_millis(),
            timeout.as_millis()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_scrubs_and_bounds() {
        let s = one_line("a\n  b\tsecret123 c", &["secret123"]);
        assert_eq!(s, "a b *** c");
        let long = "x".repeat(5000);
        assert!(one_line(&long, &[]).len() < MAX_DETAIL + 8);
    }
}
