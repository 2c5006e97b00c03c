//! relock-client (work in progress)
