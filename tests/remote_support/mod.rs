//! Test servers for remote storage (scripts/remote_servers.py, started per test binary on
//! 127.0.0.1): an S3 server (moto), a Range HTTP server, a latency proxy, a proxy that
//! drops requests, and a server that never answers. The process ends when the `Servers`
//! value is dropped (its standard input closes).
//!
//! Without moto installed the tests fail, unless DELTACELLS_SKIP_REMOTE_TESTS=1 is set
//! (then they return early, saying so on stderr): CI installs moto (scripts/setup.sh).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};

use deltacells::storage::remote::ObjectRoot;
use deltacells::storage::{Location, Options};

pub const BUCKET: &str = "dc-test";
pub const KEY_ID: &str = "testing-key-id";
pub const SECRET: &str = "testing-secret-XYZZY";

pub struct Servers {
    child: Child,
    pub s3: String,
    pub http: String,
    pub slow: String,
    pub flaky: String,
    pub blackhole: String,
    pub deny: String,
    /// The dying proxy (only from [`Servers::start_stopping_after`]).
    pub dying: Option<String>,
    pub serve_dir: PathBuf,
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Whether remote tests should be skipped (never in CI).
pub fn skip() -> bool {
    std::env::var("DELTACELLS_SKIP_REMOTE_TESTS").is_ok_and(|v| v == "1")
}

impl Servers {
    /// Starts the servers; `serve_dir` is what the HTTP server serves.
    pub fn start(serve_dir: &Path) -> Servers {
        Self::start_with(serve_dir, &[])
    }

    /// Starts the servers with a dying proxy (`dying`): it forwards `n` requests to the S3
    /// server, then stops (closes every connection and refuses new ones).
    pub fn start_stopping_after(serve_dir: &Path, n: usize) -> Servers {
        Self::start_with(serve_dir, &["--stop-after".to_string(), n.to_string()])
    }

    fn start_with(serve_dir: &Path, extra: &[String]) -> Servers {
        let mut child = Command::new("python3")
            .arg(repo().join("scripts/remote_servers.py"))
            .arg("--serve-dir")
            .arg(serve_dir)
            .args([
                "--bucket",
                BUCKET,
                "--latency-ms",
                "20",
                "--drop-every",
                "3",
            ])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 scripts/remote_servers.py (needs moto[server]: scripts/setup.sh)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| {
            let _ = child.kill();
            panic!("test servers did not start ({e}): {line:?}")
        });
        let get = |k: &str| v[k].as_str().unwrap().to_string();
        Servers {
            s3: get("s3"),
            http: get("http"),
            slow: get("slow"),
            flaky: get("flaky"),
            blackhole: get("blackhole"),
            deny: get("deny"),
            dying: v["dying"].as_str().map(str::to_string),
            serve_dir: serve_dir.to_path_buf(),
            child,
        }
    }

    /// Options for the S3 server at `endpoint` (one of the URLs above).
    pub fn s3_options(endpoint: &str) -> Vec<String> {
        vec![
            format!("aws_endpoint={endpoint}"),
            "aws_region=us-east-1".into(),
            format!("aws_access_key_id={KEY_ID}"),
            format!("aws_secret_access_key={SECRET}"),
            "allow_http=true".into(),
        ]
    }

    pub fn opts(&self) -> Vec<String> {
        Self::s3_options(&self.s3)
    }

    /// The options `url` needs: the S3 server's for s3://, none for http://.
    pub fn opts_for(&self, url: &str) -> Vec<String> {
        if url.starts_with("s3://") {
            self.opts()
        } else {
            Vec::new()
        }
    }

    /// An object root at `s3://dc-test/<prefix>` on the S3 server.
    pub fn root(&self, prefix: &str) -> Arc<ObjectRoot> {
        root_at(&format!("s3://{BUCKET}/{prefix}"), &self.opts())
    }
}

pub fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

pub fn root_at(url: &str, opts: &[String]) -> Arc<ObjectRoot> {
    let loc = Location::parse(url).unwrap();
    let o = Options::parse(&as_strs(opts), &loc).unwrap();
    match loc {
        Location::Remote(u) => ObjectRoot::new(u, o).unwrap(),
        Location::Local(_) => panic!("{url} is not remote"),
    }
}

/// Uploads every file under `dir` to `root` (same relative keys).
pub fn upload_dir(root: &Arc<ObjectRoot>, dir: &Path) {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p
                    .strip_prefix(dir)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                files.push((rel, p));
            }
        }
    }
    root.put_files(files).unwrap();
}

/// One server process per test binary, shared by its tests.
pub fn shared(serve_dir: impl FnOnce() -> PathBuf) -> Option<&'static Servers> {
    static SERVERS: OnceLock<Servers> = OnceLock::new();
    if skip() {
        eprintln!("DELTACELLS_SKIP_REMOTE_TESTS=1: remote test skipped");
        return None;
    }
    Some(SERVERS.get_or_init(|| Servers::start(&serve_dir())))
}

/// Downloads every object under `root` into the directory `dir` (same relative paths):
/// what a store uploaded there holds, for the local readers.
pub fn download_dir(root: &Arc<ObjectRoot>, dir: &Path) {
    for rel in root.list("").unwrap() {
        let path = dir.join(&rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, root.get(&rel).unwrap()).unwrap();
    }
}
