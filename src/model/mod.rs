//! The data model, with no storage in it: values and primary keys
//! ([`types`]), their memcomparable encoding ([`key`]), table schemas and
//! limits ([`schema`]), secondary index definitions ([`index`]), the requests of the row API ([`api`]), a row's
//! mutations and its resolved state with the visibility rules ([`row`]),
//! and the binary codec the WAL and segments share ([`codec`]).
//!
//! Invariant: nothing here imports from the storage layers or above; every
//! layer of the engine speaks these types. The rules are described in
//! `docs/model.md`.

pub(crate) mod api;
pub(crate) mod capacity;
pub(crate) mod codec;
pub(crate) mod filter;
pub(crate) mod index;
pub(crate) mod key;
pub(crate) mod row;
pub(crate) mod schema;
pub(crate) mod types;
