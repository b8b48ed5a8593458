//! The comparison benchmark harness (`sessionlog bench`): sessionlog against its peers.
