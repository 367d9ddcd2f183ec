//! Where a dataset or store is: a local path, or a URL of an object store (c-api.md §7).
//!
//! Accepted: plain paths; `file:///abs/path` (and `file://localhost/abs/path`); `s3://bucket/
//! prefix` (also `s3a://`), `gs://bucket/prefix`, `az://container/prefix` (also `azure://`,
//! `abfs://`, `abfss://`, `adl://`), `http://host/path` and `https://host/path` (read only).
//! Parsing needs no network code, so a build without the `remote` feature still tells a URL
//! from a path and refuses it with a precise message.
//!
//! Credentials are never accepted inside a URL (user:password@host): they would end up in
//! messages. They go into options or the environment.

use std::fmt;
use std::path::PathBuf;

use crate::error::{Error, ErrorKind, Result};

/// The kind of object store a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    S3,
    Gcs,
    Azure,
    /// Plain HTTP(S) with Range requests; read only.
    Http,
}

impl Scheme {
    /// Human name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::S3 => "S3",
            Scheme::Gcs => "Google Cloud Storage",
            Scheme::Azure => "Azure Blob Storage",
            Scheme::Http => "HTTP",
        }
    }

    /// Whether writers may write there (HTTP is read only).
    pub fn writable(self) -> bool {
        self != Scheme::Http
    }
}

/// An object-store URL, checked: scheme, a non-empty bucket (host), a prefix without empty,
/// `.` or `..` components, no credentials, query or fragment.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RemoteUrl {
    pub scheme: Scheme,
    /// The URL as given, with a trailing `/` removed (what messages show).
    pub url: String,
    /// Everything before the path: `s3://bucket`, `https://host:8080`.
    pub base: String,
    /// The path under the base, without leading or trailing `/` (may be empty).
    pub prefix: String,
}

impl RemoteUrl {
    /// The URL of `rel` (a `/`-separated path) under this one.
    pub fn join(&self, rel: &str) -> String {
        if rel.is_empty() {
            self.url.clone()
        } else {
            format!("{}/{rel}", self.url)
        }
    }

    /// The object path (prefix + `rel`) inside the bucket.
    pub fn key(&self, rel: &str) -> String {
        match (self.prefix.is_empty(), rel.is_empty()) {
            (true, _) => rel.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{rel}", self.prefix),
        }
    }

    /// The URL of `relative` (a `/`-separated relative path, `.` and `..` allowed) resolved
    /// against the prefix containing this URL's last component, as a relative path is
    /// against a file's directory: `a.mcool` beside `s3://b/runs/x.cdz` is
    /// `s3://b/runs/a.mcool`. None when `relative` is empty or absolute, or climbs above
    /// the bucket (or host).
    pub fn resolve_sibling(&self, relative: &str) -> Option<String> {
        if relative.is_empty() || relative.starts_with('/') || relative.contains('\\') {
            return None;
        }
        let mut parts: Vec<&str> = self.prefix.split('/').filter(|c| !c.is_empty()).collect();
        parts.pop()?;
        for c in relative.split('/') {
            match c {
                "" | "." => {}
                ".." => {
                    parts.pop()?;
                }
                c => parts.push(c),
            }
        }
        if parts.is_empty() {
            return None;
        }
        Some(format!("{}/{}", self.base, parts.join("/")))
    }

    /// The inverse of [`resolve_sibling`](RemoteUrl::resolve_sibling): the `/`-separated
    /// path of the URL `other` relative to the prefix containing this URL's last component
    /// (`linked/a.mcool` for `s3://b/runs/linked/a.mcool` beside `s3://b/runs/x.cdz`), when
    /// `other` is an object-store URL with the same base (scheme and bucket or host, spelled
    /// the same) at or below that prefix. None otherwise (another bucket, above the store's
    /// prefix, `.` / `..` / empty components, not a URL).
    pub fn relative_sibling(&self, other: &str) -> Option<String> {
        let Ok(Location::Remote(o)) = Location::parse(other) else {
            return None;
        };
        if o.base != self.base {
            return None;
        }
        let mut parent: Vec<&str> = self.prefix.split('/').filter(|c| !c.is_empty()).collect();
        parent.pop()?;
        let parts: Vec<&str> = o.prefix.split('/').collect();
        if parts.len() <= parent.len()
            || parts[..parent.len()] != parent[..]
            || parts[parent.len()..]
                .iter()
                .any(|c| c.is_empty() || *c == "." || *c == "..")
        {
            return None;
        }
        Some(parts[parent.len()..].join("/"))
    }

    /// The last component of the prefix (`pbmc` for `s3://b/data/pbmc`), or the bucket.
    pub fn file_name(&self) -> &str {
        match self.prefix.rsplit_once('/') {
            Some((_, last)) => last,
            None if !self.prefix.is_empty() => &self.prefix,
            None => self.base.rsplit('/').next().unwrap_or(""),
        }
    }
}

