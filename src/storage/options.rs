//! Options of the `_opts` functions (c-api.md §7): `key=value` strings.
//!
//! Library settings: `max_concurrency` (requests in flight per handle, default 16),
//! `timeout_ms` (per request, default 30000), `retries` (default 5, exponential backoff).
//! Every other key is an object-store setting under the `object_store` crate's name
//! (`aws_endpoint`, `aws_region`, `allow_http`, …), checked against the backend the URL
//! names; an unknown key is `InvalidArgument`. Values of object-store settings are never
//! repeated in messages (they may be secrets).

use std::time::Duration;

use crate::error::{Error, Result};

use super::location::Location;

/// Requests in flight per handle, by default.
pub const DEFAULT_MAX_CONCURRENCY: usize = 16;
/// Per-request timeout, by default.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Retries of a failed request, by default.
pub const DEFAULT_RETRIES: usize = 5;

const MAX_CONCURRENCY_LIMIT: usize = 1024;
const TIMEOUT_MS_LIMIT: u64 = 3_600_000;
const RETRIES_LIMIT: usize = 100;

/// Parsed options.
#[derive(Clone, PartialEq, Eq)]
pub struct Options {
    pub max_concurrency: usize,
    pub timeout: Duration,
    pub retries: usize,
    /// Object-store settings, in the order given (later ones win), keys lower-cased.
    pub store: Vec<(String, String)>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Values may be secrets: keys only.
        f.debug_struct("Options")
            .field("max_concurrency", &self.max_concurrency)
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .field(
                "store",
                &self
                    .store
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            timeout: Duration::from_millis(DEFAULT_TIMEOUT_MS),
            retries: DEFAULT_RETRIES,
            store: Vec::new(),
        }
    }
}

fn parse_number<T: std::str::FromStr + PartialOrd + std::fmt::Display>(
    key: &str,
    value: &str,
    min: T,
    max: T,
) -> Result<T> {
    match value.trim().parse::<T>() {
        Ok(v) if v >= min && v <= max => Ok(v),
        _ => Err(Error::invalid_argument(format!(
            "option {key}={value}: expected an integer in [{min}, {max}]"
        ))),
    }
}

impl Options {
    /// Parses `key=value` strings for a dataset or store at `location`. Object-store keys
    /// are checked against the backend of the URL (against every backend for a local path,
    /// where they have no effect).
    ///
    /// Errors: `InvalidArgument` naming the option (no `=`, empty key, unknown key, a bad
    /// value of a library setting).
    pub fn parse(items: &[&str], location: &Location) -> Result<Options> {
        let mut o = Options::default();
        for (i, item) in items.iter().enumerate() {
            let Some((key, value)) = item.split_once('=') else {
                return Err(Error::invalid_argument(format!(
                    "options[{i}]: expected \"key=value\", got no '=' in an option of {} bytes",
                    item.len()
                )));
            };
            let key = key.trim().to_ascii_lowercase();
            match key.as_str() {
                "" => {
                    return Err(Error::invalid_argument(format!(
                        "options[{i}]: empty key before '='"
                    )))
                }
                "max_concurrency" => {
                    o.max_concurrency = parse_number(&key, value, 1, MAX_CONCURRENCY_LIMIT)?
                }
                "timeout_ms" => {
                    o.timeout =
                        Duration::from_millis(parse_number(&key, value, 1, TIMEOUT_MS_LIMIT)?)
                }
                "retries" => o.retries = parse_number(&key, value, 0, RETRIES_LIMIT)?,
                _ => {
                    check_store_key(&key, location)
                        .map_err(|e| e.context(format_args!("options[{i}]")))?;
                    o.store.push((key, value.to_string()));
                }
            }
        }
        Ok(o)
    }

    /// The values of settings that may be secrets (keys, tokens, passwords, signatures),
    /// to scrub from messages.
    pub fn secrets(&self) -> Vec<&str> {
        const SECRET_WORDS: [&str; 7] = [
            "secret",
            "key",
            "token",
            "password",
            "sas",
            "credential",
            "signature",
        ];
        self.store
            .iter()
            .filter(|(k, v)| v.len() >= 4 && SECRET_WORDS.iter().any(|w| k.contains(w)))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

#[cfg(feature = "remote")]
fn check_store_key(key: &str, location: &Location) -> Result<()> {
    super::store_keys::check_key(key, location)
}

#[cfg(not(feature = "remote"))]
fn check_store_key(key: &str, _location: &Location) -> Result<()> {
    Err(Error::invalid_argument(format!(
        "unknown option \"{key}\": this build has no remote storage (built without the \
         \"remote\" feature), so only max_concurrency, timeout_ms and retries are known"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn local() -> Location {
        Location::Local("x".into())
    }

    #[test]
    fn library_settings() {
        let o = Options::parse(
            &["max_concurrency=4", "timeout_ms = 250", "RETRIES=0"],
            &local(),
        )
        .unwrap();
        assert_eq!(o.max_concurrency, 4);
        assert_eq!(o.timeout, Duration::from_millis(250));
        assert_eq!(o.retries, 0);
        assert_eq!(Options::parse(&[], &local()).unwrap(), Options::default());
    }

    #[test]
    fn bad_options() {
        for bad in [
            "max_concurrency=0",
            "max_concurrency=x",
            "timeout_ms=-1",
            "retries=1000",
            "noequals",
            "=3",
            "no_such_key=1",
        ] {
            let e = Options::parse(&[bad], &local()).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{bad}");
        }
    }

    #[cfg(feature = "remote")]
    #[test]
    fn store_keys_by_backend() {
        let s3 = Location::parse("s3://b/p").unwrap();
        let gs = Location::parse("gs://b/p").unwrap();
        let o = Options::parse(
            &["aws_secret_access_key=hunter22", "aws_endpoint=http://h"],
            &s3,
        )
        .unwrap();
        assert_eq!(o.secrets(), vec!["hunter22"]);
        let e = Options::parse(&["aws_secret_access_key=hunter22"], &gs).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert!(!e.message.contains("hunter22"), "{}", e.message);
        assert!(Options::parse(&["google_service_account=x"], &gs).is_ok());
        assert!(Options::parse(&["allow_http=true"], &gs).is_ok());
        let http = Location::parse("http://h/p").unwrap();
        assert!(Options::parse(&["timeout=5s"], &http).is_ok());
        assert!(Options::parse(&["aws_region=x"], &http).is_err());
        // Local paths accept any backend's keys (they have no effect there).
        assert!(Options::parse(&["aws_region=eu-west-1"], &local()).is_ok());
    }
}
