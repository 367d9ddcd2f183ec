//! Building an `object_store` client for a URL and options: the backend's builder filled from
//! the standard environment, then our timeouts and retries, then the caller's settings.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::http::HttpBuilder;
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, RetryConfig};

use crate::error::{Error, Result};
use crate::storage::location::{RemoteUrl, Scheme};
use crate::storage::options::Options;

/// Total time one operation may take: every attempt's timeout plus the backoff between
/// attempts (exponential from 100 ms, at most 5 s each).
pub(crate) fn operation_budget(o: &Options) -> Duration {
    let mut backoff = Duration::ZERO;
    let mut step = Duration::from_millis(100);
    for _ in 0..o.retries {
        backoff += step;
        step = (step * 2).min(Duration::from_secs(5));
    }
    o.timeout * (o.retries as u32 + 1) + backoff
}

fn retry_config(o: &Options) -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            base: 2.0,
        },
        max_retries: o.retries,
        retry_timeout: operation_budget(o),
    }
}

/// The client settings every backend gets before the caller's: the per-request timeout
/// (also bounding connection set-up), and plain HTTP when the URL or endpoint says so.
fn base_client_settings(url: &RemoteUrl, o: &Options) -> Vec<(ClientConfigKey, String)> {
    let ms = o.timeout.as_millis();
    let mut v = vec![
        (ClientConfigKey::Timeout, format!("{ms}ms")),
        (ClientConfigKey::ConnectTimeout, format!("{ms}ms")),
    ];
    let endpoint_is_http = o
        .store
        .iter()
        .any(|(k, v)| k.contains("endpoint") && v.starts_with("http://"))
        || std::env::var("AWS_ENDPOINT_URL").is_ok_and(|v| v.starts_with("http://"))
        || std::env::var("AWS_ENDPOINT").is_ok_and(|v| v.starts_with("http://"));
    if url.base.starts_with("http://") || endpoint_is_http {
        v.push((ClientConfigKey::AllowHttp, "true".into()));
    }
    v
}

/// Builds the client for `url` (its bucket / host; keys are relative to the bucket).
pub(crate) fn build_store(url: &RemoteUrl, o: &Options) -> Result<Arc<dyn ObjectStore>> {
    let base = base_client_settings(url, o);
    let fail = |e: object_store::Error| {
        let detail = super::errors::one_line(&e.to_string(), &o.secrets());
        Error::invalid_argument(format!(
            "{url}: cannot configure the {} client: {detail}",
            url.scheme.name()
        ))
    };
    macro_rules! configure {
        ($builder:expr, $key:ty) => {{
            let mut b = $builder.with_retry(retry_config(o));
            for (k, v) in &base {
                b = b.with_config(<$key>::Client(*k), v.clone());
            }
            for (k, v) in &o.store {
                // Checked by Options::parse.
                if let Ok(key) = k.parse::<$key>() {
                    b = b.with_config(key, v.clone());
                }
            }
            Arc::new(b.build().map_err(fail)?) as Arc<dyn ObjectStore>
        }};
    }
    Ok(match url.scheme {
        Scheme::S3 => configure!(
            AmazonS3Builder::from_env().with_url(url.base.clone()),
            AmazonS3ConfigKey
        ),
        Scheme::Gcs => configure!(
            GoogleCloudStorageBuilder::from_env().with_url(url.base.clone()),
            GoogleConfigKey
        ),
        Scheme::Azure => configure!(
            MicrosoftAzureBuilder::from_env().with_url(url.base.clone()),
            AzureConfigKey
        ),
        Scheme::Http => {
            let mut b = HttpBuilder::new()
                .with_url(url.base.clone())
                .with_retry(retry_config(o));
            for (k, v) in &base {
                b = b.with_config(*k, v.clone());
            }
            for (k, v) in &o.store {
                if let Ok(key) = k.parse::<ClientConfigKey>() {
                    b = b.with_config(key, v.clone());
                }
            }
            Arc::new(b.build().map_err(fail)?) as Arc<dyn ObjectStore>
        }
    })
}
