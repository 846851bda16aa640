//! [`PoolId`] and [`LeaseId`] from text: any UUID form, or
//! [`Error::InvalidArgument`] naming the field.

use std::str::FromStr;

use uuid::Uuid;

use crate::error::Error;
use crate::id::{LeaseId, PoolId};

fn parse(field: &'static str, s: &str) -> Result<Uuid, Error> {
    Uuid::parse_str(s).map_err(|e| {
        Error::invalid(
            field,
            "a UUID, such as 67e55044-10b1-426f-9247-bb680e5fe0c8",
            format!("{s:?} ({e})"),
        )
    })
}

impl FromStr for PoolId {
    type Err = Error;

    /// Parses any UUID form `uuid` accepts; a malformed string is
    /// [`Error::InvalidArgument`] naming the field `pool_id`.
    fn from_str(s: &str) -> Result<Self, Error> {
        parse("pool_id", s).map(Self::from)
    }
}

impl FromStr for LeaseId {
    type Err = Error;

    /// Parses any UUID form `uuid` accepts; a malformed string is
    /// [`Error::InvalidArgument`] naming the field `lease_id`.
    fn from_str(s: &str) -> Result<Self, Error> {
        parse("lease_id", s).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_id_names_field() {
        let err = "nope".parse::<PoolId>().unwrap_err();
        assert!(matches!(
            err,
            Error::InvalidArgument {
                field: "pool_id",
                ..
            }
        ));
        assert!(err.to_string().contains("pool_id"), "{err}");
        let err = "".parse::<LeaseId>().unwrap_err();
        assert!(matches!(
            err,
            Error::InvalidArgument {
                field: "lease_id",
                ..
            }
        ));
    }
}
