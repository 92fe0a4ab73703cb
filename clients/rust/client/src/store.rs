//! The context-store client.

use std::time::Duration;

use futures::{Stream, StreamExt};
use tonic::transport::Channel;

use baton_proto::v1::{self as pb, context_store_client::ContextStoreClient};

use crate::{channel::bearer, error::Error};

/// Options of a put beyond trace, key and value.
#[derive(Debug, Clone, Default)]
pub struct PutOptions {
    /// Media type; empty means `application/octet-stream`.
    pub content_type: String,
    /// Time to live; `None` means the store's default.
    pub ttl: Option<Duration>,
    /// Write only if the slot is at this version (0: only if absent).
    pub expected_version: Option<u64>,
}

/// One slot of a batched write ([`StoreClient::put_many`]).
#[derive(Debug, Clone, Default)]
pub struct PutEntry {
    /// The key.
    pub key: String,
    /// The value.
    pub value: Vec<u8>,
    /// Content type, TTL and expected version.
    pub options: PutOptions,
}

impl PutEntry {
    /// An entry with default options.
    pub fn new(key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
            options: PutOptions::default(),
        }
    }
}

/// Which slots [`StoreClient::delete_many`] removes.
#[derive(Debug, Clone)]
pub enum DeleteSelection {
    /// These keys (absent ones are skipped).
    Keys(Vec<String>),
    /// Every slot whose key starts with this non-empty prefix.
    Prefix(String),
}

fn duration(d: Duration) -> baton_proto::wkt::Duration {
    baton_proto::wkt::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// A client of `baton.v1.ContextStore`. Cheap to clone; clones share the
/// connection.
#[derive(Clone)]
pub struct StoreClient {
    inner: ContextStoreClient<Channel>,
    decorate: Option<MetadataHook>,
    authorization: Option<tonic::metadata::AsciiMetadataValue>,
}

/// Adds metadata to every request of a client (a `traceparent`, say).
pub type MetadataHook = std::sync::Arc<dyn Fn(&mut tonic::metadata::MetadataMap) + Send + Sync>;

impl std::fmt::Debug for StoreClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreClient").finish_non_exhaustive()
    }
}

impl StoreClient {
    /// Connects to `endpoint` (`http://host:port`).
    pub async fn connect(endpoint: impl Into<String>) -> Result<Self, Error> {
        Ok(Self::new(crate::channel::channel(endpoint).await?))
    }

    /// Connects to `endpoint` with TLS settings (`https://` endpoints always
    /// speak TLS; see [`crate::tls`]).
    pub async fn connect_with(
        endpoint: impl Into<String>,
        tls: &crate::tls::ClientTls,
    ) -> Result<Self, Error> {
        Ok(Self::new(
            crate::channel::channel_with(endpoint, tls).await?,
        ))
    }

    /// A client over an existing channel.
    pub fn new(channel: Channel) -> Self {
        // Values may be up to the store's limit (1 MiB by default, more when
        // configured); let the server, not the client, enforce it.
        let inner = ContextStoreClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        Self {
            inner,
            decorate: None,
            authorization: None,
        }
    }

    /// Sends `authorization: Bearer <key>` with every call: a client API key
    /// of the store's `auth.api_keys_file` (the slots reached are that key's
    /// tenant's), or the orchestrator's service token.
    pub fn with_api_key(mut self, key: &str) -> Result<Self, Error> {
        self.authorization = Some(bearer(key)?);
        Ok(self)
    }

    /// Calls `hook` on the metadata of every request this client sends, as
    /// the request is sent (so it sees the caller's current state, such as
    /// the current OpenTelemetry context).
    pub fn with_metadata(mut self, hook: MetadataHook) -> Self {
        self.decorate = Some(hook);
        self
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(auth) = &self.authorization {
            request.metadata_mut().insert("authorization", auth.clone());
        }
        if let Some(hook) = &self.decorate {
            hook(request.metadata_mut());
        }
        request
    }

    /// The generated client, for calls this wrapper does not cover.
    pub fn raw(&self) -> ContextStoreClient<Channel> {
        self.inner.clone()
    }

    /// Writes a slot with default options.
    pub async fn put(
        &self,
        trace_id: &str,
        key: &str,
        value: Vec<u8>,
    ) -> Result<pb::PutResponse, Error> {
        self.put_with(trace_id, key, value, PutOptions::default())
            .await
    }

    /// Writes a slot.
    pub async fn put_with(
        &self,
        trace_id: &str,
        key: &str,
        value: Vec<u8>,
        options: PutOptions,
    ) -> Result<pb::PutResponse, Error> {
        let request = pb::PutRequest {
            trace_id: trace_id.to_owned(),
            key: key.to_owned(),
            value,
            content_type: options.content_type,
            ttl: options.ttl.map(duration),
            expected_version: options.expected_version,
        };
        Ok(self
            .inner
            .clone()
            .put(self.request(request))
            .await?
            .into_inner())
    }

