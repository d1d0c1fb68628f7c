//! The one public error type.
//!
//! Every refusal carries an [`ErrorKind`] that tells the caller what to do
//! (fix the input, retry, give up) and a message that names the table,
//! column, key or file and says what would have been accepted.
//!
//! Invariant: every message names what was wrong and what would be
//! accepted.

use std::fmt;

/// What went wrong, in Tablestore's vocabulary (see `docs/model.md`, "Errors").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A request parameter is out of range or malformed.
    ParameterInvalid,
    /// A primary key does not match the table's schema.
    InvalidPk,
    /// The table (or another named object) does not exist.
    ObjectNotExist,
    /// The table already exists.
    ObjectAlreadyExist,
    /// A row condition failed; nothing was changed.
    ConditionCheckFail,
    /// Another writer holds the row (a local transaction).
    RowOperationConflict,
    /// Too many columns in one request.
    OutOfColumnCountLimit,
    /// A row or value is larger than allowed.
    OutOfRowSizeLimit,
    /// The data directory is held by another process.
    DatabaseLocked,
    /// An operating-system or object-store I/O error.
    Io,
    /// Stored data failed a checksum or could not be decoded.
    Corruption,
    /// The database was closed, or a background task failed.
    Closed,
    /// The table refuses writes: it is archived, or being archived; or
    /// the database was opened read-only.
    ReadOnly,
    /// A stream iterator points to records that have expired.
    TrimmedDataAccess,
}

impl ErrorKind {
    /// Every kind.
    pub const ALL: [ErrorKind; 14] = [
        ErrorKind::ParameterInvalid,
        ErrorKind::InvalidPk,
        ErrorKind::ObjectNotExist,
        ErrorKind::ObjectAlreadyExist,
        ErrorKind::ConditionCheckFail,
        ErrorKind::RowOperationConflict,
        ErrorKind::OutOfColumnCountLimit,
        ErrorKind::OutOfRowSizeLimit,
        ErrorKind::DatabaseLocked,
        ErrorKind::Io,
        ErrorKind::Corruption,
        ErrorKind::Closed,
        ErrorKind::ReadOnly,
        ErrorKind::TrimmedDataAccess,
    ];

    /// The stable name used in CLI output (`"kind":"..."`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::ParameterInvalid => "ParameterInvalid",
            ErrorKind::InvalidPk => "InvalidPK",
            ErrorKind::ObjectNotExist => "ObjectNotExist",
            ErrorKind::ObjectAlreadyExist => "ObjectAlreadyExist",
            ErrorKind::ConditionCheckFail => "ConditionCheckFail",
            ErrorKind::RowOperationConflict => "RowOperationConflict",
            ErrorKind::OutOfColumnCountLimit => "OutOfColumnCountLimit",
            ErrorKind::OutOfRowSizeLimit => "OutOfRowSizeLimit",
            ErrorKind::DatabaseLocked => "DatabaseLocked",
            ErrorKind::Io => "IO",
            ErrorKind::Corruption => "Corruption",
            ErrorKind::Closed => "Closed",
            ErrorKind::ReadOnly => "ReadOnly",
            ErrorKind::TrimmedDataAccess => "TrimmedDataAccess",
        }
    }

    /// True for errors caused by the request itself (the CLI exits 2 on them).
    pub fn is_user_error(self) -> bool {
        matches!(
            self,
            ErrorKind::ParameterInvalid
                | ErrorKind::InvalidPk
                | ErrorKind::OutOfColumnCountLimit
                | ErrorKind::OutOfRowSizeLimit
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Cellar's error: a kind plus a message meant for a person.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

impl Error {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message: what was wrong and what would be accepted.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn param(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::ParameterInvalid, message)
    }

    pub(crate) fn invalid_pk(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidPk, message)
    }

    pub(crate) fn corruption(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Corruption, message)
    }

    pub(crate) fn io(context: impl fmt::Display, err: impl fmt::Display) -> Self {
        Error::new(ErrorKind::Io, format!("{context}: {err}"))
    }

    pub(crate) fn closed() -> Self {
        Error::new(
            ErrorKind::Closed,
            "the database is closed or its writer stopped after an I/O error; reopen it",
        )
    }
}

/// Cellar's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<object_store::Error> for Error {
    fn from(e: object_store::Error) -> Self {
        Error::new(ErrorKind::Io, format!("object store: {e}"))
    }
}

impl From<parquet::errors::ParquetError> for Error {
    /// Decoding failures are corruption; a failure of what Parquet wrote
    /// to or read from (a file, an upload) keeps its own kind.
    fn from(e: parquet::errors::ParquetError) -> Self {
        if let parquet::errors::ParquetError::External(inner) = &e {
            if let Some(ours) = inner.downcast_ref::<Error>() {
                return ours.clone();
            }
            // A file cut short or holding what does not decode is still
            // damage, whatever layer noticed.
            if let Some(io) = inner.downcast_ref::<std::io::Error>()
                && !matches!(
                    io.kind(),
                    std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::InvalidData
                )
            {
                return Error::new(ErrorKind::Io, format!("parquet: {e}"));
            }
        }
        Error::new(ErrorKind::Corruption, format!("parquet: {e}"))
    }
}

impl From<arrow::error::ArrowError> for Error {
    fn from(e: arrow::error::ArrowError) -> Self {
        Error::new(ErrorKind::Corruption, format!("arrow: {e}"))
    }
}

#[cfg(test)]
mod kind_tests {
    use super::ErrorKind;

    /// docs/model.md's table of kinds lists each kind once, as printed.
    #[test]
    fn the_documented_kinds_are_the_printed_ones() {
        let doc = include_str!("../docs/model.md");
        let table = &doc[doc.find("## Errors").expect("an Errors section")..];
        let mut documented: Vec<&str> = table
            .lines()
            .skip_while(|l| !l.starts_with("| kind"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .flat_map(|l| l.split('|').nth(1).unwrap_or("").split('/'))
            .map(|k| k.trim().trim_matches('`'))
            .collect();
        documented.sort();
        let mut printed: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        printed.sort();
        assert_eq!(documented, printed);
    }
}
