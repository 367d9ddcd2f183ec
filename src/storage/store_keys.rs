//! Which `key=value` options are object-store settings: the `object_store` crate's
//! configuration key names of the backend a URL names. A sibling of `options`, outside
//! `remote`: option parsing must not depend on the remote layer, which depends on it.

use object_store::aws::AmazonS3ConfigKey;
use object_store::azure::AzureConfigKey;
use object_store::gcp::GoogleConfigKey;
use object_store::ClientConfigKey;

use crate::error::{Error, Result};
use crate::storage::location::{Location, Scheme};

/// Whether `key` is a setting of the backend of `location` (of any backend for a path).
pub(crate) fn check_key(key: &str, location: &Location) -> Result<()> {
    let known = |scheme: Scheme| match scheme {
        Scheme::S3 => key.parse::<AmazonS3ConfigKey>().is_ok(),
        Scheme::Gcs => key.parse::<GoogleConfigKey>().is_ok(),
        Scheme::Azure => key.parse::<AzureConfigKey>().is_ok(),
        Scheme::Http => key.parse::<ClientConfigKey>().is_ok(),
    };
    let all = [Scheme::S3, Scheme::Gcs, Scheme::Azure, Scheme::Http];
    let (ok, what) = match location {
        Location::Remote(u) => (known(u.scheme), format!("a {} setting", u.scheme.name())),
        Location::Local(_) => (
            all.into_iter().any(known),
            "an object-store setting".to_string(),
        ),
    };
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_argument(format!(
            "unknown option \"{key}\": neither max_concurrency, timeout_ms, retries nor {what} \
             (object_store's configuration key names)"
        )))
    }
}