    /// Writes several slots of a trace in one call, all or none; answers
    /// each entry's version and expiry, in entry order.
    pub async fn put_many(
        &self,
        trace_id: &str,
        entries: Vec<PutEntry>,
    ) -> Result<Vec<pb::PutResponse>, Error> {
        let request = pb::PutManyRequest {
            trace_id: trace_id.to_owned(),
            entries: entries
                .into_iter()
                .map(|e| pb::PutEntry {
                    key: e.key,
                    value: e.value,
                    content_type: e.options.content_type,
                    ttl: e.options.ttl.map(duration),
                    expected_version: e.options.expected_version,
                })
                .collect(),
        };
        Ok(self
            .inner
            .clone()
            .put_many(self.request(request))
            .await?
            .into_inner()
            .written)
    }

    /// Removes the selected slots of a trace in one call.
    pub async fn delete_many(
        &self,
        trace_id: &str,
        selection: DeleteSelection,
    ) -> Result<pb::DeleteManyResponse, Error> {
        let (keys, prefix) = match selection {
            DeleteSelection::Keys(keys) => (keys, String::new()),
            DeleteSelection::Prefix(p) => (Vec::new(), p),
        };
        let request = pb::DeleteManyRequest {
            trace_id: trace_id.to_owned(),
            keys,
            prefix,
        };
        Ok(self
            .inner
            .clone()
            .delete_many(self.request(request))
            .await?
            .into_inner())
    }

    /// Reads a slot.
    pub async fn get(&self, trace_id: &str, key: &str) -> Result<pb::GetResponse, Error> {
        let request = pb::GetRequest {
            trace_id: trace_id.to_owned(),
            key: key.to_owned(),
        };
        Ok(self
            .inner
            .clone()
            .get(self.request(request))
            .await?
            .into_inner())
    }

    /// Lists a trace's slots under `prefix` (empty: all), following every
    /// page; the usage figures are those of the last page.
    pub async fn list(&self, trace_id: &str, prefix: &str) -> Result<pb::ListResponse, Error> {
        let mut all = self.list_page(trace_id, prefix, 0, "").await?;
        let mut token = std::mem::take(&mut all.next_page_token);
        while !token.is_empty() {
            let page = self.list_page(trace_id, prefix, 0, &token).await?;
            all.slots.extend(page.slots);
            all.used_bytes = page.used_bytes;
            all.used_keys = page.used_keys;
            token = page.next_page_token;
        }
        Ok(all)
    }

    /// Lists one page of a trace's slots under `prefix`: at most
    /// `page_size` (0: the server's default), after the listing that
    /// `page_token` continues (empty: from the first key).
    pub async fn list_page(
        &self,
        trace_id: &str,
        prefix: &str,
        page_size: i32,
        page_token: &str,
    ) -> Result<pb::ListResponse, Error> {
        let request = pb::ListRequest {
            trace_id: trace_id.to_owned(),
            prefix: prefix.to_owned(),
            page_size,
            page_token: page_token.to_owned(),
        };
        Ok(self
            .inner
            .clone()
            .list(self.request(request))
            .await?
            .into_inner())
    }

    /// Deletes a slot, only at `expected_version` when given.
    pub async fn delete(
        &self,
        trace_id: &str,
        key: &str,
        expected_version: Option<u64>,
    ) -> Result<u64, Error> {
        let request = pb::DeleteRequest {
            trace_id: trace_id.to_owned(),
            key: key.to_owned(),
            expected_version,
        };
        Ok(self
            .inner
            .clone()
            .delete(self.request(request))
            .await?
            .into_inner()
            .version)
    }

    /// Deletes every slot of a trace; returns how many there were.
    pub async fn clear(&self, trace_id: &str) -> Result<u64, Error> {
        let request = pb::ClearRequest {
            trace_id: trace_id.to_owned(),
        };
        Ok(self
            .inner
            .clone()
            .clear(self.request(request))
            .await?
            .into_inner()
            .deleted)
    }

    /// Watches a trace's changes under `prefix`. Changes made after this
    /// returns are delivered.
    pub async fn watch(
        &self,
        trace_id: &str,
        prefix: &str,
    ) -> Result<impl Stream<Item = Result<pb::WatchResponse, Error>> + use<>, Error> {
        let request = pb::WatchRequest {
            trace_id: trace_id.to_owned(),
            prefix: prefix.to_owned(),
        };
        let stream = self
            .inner
            .clone()
            .watch(self.request(request))
            .await?
            .into_inner();
        Ok(stream.map(|item| item.map_err(Error::from)))
    }
}
