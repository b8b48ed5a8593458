//! A simulated, fault-injecting file system for crash tests (see issue "crash safety").
