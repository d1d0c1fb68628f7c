//! Moving objects between the data directory and an archive location:
//! streamed copies that compute the CRC-32C of what they move, read-backs
//! that check it, and the marker object.
//!
//! Invariants: a copy holds at most a few parts in memory whatever the
//! file's size; a copy that fails aborts its upload (nothing appears under
//! the name); every error names the location and what was being done.

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};

use super::{MARKER, Marker};
use crate::error::{Error, Result};
use crate::remote::Remote;
use crate::storage::{Storage, sync_object};

/// Bytes per part of a streamed copy, and parts in flight at once.
const PART_BYTES: usize = 8 << 20;
const PARTS: usize = 2;

/// Copies `from` in `src` to `to` in `dst`, streaming; returns the size
/// and CRC-32C of the bytes copied. `on_bytes` is told each chunk's size.
async fn copy(
    (src, from, read_err): (&dyn ObjectStore, &Path, &(dyn Fn(object_store::Error) -> Error + Sync)),
    (dst, to, write_err): (&dyn ObjectStore, &Path, &(dyn Fn(object_store::Error) -> Error + Sync)),
    on_bytes: &mut (dyn FnMut(u64) + Send),
) -> Result<(u64, u32)> {
    let mut stream = src.get(from).await.map_err(read_err)?.into_stream();
    let mut w = WriteMultipart::new_with_chunk_size(dst.put_multipart(to).await.map_err(write_err)?, PART_BYTES);
    let mut crc = 0u32;
    let mut size = 0u64;
    let streamed: Result<()> = async {
        while let Some(chunk) = stream.try_next().await.map_err(read_err)? {
            w.wait_for_capacity(PARTS).await.map_err(write_err)?;
            crc = crc32c::crc32c_append(crc, &chunk);
            size += chunk.len() as u64;
            w.write(&chunk);
            on_bytes(chunk.len() as u64);
        }
        Ok(())
    }
    .await;
    match streamed {
        Ok(()) => {
            w.finish().await.map_err(write_err)?;
            Ok((size, crc))
        }
        Err(e) => {
            let _ = w.abort().await;
            Err(e)
        }
    }
}

/// Uploads the local object `from` (in `storage`) to `to` at the archive
/// location; returns its size and CRC-32C.
pub(crate) async fn upload(
    storage: &Storage,
    from: &str,
    remote: &Remote,
    to: &str,
    on_bytes: &mut (dyn FnMut(u64) + Send),
) -> Result<(u64, u32)> {
    let read_err = |e: object_store::Error| Error::io(format!("read {from}"), e);
    let write_err = |e: object_store::Error| remote.location.error(&format!("upload {to} to"), e);
    copy(
        (&*storage.store, &Path::from(from), &read_err),
        (&*remote.store, &Path::from(to), &write_err),
        on_bytes,
    )
    .await
}

/// Downloads `from` at the archive location to the local object `to` (in
/// `storage`), durably; returns its size and CRC-32C.
pub(crate) async fn download(
    remote: &Remote,
    from: &str,
    storage: &Storage,
    to: &str,
    on_bytes: &mut (dyn FnMut(u64) + Send),
) -> Result<(u64, u32)> {
    let read_err = |e: object_store::Error| remote.location.error(&format!("download {from} from"), e);
    let write_err = |e: object_store::Error| Error::io(format!("write {to}"), e);
    let copied = copy(
        (&*remote.store, &Path::from(from), &read_err),
        (&*storage.store, &Path::from(to), &write_err),
        on_bytes,
    )
    .await?;
    sync_object(storage, to).await?;
    Ok(copied)
}

/// The size and CRC-32C of an object at the location as a full read
/// returns it, or `None` when there is no such object.
pub(crate) async fn stored_crc(remote: &Remote, path: &str) -> Result<Option<(u64, u32)>> {
    let err = |e| remote.location.error(&format!("read back {path} from"), e);
    crc_of(&*remote.store, path, &err).await
}

/// The size and CRC-32C of a local object.
pub(crate) async fn local_crc(storage: &Storage, path: &str) -> Result<Option<(u64, u32)>> {
    let err = |e| Error::io(format!("read {path}"), e);
    crc_of(&*storage.store, path, &err).await
}

async fn crc_of(
    store: &dyn ObjectStore,
    path: &str,
    err: &(dyn Fn(object_store::Error) -> Error + Sync),
) -> Result<Option<(u64, u32)>> {
    let mut stream = match store.get(&Path::from(path)).await {
        Ok(r) => r.into_stream(),
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(err(e)),
    };
    let (mut size, mut crc) = (0u64, 0u32);
    while let Some(chunk) = stream.try_next().await.map_err(err)? {
        crc = crc32c::crc32c_append(crc, &chunk);
        size += chunk.len() as u64;
    }
    Ok(Some((size, crc)))
}

/// Writes the marker object (checksummed like a manifest version).
pub(crate) async fn put_marker(remote: &Remote, marker: &Marker) -> Result<()> {
    let bytes = crate::manifest::encode(marker)?;
    remote
        .store
        .put(&Path::from(MARKER), PutPayload::from(bytes))
        .await
        .map_err(|e| remote.location.error(&format!("write {MARKER} to"), e))?;
    Ok(())
}

/// The marker object, or `None` when the location has none.
pub(crate) async fn get_marker(remote: &Remote) -> Result<Option<Marker>> {
    let path = Path::from(MARKER);
    let err = |e| remote.location.error(&format!("read {MARKER} from"), e);
    let bytes = match remote.store.get(&path).await {
        Ok(r) => r.bytes().await.map_err(err)?,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(err(e)),
    };
    crate::manifest::decode(&path, &bytes).map(Some)
}

/// Deletes objects at the location (those already gone are fine).
pub(crate) async fn delete_objects(remote: &Remote, paths: Vec<Path>) -> Result<()> {
    for p in paths {
        match remote.store.delete(&p).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(remote.location.error(&format!("delete {p} from"), e)),
        }
    }
    Ok(())
}
