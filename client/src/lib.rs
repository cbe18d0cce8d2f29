//! Placeholder: the client crate (issue 3).
