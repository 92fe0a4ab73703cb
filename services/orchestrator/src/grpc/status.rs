//! The core's [`Error`] as a gRPC `Status`, in one place: its canonical
//! code, its message, and the field it names in the
//! [`baton_proto::FIELD_HEADER`] trailer.

use tonic::{Status, metadata::MetadataValue};

use crate::error::Error;

/// The status a gRPC caller gets for `e`.
pub fn status(e: Error) -> Status {
    let mut status = Status::new(e.code(), e.message());
    if let Some(value) = e.field().and_then(|f| MetadataValue::try_from(f).ok()) {
        status
            .metadata_mut()
            .insert(baton_proto::FIELD_HEADER, value);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_carries_the_code_message_and_field() {
        let s = status(Error::invalid(
            "limits.max_depth",
            "9 is over this server's maximum of 8",
        ));
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            s.message(),
            "limits.max_depth: 9 is over this server's maximum of 8"
        );
        assert_eq!(
            s.metadata()
                .get(baton_proto::FIELD_HEADER)
                .and_then(|v| v.to_str().ok()),
            Some("limits.max_depth")
        );
        let s = status(Error::ShuttingDown);
        assert_eq!(s.code(), tonic::Code::Unavailable);
        assert!(s.metadata().get(baton_proto::FIELD_HEADER).is_none());
        let peer = Error::Peer {
            code: tonic::Code::FailedPrecondition,
            message: "approval_id: approval \"a\" was already answered".into(),
            field: Some("approval_id".into()),
        };
        let s = status(peer);
        assert_eq!(s.code(), tonic::Code::FailedPrecondition);
        assert!(s.message().starts_with("approval_id: "));
    }
}