impl fmt::Display for RemoteUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url)
    }
}

/// A local path or an object-store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Local(PathBuf),
    Remote(RemoteUrl),
}

impl Location {
    /// Parses what a caller passed as a path. Errors: `InvalidArgument` (an unknown scheme,
    /// a malformed URL, credentials inside the URL).
    pub fn parse(text: &str) -> Result<Location> {
        let Some((scheme, rest)) = split_scheme(text) else {
            return Ok(Location::Local(PathBuf::from(text)));
        };
        let lower = scheme.to_ascii_lowercase();
        let kind = match lower.as_str() {
            "file" => return parse_file_url(text, rest).map(Location::Local),
            "s3" | "s3a" => Scheme::S3,
            "gs" => Scheme::Gcs,
            "az" | "azure" | "abfs" | "abfss" | "adl" => Scheme::Azure,
            "http" | "https" => Scheme::Http,
            _ => {
                return Err(Error::invalid_argument(format!(
                    "{}: unsupported URL scheme \"{scheme}://\" (expected a path, file://, s3://, \
                     gs://, az://, abfs://, http:// or https://)",
                    redact_userinfo(text)
                )))
            }
        };
        parse_remote(text, &lower, rest, kind).map(Location::Remote)
    }

    /// Whether this names an object store.
    pub fn is_remote(&self) -> bool {
        matches!(self, Location::Remote(_))
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Local(p) => write!(f, "{}", p.display()),
            Location::Remote(u) => f.write_str(&u.url),
        }
    }
}

/// `scheme` and what follows `://`, when `text` starts with `<letter>[letters digits + - .]*://`.
fn split_scheme(text: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    if !first.is_ascii_alphabetic()
        || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        return None;
    }
    Some((scheme, rest))
}

/// `user:password@` removed from a URL, for messages.
fn redact_userinfo(text: &str) -> String {
    match split_scheme(text) {
        Some((scheme, rest)) => {
            let authority_end = rest.find('/').unwrap_or(rest.len());
            match rest[..authority_end].rfind('@') {
                Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
                None => text.to_string(),
            }
        }
        None => text.to_string(),
    }
}

fn bad_url(text: &str, why: impl fmt::Display) -> Error {
    Error::invalid_argument(format!("{}: {why}", redact_userinfo(text)))
}

fn parse_file_url(text: &str, rest: &str) -> Result<PathBuf> {
    let path = if let Some(p) = rest.strip_prefix("localhost/") {
        format!("/{p}")
    } else if rest.starts_with('/') {
        rest.to_string()
    } else {
        return Err(bad_url(
            text,
            "a file:// URL must name an absolute path on this machine (file:///path)",
        ));
    };
    if path.contains(['?', '#']) {
        return Err(bad_url(
            text,
            "a file:// URL may not carry a query or fragment",
        ));
    }
    percent_decode(&path)
        .map(PathBuf::from)
        .ok_or_else(|| bad_url(text, "bad percent-encoding or non-UTF-8 path"))
}

fn parse_remote(text: &str, scheme: &str, rest: &str, kind: Scheme) -> Result<RemoteUrl> {
    if rest.contains(['?', '#']) {
        return Err(bad_url(
            text,
            "URLs with a query or fragment are not accepted (pass settings as options)",
        ));
    }
    let trimmed = rest.trim_end_matches('/');
    let (authority, path) = trimmed.split_once('/').unwrap_or((trimmed, ""));
    if authority.contains('@') {
        return Err(bad_url(
            text,
            "credentials inside the URL are not accepted; pass them as options or in the \
             environment",
        ));
    }
    if authority.is_empty() {
        let what = if kind == Scheme::Http {
            "host"
        } else {
            "bucket (or container)"
        };
        return Err(bad_url(text, format_args!("the URL names no {what}")));
    }
    if authority.contains(|c: char| c.is_whitespace() || c.is_control()) {
        return Err(bad_url(text, "the host or bucket name holds whitespace"));
    }
    for part in path.split('/').filter(|_| !path.is_empty()) {
        if part.is_empty() || part == "." || part == ".." {
            return Err(bad_url(
                text,
                "the path has an empty, \".\" or \"..\" component",
            ));
        }
    }
    Ok(RemoteUrl {
        scheme: kind,
        url: format!("{scheme}://{trimmed}"),
        base: format!("{scheme}://{authority}"),
        prefix: path.to_string(),
    })
}

