//! Object stores named by a URL: where archives and exports go.
//!
//! A [`RemoteLocation`] is what the catalog may record of a place: the URL,
//! and for S3 the endpoint, region and whether plain HTTP is allowed. It
//! never holds a secret: S3 credentials come from the usual `AWS_*`
//! environment variables each time a store is opened.
//!
//! Accepted URLs: `s3://BUCKET[/PREFIX]`, `file:///ABSOLUTE/PATH`, or a
//! local path. Every store is rooted at the location, so object paths
//! below it are relative (`segments/...`).
//!
//! Invariant: an error of a remote store names the location and says what
//! would help (credentials, the bucket, the endpoint); it never echoes a
//! secret.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{BackoffConfig, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};

/// A place outside the data directory: an S3 bucket and prefix, or a local
/// directory. Holds no secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteLocation {
    /// `s3://BUCKET[/PREFIX]`, `file:///PATH`, or a local path.
    pub url: String,
    /// The S3 endpoint (`http://127.0.0.1:9000` for a local server);
    /// `None`: AWS, or `AWS_ENDPOINT` from the environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The S3 region; `None`: `AWS_REGION` from the environment, else
    /// `us-east-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Whether an `http://` endpoint is allowed (a local test server).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_http: bool,
}

/// What a location's URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    S3 { bucket: String, prefix: String },
    Local(PathBuf),
}

/// An opened location: its store, rooted at the location.
#[derive(Debug, Clone)]
pub(crate) struct Remote {
    pub store: Arc<dyn ObjectStore>,
    pub location: RemoteLocation,
}

impl RemoteLocation {
    /// A location at `url`, with no S3 settings.
    pub fn new(url: impl Into<String>) -> Self {
        RemoteLocation {
            url: url.into(),
            endpoint: None,
            region: None,
            allow_http: false,
        }
    }

    fn target(&self) -> Result<Target> {
        let url = self.url.trim();
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(Error::param(format!(
                    "'{url}' names no bucket; accepted: s3://BUCKET[/PREFIX], file:///PATH or a local path"
                )));
            }
            return Ok(Target::S3 {
                bucket: bucket.to_string(),
                prefix: prefix.trim_matches('/').to_string(),
            });
        }
        if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(Error::param(format!(
                    "'{url}' is not an absolute file URL; accepted: file:///ABSOLUTE/PATH"
                )));
            }
            return Ok(Target::Local(PathBuf::from(path)));
        }
        if url.is_empty() || url.contains("://") {
            return Err(Error::param(format!(
                "'{url}' is not a location Cellar can write to; accepted: s3://BUCKET[/PREFIX], \
                 file:///PATH or a local path"
            )));
        }
        Ok(Target::Local(PathBuf::from(url)))
    }

    /// Opens the store, rooted at the location (a local directory is
    /// created). Nothing is read or written yet: see [`Remote::probe`].
    pub(crate) fn open(&self) -> Result<Remote> {
        let store: Arc<dyn ObjectStore> = match self.target()? {
            Target::Local(dir) => {
                std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
                Arc::new(
                    LocalFileSystem::new_with_prefix(&dir)
                        .map_err(|e| Error::io(format!("open {}", dir.display()), e))?,
                )
            }
            Target::S3 { bucket, prefix } => {
                let mut b = AmazonS3Builder::from_env()
                    .with_bucket_name(&bucket)
                    .with_retry(RetryConfig {
                        backoff: BackoffConfig::default(),
                        max_retries: 3,
                        retry_timeout: Duration::from_secs(30),
                    });
                if let Some(e) = &self.endpoint {
                    b = b.with_endpoint(e);
                }
                if let Some(r) = &self.region {
                    b = b.with_region(r);
                } else if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none() {
                    b = b.with_region("us-east-1");
                }
                if self.allow_http {
                    b = b.with_allow_http(true);
                }
                let s3 = b.build().map_err(|e| self.error("configure the S3 client for", e))?;
                if prefix.is_empty() {
                    Arc::new(s3)
                } else {
                    Arc::new(PrefixStore::new(s3, prefix.as_str()))
                }
            }
        };
        Ok(Remote {
            store,
            location: self.clone(),
        })
    }

    /// The same location with a relative local path made absolute (the
    /// catalog records locations, and a later process may run elsewhere).
    pub(crate) fn absolute(&self) -> Result<RemoteLocation> {
        let mut out = self.clone();
        if let Target::Local(dir) = self.target()?
            && dir.is_relative()
        {
            let abs = std::path::absolute(&dir).map_err(|e| Error::io(format!("resolve {}", dir.display()), e))?;
            out.url = abs.display().to_string();
        }
        Ok(out)
    }

    /// The URL, with the endpoint when there is one (for messages).
    pub fn describe(&self) -> String {
        match &self.endpoint {
            Some(e) => format!("{} (endpoint {e})", self.url),
            None => self.url.clone(),
        }
    }

    /// An error about this location: what was being done, and what the
    /// store said, with a hint for the usual causes.
    pub(crate) fn error(&self, doing: &str, e: impl std::fmt::Display) -> Error {
        let text = e.to_string();
        let hint = if ["169.254.169.254", "instance metadata", "169.254.170.2"]
            .iter()
            .any(|k| text.contains(k))
        {
            // object_store asks the instance metadata service when the
            // environment names no credentials.
            " (no S3 credentials were found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and \
             AWS_SESSION_TOKEN for temporary ones, in the environment)"
        } else if [
            "InvalidAccessKeyId",
            "SignatureDoesNotMatch",
            "AccessDenied",
            "403 Forbidden",
        ]
        .iter()
        .any(|k| text.contains(k))
        {
            " (access denied: check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
        } else if text.contains("NoSuchBucket") {
            " (the bucket does not exist: create it first)"
        } else if [
            "Connection refused",
            "error sending request",
            "dns error",
            "tcp connect",
        ]
        .iter()
        .any(|k| text.contains(k))
        {
            " (the server cannot be reached: check --endpoint)"
        } else if text.contains("builder error") && self.endpoint.as_deref().is_some_and(|e| e.starts_with("http:")) {
            " (an http:// endpoint needs --allow-http)"
        } else {
            ""
        };
        let at = match &self.endpoint {
            Some(e) => format!("{} at {e}", self.url),
            None => self.url.clone(),
        };
        Error::new(ErrorKind::Io, format!("{doing} {at}: {text}{hint}"))
    }
}

