//! The command line: positional words and `--name [value]` options (shared by every
//! subcommand, so its own module).

use deltacells::{Error, Result};

/// Options that take no value.
const FLAG_NAMES: [&str; 11] = [
    "--no-sort-genes",
    "--help",
    "-h",
    "--overwrite",
    "--tiles",
    "--float32",
    "--quiet",
    "-q",
    "--version",
    "-V",
    "--progress",
];

/// Options every command takes.
const GLOBAL_OPTIONS: [&str; 3] = ["--quiet", "-q", "--progress"];

/// Parsed command line: positional words and `--name [value]` options.
pub struct Args {
    pub words: Vec<String>,
    opts: Vec<(String, Option<String>)>,
}

impl Args {
    pub fn parse(raw: Vec<String>) -> Args {
        const FLAGS: [&str; 11] = FLAG_NAMES;
        let (mut words, mut opts) = (Vec::new(), Vec::new());
        let mut it = raw.into_iter();
        while let Some(a) = it.next() {
            if a.starts_with("--") || a == "-h" || a == "-q" || a == "-V" {
                let v = if FLAGS.contains(&a.as_str()) {
                    None
                } else {
                    it.next()
                };
                opts.push((a, v));
            } else {
                words.push(a);
            }
        }
        Args { words, opts }
    }
    pub fn flag(&self, name: &str) -> bool {
        self.opts.iter().any(|(n, _)| n == name)
    }
    pub fn value(&self, name: &str) -> Option<&str> {
        self.opts
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }
    /// Every value of an option given several times (`--option a=1 --option b=2`), in order.
    pub fn values(&self, name: &str) -> Vec<&str> {
        self.opts
            .iter()
            .filter(|(n, _)| n == name)
            .filter_map(|(_, v)| v.as_deref())
            .collect()
    }
    pub fn number<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T> {
        match self.value(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| {
                Error::invalid_argument(format!("{name}: '{v}' is not a valid number"))
            }),
        }
    }
    pub fn check_known(&self, known: &[&str]) -> Result<()> {
        for (n, v) in &self.opts {
            if !known.contains(&n.as_str()) && !GLOBAL_OPTIONS.contains(&n.as_str()) {
                return Err(Error::invalid_argument(format!("unknown option {n}")));
            }
            if v.is_none() && !FLAG_NAMES.contains(&n.as_str()) {
                return Err(Error::invalid_argument(format!("{n} needs a value")));
            }
        }
        Ok(())
    }
}