/// Decodes `%XX` escapes; `None` for a bad escape or a result that is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The error of a URL in a build without the `remote` feature.
pub fn no_remote_support(url: &RemoteUrl) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "{url}: this build of libdeltacells has no remote storage (built without the \
             \"remote\" feature)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(s: &str) -> RemoteUrl {
        match Location::parse(s).unwrap() {
            Location::Remote(u) => u,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn paths_and_file_urls() {
        assert_eq!(
            Location::parse("data/pbmc").unwrap(),
            Location::Local("data/pbmc".into())
        );
        assert_eq!(
            Location::parse("/a b/c:d").unwrap(),
            Location::Local("/a b/c:d".into())
        );
        assert_eq!(
            Location::parse("file:///tmp/x%20y").unwrap(),
            Location::Local("/tmp/x y".into())
        );
        assert_eq!(
            Location::parse("file://localhost/tmp/x").unwrap(),
            Location::Local("/tmp/x".into())
        );
        for bad in [
            "file://host/x",
            "file://relative",
            "file:///x%zz",
            "file:///x?y",
        ] {
            let e = Location::parse(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{bad}");
        }
    }

    #[test]
    fn relative_siblings_invert_resolve_sibling() {
        let Location::Remote(u) = Location::parse("s3://b/runs/x.cdz").unwrap() else {
            panic!("remote")
        };
        for (other, want) in [
            ("s3://b/runs/linked/a.mcool", Some("linked/a.mcool")),
            ("s3://b/runs/a.mcool", Some("a.mcool")),
            ("s3://b/other/a.mcool", None),
            ("s3://c/runs/a.mcool", None),
            ("gs://b/runs/a.mcool", None),
            ("s3://b/runs", None),
            ("s3://b/runs/../x/a.mcool", None),
            ("/data/runs/a.mcool", None),
        ] {
            let got = u.relative_sibling(other);
            assert_eq!(got.as_deref(), want, "{other}");
            if let Some(rel) = got {
                assert_eq!(u.resolve_sibling(&rel).as_deref(), Some(other), "{other}");
            }
        }
        // A store at the bucket's top: its siblings are the bucket's objects.
        let Location::Remote(top) = Location::parse("s3://b/x.chromdata.zarr/").unwrap() else {
            panic!("remote")
        };
        assert_eq!(
            top.relative_sibling("s3://b/a.mcool").as_deref(),
            Some("a.mcool")
        );
    }

    #[test]
    fn relative_paths_resolve_beside_the_url() {
        let u = remote("s3://b/runs/day1/x.cdz");
        assert_eq!(
            u.resolve_sibling("a.mcool").as_deref(),
            Some("s3://b/runs/day1/a.mcool")
        );
        assert_eq!(
            u.resolve_sibling("./linked//c.hic").as_deref(),
            Some("s3://b/runs/day1/linked/c.hic")
        );
        assert_eq!(
            u.resolve_sibling("../day2/y.h5ad").as_deref(),
            Some("s3://b/runs/day2/y.h5ad")
        );
        assert_eq!(u.resolve_sibling("../../../up"), None, "above the bucket");
        assert_eq!(u.resolve_sibling("/abs/x"), None);
        assert_eq!(u.resolve_sibling(""), None);
        let h = remote("https://host:8080/data/s.chromdata.zarr");
        assert_eq!(
            h.resolve_sibling("m.mcool").as_deref(),
            Some("https://host:8080/data/m.mcool")
        );
        assert_eq!(remote("s3://b").resolve_sibling("x"), None, "no parent");
    }

    #[test]
    fn remote_urls() {
        let u = remote("s3://bucket/data/pbmc/");
        assert_eq!(u.scheme, Scheme::S3);
        assert_eq!(u.url, "s3://bucket/data/pbmc");
        assert_eq!(u.base, "s3://bucket");
        assert_eq!(u.prefix, "data/pbmc");
        assert_eq!(u.key("manifest.json"), "data/pbmc/manifest.json");
        assert_eq!(
            u.join("tiles/tile_000000.dct"),
            "s3://bucket/data/pbmc/tiles/tile_000000.dct"
        );
        assert_eq!(u.file_name(), "pbmc");
        let b = remote("gs://bucket");
        assert_eq!((b.scheme, b.prefix.as_str()), (Scheme::Gcs, ""));
        assert_eq!(b.key("x"), "x");
        assert_eq!(b.file_name(), "bucket");
        assert_eq!(remote("az://c/p").scheme, Scheme::Azure);
        assert_eq!(remote("abfs://c/p").scheme, Scheme::Azure);
        assert_eq!(remote("S3A://b/p").scheme, Scheme::S3);
        let h = remote("http://127.0.0.1:8080/d/x.cdz");
        assert_eq!(h.scheme, Scheme::Http);
        assert_eq!(h.base, "http://127.0.0.1:8080");
        assert_eq!(h.prefix, "d/x.cdz");
        assert!(!h.scheme.writable());
    }

    #[test]
    fn bad_urls_are_invalid_arguments_without_secrets() {
        for bad in [
            "ftp://host/x",
            "s3://",
            "s3:///prefix",
            "s3://b/a//c",
            "s3://b/a/../c",
            "s3://b/x?versionId=3",
            "https://user:hunter2@host/x",
        ] {
            let e = Location::parse(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidArgument, "{bad}");
            assert!(!e.message.contains("hunter2"), "{}", e.message);
        }
    }
}