impl Remote {
    /// Writes, reads back and deletes a small object, so that missing
    /// credentials, a missing bucket or an unreachable server are found
    /// before any real work starts.
    pub async fn probe(&self) -> Result<()> {
        // A listing first: a missing bucket is refused there by every S3
        // server (some create it on a first write instead).
        self.store
            .list_with_delimiter(None)
            .await
            .map_err(|e| self.location.error("list", e))?;
        let path = Path::from(".cellar-probe");
        let body = b"cellar".to_vec();
        self.store
            .put(&path, PutPayload::from(body.clone()))
            .await
            .map_err(|e| self.location.error("write to", e))?;
        let back = self
            .store
            .get(&path)
            .await
            .map_err(|e| self.location.error("read from", e))?
            .bytes()
            .await
            .map_err(|e| self.location.error("read from", e))?;
        if back.as_ref() != body.as_slice() {
            return Err(Error::new(
                ErrorKind::Io,
                format!("{} returned other bytes than were written to it", self.location.url),
            ));
        }
        self.store
            .delete(&path)
            .await
            .map_err(|e| self.location.error("delete from", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed_or_refused_with_the_accepted_forms() {
        let t = |u: &str| RemoteLocation::new(u).target();
        assert_eq!(
            t("s3://b/a/b/").unwrap(),
            Target::S3 {
                bucket: "b".into(),
                prefix: "a/b".into()
            }
        );
        assert_eq!(
            t("s3://b").unwrap(),
            Target::S3 {
                bucket: "b".into(),
                prefix: "".into()
            }
        );
        assert_eq!(t("file:///x/y").unwrap(), Target::Local("/x/y".into()));
        assert_eq!(t("rel/dir").unwrap(), Target::Local("rel/dir".into()));
        for bad in ["s3://", "s3:///p", "file://rel", "gs://b/p", ""] {
            let e = t(bad).unwrap_err();
            assert!(e.to_string().contains("accepted"), "{bad}: {e}");
        }
    }
}
