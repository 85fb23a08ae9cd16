//! The s3 store's S3 calls. A held message is one object, `<prefix>held/<id>`, holding
//! exactly the directory store's record (`record::encode`: its meta and bytes, with a
//! digest); written once with `If-None-Match: *` (an object is never overwritten) and a
//! SHA-256 checksum (S3 checks the upload), read back whole, copied to `failed/` or
//! `damaged/` when given up or unreadable, and deleted.

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::ChecksumAlgorithm;

use super::client::Clients;
use super::CallFailed;
use crate::observe::cause;

/// Where an object lives: under `held/` until released, `failed/` or `damaged/` after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Held,
    Failed,
    Damaged,
}

impl Place {
    fn dir(self) -> &'static str {
        match self {
            Place::Held => "held/",
            Place::Failed => "failed/",
            Place::Damaged => "damaged/",
        }
    }
}

/// The objects of one bucket, under one prefix.
pub struct Objects {
    pub bucket: String,
    pub prefix: String,
}

impl Objects {
    /// The name of message `id`'s object in `place`.
    pub fn name(&self, place: Place, id: &str) -> String {
        format!("{}{}{id}", self.prefix, place.dir())
    }

    /// Writes a new object; an error when one of that name exists (never overwritten).
    pub async fn put_new(&self, c: &Clients, name: &str, bytes: Vec<u8>) -> Result<(), CallFailed> {
        let put = (c.s3.put_object())
            .bucket(&self.bucket)
            .key(name)
            .if_none_match("*")
            .checksum_algorithm(ChecksumAlgorithm::Sha256)
            .body(ByteStream::from(bytes))
            .send();
        let put = c.call("s3", "PutObject", put).await;
        put.map(|_| ()).map_err(|e| CallFailed::of(&e))
    }

    /// The bytes of object `name`; `None` when there is none.
    pub async fn get(&self, c: &Clients, name: &str) -> Result<Option<Vec<u8>>, CallFailed> {
        let get = c.s3.get_object().bucket(&self.bucket).key(name).send();
        let got = match c.call("s3", "GetObject", get).await {
            Ok(got) => got,
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => {
                return Ok(None);
            }
            Err(e) => return Err(CallFailed::of(&e)),
        };
        let bytes = got
            .body
            .collect()
            .await
            .map_err(|e| CallFailed(cause::short(&e)))?;
        Ok(Some(bytes.to_vec()))
    }

    /// Deletes object `name` (none there is no error).
    pub async fn delete(&self, c: &Clients, name: &str) -> Result<(), CallFailed> {
        let delete = c.s3.delete_object().bucket(&self.bucket).key(name).send();
        let deleted = c.call("s3", "DeleteObject", delete).await;
        deleted.map(|_| ()).map_err(|e| CallFailed::of(&e))
    }

    /// Copies object `from` to `to` in the bucket.
    pub async fn copy(&self, c: &Clients, from: &str, to: &str) -> Result<(), CallFailed> {
        let source = format!("{}/{from}", self.bucket);
        let copy = (c.s3.copy_object())
            .bucket(&self.bucket)
            .copy_source(source)
            .key(to)
            .send();
        let copied = c.call("s3", "CopyObject", copy).await;
        copied.map(|_| ()).map_err(|e| CallFailed::of(&e))
    }
}
